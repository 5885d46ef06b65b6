-- tollgate: the end of every script, after the algorithm's module `ALG`.
--
-- ALG.TAG                       names the algorithm in stored states ('<tag>:<state>')
-- ALG.NPARAMS                   how many ARGV entries one tier's parameters take
-- ALG.params(ARGV, i)           a tier's parameters from ARGV[i], ARGV[i + 1], ...
-- ALG.fresh(p)                  the state of a key never seen
-- ALG.decode(text, p)           a stored state; nil when the text is not one
-- ALG.encode(state, p)          the text to store
-- ALG.check(state, now, cost, p)   the decision, and the next state or nil when unchanged
-- ALG.refund(state, now, cost, p, receipt)  the state after giving back what the admission
--                               with that receipt (decimal text, as ALG.check returned it) took,
--                               or nil when unchanged
-- ALG.charge(state, now, cost, p)  (modules that carry a debt) the state charged `cost` more
--                               whatever is left, or nil when unchanged (a cost of 0); a cost
--                               of 2^53 or more is read exactly from ARGV[2]
-- ALG.fresh_in(state, now, p)   nanoseconds until the state is fresh again (<= 0: fresh now)
-- ALG.span(p)                   the longest a state takes to be fresh again after a request
--                               (leases aside), in ns: how long keys are kept past that
-- ALG.lease_life(state, now, p)  (leased modules) how long a slice counted at `now` may be
--                               spent later without changing any decision, in ns
-- ALG.lease_begin(state, now, p) (optional) the state a lease at `now` is decided with, and
--                               every check after it while its slice may be out
--
-- Every tier must allow a request, and a denied request changes no tier (all or nothing).
--
-- KEYS: each tier's key, then the key's block (the end of the block, as an absolute time in
-- decimal ns, with a PX TTL to it). Modes besides 'c' and 'r': 'x' deletes every key (a reset),
-- 'b' blocks the key for ARGV[2] ns (decimal) from NOW, or keeps a block that ends later, 'd'
-- charges every tier ARGV[2] more whatever it has left (a cost settled above its reservation:
-- a debt), blocked or not, and answers the key's standing as 'r' does; a module without
-- ALG.charge refuses it before it reads or writes anything.
--
-- Carrying usage over (a live layer's new quotas): modes 'C', 'R' and 'D' are 'c', 'r' and 'd'
-- for a table that took over from tables of other quotas (generations, the latest first). KEYS are
-- then the table's tiers, each generation's tiers, and the blocks; ARGV ends with each
-- generation's parameters, each generation's age (ns since it was taken over), the table's id,
-- HOLD (whole ms) and the counts 'n,m1,m2,...' (the table's tiers, then each generation's).
-- The table stamps the states it writes with its id and what it carried over into them
-- ('<tag>@<id>+<count>:<state>') and keeps them at least HOLD ms. Each check first works out
-- what the key used: through the generations, the oldest first, as if it had been carried
-- over at each change (what it used when the change came, in requests, charged on a fresh
-- state of the next quotas at that moment, up to what a fresh key may take at once), each
-- generation's own state counting too where it shows more (a stamped one, plus what was used
-- before it since it carried over). A tier whose state is stamped (by any server's table of
-- these quotas) is charged what that adds to the count it records: servers not yet changed
-- admit under the earlier quotas meanwhile, and each of those admissions counts. Any other
-- tier (none stored, or written before the change) takes the carried state where that shows
-- more used than its own.
-- The mode's letter may be followed by how many blocks kept under earlier policy names (a
-- live layer's unnamed quotas are named by their figures) come before the policy's own: a
-- check reads them all, a reset deletes them, a block is written to each.
local MODE, EXTRA = string.sub(ARGV[1], 1, 1), tonumber(string.sub(ARGV[1], 2)) or 0
local tiers = #KEYS - 1 - EXTRA
local BLOCK = KEYS[#KEYS]
-- The first block key.
local BLOCKS = #KEYS - EXTRA

if MODE == 'x' then
  redis.call('DEL', unpack(KEYS))
  return {}
end

-- A block's end as whole seconds and nanoseconds; nil when the text is not a time.
local function bsplit(text)
  if not text or not string.find(text, '^%d+$') or #text > 20 or #text < 10 then
    return nil
  end
  return tonumber(string.sub(text, 1, -10)), tonumber(string.sub(text, -9))
end

if MODE == 'b' then
  local d = ARGV[2]
  if not string.find(d, '^%d+$') or #d > 20 then
    return redis.error_reply('ERR tollgate: a block length is decimal nanoseconds')
  end
  local ds, dn = 0, tonumber(string.sub(d, -9))
  if #d > 9 then
    ds = tonumber(string.sub(d, 1, -10))
  end
  local us, un = NOW_S + ds, NOW + dn
  if un >= E9 then
    us, un = us + 1, un - E9
  end
  -- Kept two spans of the policy's longest tier past its end: under `volatile-ttl` a block
  -- outlives every state written while it lasts that is not limited (see `lifetime`).
  local span = 0
  for i = 1, tiers do
    span = math.max(span, ALG.span(ALG.params(ARGV, 5 + (i - 1) * ALG.NPARAMS)))
  end
  span = idiv(span + 999999, 1000000)
  -- Past the end of the clock (2^64 - 1 ns) the block ends there.
  if us > 18446744073 or (us == 18446744073 and un > 709551615) then
    us, un = 18446744073, 709551615
  end
  -- Whole milliseconds to the end, rounded up.
  local ms = (us - NOW_S) * 1000 + idiv(un - NOW + 999999, 1000000)
  if ms <= 0 then
    return {}
  end
  -- Written under every name the call gives, so that the block holds on the servers that
  -- read any one of them (servers not yet changed to the policy's new quotas read an earlier
  -- name); each keeps a block that ends later.
  for k = BLOCKS, #KEYS do
    local ks, kn = bsplit(redis.call('GET', KEYS[k]))
    if not ks or ks < us or (ks == us and kn < un) then
      redis.call('SET', KEYS[k], string.format('%d%09d', us, un), 'PX', string.format('%d', ms + 2 * span))
    end
  end
  return {}
end

-- A carrying table's generations and stamp.
local carrying = MODE == 'C' or MODE == 'R' or MODE == 'D'
local MINE, HOLD, gens = nil, 0, {}
if carrying then
  local counts = {}
  for c in string.gmatch(ARGV[#ARGV], '%d+') do
    counts[#counts + 1] = tonumber(c)
  end
  tiers = counts[1] or 0
  MINE, HOLD = ARGV[#ARGV - 2], tonumber(ARGV[#ARGV - 1]) or 0
  local key, old, ages = tiers + 1, 0, #ARGV - 2 - (#counts - 1)
  for g = 2, #counts do
    old = old + counts[g]
  end
  local arg = ages - old * ALG.NPARAMS
  for g = 2, #counts do
    local age = tonumber(ARGV[ages + g - 2]) or 0
    gens[g - 1] = { key = key, n = counts[g], arg = arg, ended = NOW - age }
    key, arg = key + counts[g], arg + counts[g] * ALG.NPARAMS
  end
  if tiers < 1 or key ~= BLOCKS then
    return redis.error_reply('ERR tollgate: the keys do not match the counts of a carrying call')
  end
end
local mode = string.lower(MODE)
if mode == 'd' and not ALG.charge then
  return redis.error_reply('ERR tollgate: ' .. ALG.TAG .. ' states carry no debt: a cost '
    .. 'settled above its reservation is not charged to them')
end

-- The state stored under `key` for parameters `p`, the id of the carrying table that wrote it
-- (nil for none) and what it had carried over into it (nil when not recorded); nil when none is
-- stored; false and an error message when the key holds no state of this algorithm.
local TAG, STAMP = ALG.TAG .. ':', ALG.TAG .. '@'
local function read(key, p, i)
  local stored = redis.call('GET', key)
  if not stored then
    return nil
  end
  local text, owner, carried
  if string.sub(stored, 1, #TAG) == TAG then
    text = string.sub(stored, #TAG + 1)
  elseif string.sub(stored, 1, #STAMP) == STAMP then
    local colon = string.find(stored, ':', #STAMP + 1, true)
    if colon then
      text, owner = string.sub(stored, colon + 1), string.sub(stored, #STAMP + 1, colon - 1)
    end
    local id, count = string.match(owner or '', '^(%x+)%+(%d+)$')
    if id and #count <= 15 then
      owner, carried = id, tonumber(count)
    end
  end
  if not text then
    return false, 'ERR tollgate: the key of tier ' .. i .. ' holds no ' .. ALG.TAG .. ' state'
  end
  local state = ALG.decode(text, p)
  if not state then
    return false, 'ERR tollgate: the key of tier ' .. i .. ' holds a corrupt ' .. ALG.TAG .. ' state'
  end
  return state, owner, carried
end

local cost = tonumber(ARGV[2])
-- `counted[i]`: what the state of tier i records as carried over into it (see below).
local params, states, stored, counted = {}, {}, {}, {}
for i = 1, tiers do
  local p = ALG.params(ARGV, 5 + (i - 1) * ALG.NPARAMS)
  params[i] = p
  local state, owner, carried = read(KEYS[i], p, i)
  if state == false then
    return redis.error_reply(owner)
  elseif state then
    states[i], stored[i] = state, true
    counted[i] = owner and carried
  else
    states[i] = ALG.fresh(p)
  end
end
-- `state` without its lease margin (a bucket's, see ALG.lease_begin): what slices out hold
-- back is not what the key used.
local function bare(state)
  if state.lease == nil then
    return state
  end
  local copy = {}
  for k, v in pairs(state) do
    copy[k] = v
  end
  copy.lease = nil
  return copy
end

-- How long the key of `state` is kept, in whole ms; 0 when the state is fresh (the key is
-- deleted). Until the state is fresh again, rounded up; past that by the share of its
-- capacity the key has used of the quota's span (ALG.span, in whole ms, rounded down), and by
-- a whole span more while it is limited (no request of cost 1 passes). Under Redis's
-- `volatile-ttl`, which evicts the keys that expire first, a key at its limit outlives every
-- key written since that is not limited (which expires within two spans of its write), and
-- among the others a key that used more outlives a key that used less, much as the memory
-- store forgets keys. A key is kept at most two spans longer than its state matters.
-- `can`, when known, is what the key can take at once (what a check of cost 0 answers as
-- remaining; counted with a lease margin it is smaller, which only keeps the key longer).
local function lifetime(state, p, can)
  local fresh = ALG.fresh_in(state, NOW, p)
  if fresh <= 0 then
    return 0
  end
  local ms = idiv(fresh + 999999, 1000000)
  if fresh > 576460752303423488 then
    -- A debt past 2^59 ns (18 years) is not exact in ms: a ms more, never one less.
    ms = ms + 1
  end
  -- What a fresh key could take at once, found once per tier and call.
  if p.could == nil then
    p.could = tonumber(ALG.check(ALG.fresh(p), NOW, 0, p)[2]) or 0
  end
  local could = p.could
  if could <= 0 then
    return ms
  end
  can = math.max(tonumber(can or ALG.check(bare(state), NOW, 0, p)[2]) or 0, 0)
  local span = idiv(ALG.span(p) + 999999, 1000000)
  local share = math.max(could - math.min(can, could), 0)
  if span * share < 9007199254740992 then
    ms = ms + idiv(span * share, could)
  else
    ms = ms + math.floor(span / could * share)
  end
  if can == 0 then
    ms = ms + span
  end
  return ms
end

local function save(i, state, stamped, can)
  local ms, head = lifetime(state, params[i], can), TAG
  -- A state fresh again is deleted, stamped or not (some fresh states have no text: a
  -- sliding log's or window's); its next check carries over again, which only charges more.
  if stamped and ms > 0 and counted[i] then
    ms, head = math.max(ms, HOLD), STAMP .. MINE .. string.format('+%d', counted[i]) .. ':'
  end
  if ms <= 0 then
    redis.call('DEL', KEYS[i])
  else
    redis.call('SET', KEYS[i], head .. ALG.encode(state, params[i]), 'PX', string.format('%d', ms))
  end
end

-- f(), with the modules that read the wide clock (wide.lua) reading `t` (ns after NOW_S).
local function at(t, f)
  if not WNOW then
    return f()
  end
  local now, s = WNOW, idiv(t, E9)
  WNOW = { NOW_S + s, t - s * E9 }
  local a, b = f()
  WNOW = now
  return a, b
end

-- What a key in `state` has used at `t`, in requests: what a fresh key could take at once,
-- less what this one can.
local function used(state, t, p)
  -- One value: at() hands back two.
  return (at(t, function()
    local could = ALG.check(ALG.fresh(p), t, 0, p)[2]
    local can = ALG.check(bare(state), t, 0, p)[2]
    return math.max(could - can, 0)
  end))
end

-- What a key in `state` owes at `t` past what it may take at once, in requests (ALG.debt): 0
-- for a module that carries no debt.
local function owes(state, t, p)
  if not ALG.debt then
    return 0
  end
  return (at(t, function()
    return ALG.debt(state, t, p)
  end))
end

-- What a tier that may take `room` at once is charged for `carry`, the pairs { used, owed } that
-- the tiers of the quotas before show: the most any of them used, up to `room`, and what it
-- owes on top.
local function units(carry, room)
  local n = 0
  for _, c in ipairs(carry) do
    n = math.max(n, math.min(c[1], room) + c[2])
  end
  return n
end

-- A fresh state charged `carry` (see `units`) at `t`: up to what a fresh key may take at once,
-- and the rest as a debt (ALG.charge); nil for none.
local function charged(carry, t, p)
  return (at(t, function()
    local fresh = ALG.fresh(p)
    local room = math.max(tonumber(ALG.check(fresh, t, 0, p)[2]) or 0, 0)
    local n = units(carry, room)
    local take = math.min(n, room)
    local state = nil
    if take > 0 then
      local _, taken = ALG.check(fresh, t, take, p)
      state = taken
    end
    if n > take and ALG.charge then
      -- A debt past 2^53 requests is charged as 2^53 - 1 (see debt.lua).
      state = ALG.charge(state or fresh, t, math.min(n - take, 9007199254740991), p) or state
    end
    return state
  end))
end

-- `state` charged `n` more requests at NOW, up to what it can take at once.
local function more(state, n, p)
  local room = ALG.check(bare(state), NOW, 0, p)[2]
  n = math.min(n, math.max(tonumber(room) or 0, 0))
  if n <= 0 then
    return state
  end
  local _, charged_state = ALG.check(state, NOW, n, p)
  return charged_state or state
end

-- The tiers a check must write even when it changes nothing (carried or stamped afresh).
local restamp = {}
if carrying and (mode == 'c' or mode == 'd') then
  -- What the key had used when the generation after the one read last began. A state a
  -- carrying table wrote records what it carried over into it: servers not yet changed may
  -- have admitted more under the earlier quotas since, which the key used too.
  -- A debt is never forgiven: each tier's state also shows what it owes past what it may take
  -- at once, carried over on top of what it used (`carry`: the pairs { used, owed } each
  -- generation's tiers show, for the next; `most`: the most any of them used).
  local most, carry = 0, {}
  for g = #gens, 1, -1 do
    local gen, began = gens[g], gens[g + 1] and gens[g + 1].ended
    local u, shown = 0, {}
    for j = 0, gen.n - 1 do
      local p = ALG.params(ARGV, gen.arg + j * ALG.NPARAMS)
      local state, problem, carried = read(KEYS[gen.key + j], p, j + 1)
      if state == false then
        return redis.error_reply(problem)
      elseif state then
        local own, owed = used(state, gen.ended, p), owes(state, gen.ended, p)
        u = math.max(u, own)
        shown[#shown + 1] = { own, owed }
        if carried and began then
          local since = own + math.max(most - carried, 0)
          u = math.max(u, since)
          shown[#shown + 1] = { since, owed }
        end
      end
      local passed = began and charged(carry, began, p)
      if passed then
        local was = used(passed, gen.ended, p)
        u = math.max(u, was)
        shown[#shown + 1] = { was, owes(passed, gen.ended, p) }
      end
    end
    most, carry = u, shown
  end
  for i = 1, tiers do
    local p = params[i]
    if counted[i] then
      -- Stamped by a table of these quotas (this server's or another's): charged what was used
      -- under the earlier quotas since it carried over.
      if most > counted[i] then
        states[i], counted[i], restamp[i] = more(states[i], most - counted[i], p), most, true
      end
    else
      local carried = gens[1] and charged(carry, gens[1].ended, p)
      if carried and used(carried, NOW, p) + owes(carried, NOW, p)
          > used(states[i], NOW, p) + owes(states[i], NOW, p) then
        -- The tier's lease margin stays: other servers' slices may still be out.
        carried.lease = states[i].lease
        states[i], stored[i] = carried, true
      end
      counted[i], restamp[i] = most, stored[i]
    end
  end
end

local reply = {}
local function answer(decision)
  for j = 1, 6 do
    reply[#reply + 1] = decision[j]
  end
end

-- What is left of the key's block, in ns (0: not blocked), and the same as exact decimal text
-- (a block may reach past what a double or a Redis integer holds).
local blocked, blocked_text = 0, nil
do
  -- The block that ends last: the policy's, and those kept under earlier names.
  local bs, bn = bsplit(redis.call('GET', BLOCK))
  for k = BLOCKS, #KEYS - 1 do
    local os, on = bsplit(redis.call('GET', KEYS[k]))
    if os and (not bs or os > bs or (os == bs and on > bn)) then
      bs, bn = os, on
    end
  end
  if bs then
    local s, n = bs - NOW_S, bn - NOW
    if n < 0 then
      s, n = s - 1, n + E9
    end
    if s > 0 then
      blocked, blocked_text = s * E9 + n, string.format('%d%09d', s, n)
    elseif s == 0 and n > 0 then
      blocked, blocked_text = n, string.format('%d', n)
    end
  end
end

-- The tiers' standings as the denial of a blocked key (allowed 2 marks a block): nothing
-- left, fresh no sooner than the block ends, which is when it may retry; for a key in debt (a
-- tier's standing denied), when the debt is paid if that is later, in every tier (as the
-- memory store answers: told to retry when the block ends, it would be denied again).
local function answer_blocked(standings)
  local left, left_text = blocked, blocked_text
  for i = 1, tiers do
    local retry = tonumber(standings[i][4])
    if standings[i][1] == 0 and retry and retry > left then
      left, left_text = retry, standings[i][4]
    end
  end
  for i = 1, tiers do
    local reset = left_text
    if tonumber(standings[i][3]) > left then
      reset = standings[i][3]
    end
    answer({ 2, 0, reset, left_text, 0, 0 })
  end
end

if mode == 'r' or mode == 'd' then
  -- A refund gives back what each tier's admission took (each tier's receipt follows the
  -- parameters); a charge takes `cost` more from every tier, whatever it has left. Blocked or
  -- not, and the answer is the key's standing. A carrying table stamps only its own states: a
  -- refund never makes another's its own before the check that carries over to it; a charge
  -- writes what it carried over, as a check's would.
  local receipts = 5 + tiers * ALG.NPARAMS
  local standings = {}
  for i = 1, tiers do
    local changed
    if mode == 'r' then
      changed = ALG.refund(states[i], NOW, cost, params[i], ARGV[receipts + i - 1])
    else
      changed = ALG.charge(states[i], NOW, cost, params[i])
    end
    if changed then
      save(i, changed, carrying)
      states[i] = changed
    elseif restamp[i] then
      save(i, states[i], true)
    end
    standings[i] = (ALG.check(states[i], NOW, 0, params[i]))
    if blocked == 0 then
      answer(standings[i])
    end
  end
  if blocked > 0 then
    answer_blocked(standings)
  end
  return reply
end

if blocked > 0 then
  -- Denied, consuming nothing, in every tier.
  local standings = {}
  for i = 1, tiers do
    standings[i] = (ALG.check(states[i], NOW, 0, params[i]))
  end
  answer_blocked(standings)
  return reply
end

-- A lease ('l'): the request's cost and, on top, a slice of what is left for the caller to
-- spend on its own while the slice lives (ALG.lease_life). ARGV after the parameters: the units
-- wanted, the share (the slice is at most what is left after the request, divided by it), the
-- units of an ended slice given back (0 for none) and, for those, each tier's receipt. The
-- reply ends with the units granted and the slice's life in ns (0 and 0 when none).
local slice = nil
if mode == 'l' then
  if not ALG.lease_life then
    return redis.error_reply('ERR tollgate: ' .. ALG.TAG .. ' states are not leased')
  end
  local at = 5 + tiers * ALG.NPARAMS
  local want, share, back = tonumber(ARGV[at]), tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2])
  if not want or not share or not back or want < 0 or share < 1 or back < 0 then
    return redis.error_reply('ERR tollgate: a lease names the units wanted, the share and the units given back')
  end
  if back > 0 then
    for i = 1, tiers do
      local refunded = ALG.refund(states[i], NOW, back, params[i], ARGV[at + 2 + i])
      if refunded then
        save(i, refunded, false)
        states[i] = refunded
      end
    end
  end
  -- A module whose slices need a margin (ALG.lease_begin) decides the lease with it in force;
  -- when no slice fits under it, the request is decided as any check.
  local begun = states
  if ALG.lease_begin then
    begun = {}
    for i = 1, tiers do
      begun[i] = ALG.lease_begin(states[i], NOW, params[i])
    end
  end
  local left = nil
  for i = 1, tiers do
    local r = ALG.check(begun[i], NOW, 0, params[i])[2]
    if not left or r < left then
      left = r
    end
  end
  slice = math.min(want, idiv(math.max(left - cost, 0), share))
  if slice > 0 then
    states = begun
    cost = cost + slice
  end
end

local decisions, nexts = {}, {}
local all = true
for i = 1, tiers do
  decisions[i], nexts[i] = ALG.check(states[i], NOW, cost, params[i])
  if decisions[i][1] == 0 then
    all = false
  end
end
for i = 1, tiers do
  if all and nexts[i] then
    save(i, nexts[i], carrying, decisions[i][2])
  elseif restamp[i] and cost > 0 then
    -- What was carried over (or stamped afresh) stays, whatever this request gets; a peek
    -- writes nothing.
    save(i, states[i], true)
  end
  if not all and decisions[i][1] == 1 then
    -- Denied by another tier: this one consumes nothing and reports its standing.
    decisions[i] = (ALG.check(states[i], NOW, 0, params[i]))
  end
  answer(decisions[i])
end
if slice then
  -- The slice lives while every tier counts its units as spent at once would be.
  local life = nil
  if all and slice > 0 then
    for i = 1, tiers do
      local l = ALG.lease_life(nexts[i] or states[i], NOW, params[i])
      if not life or l < life then
        life = l
      end
    end
  end
  if not life or life <= 0 then
    slice, life = 0, 0
  end
  reply[#reply + 1] = slice
  reply[#reply + 1] = life
end
return reply
