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
-- ALG.fresh_in(state, now, p)   nanoseconds until the state is fresh again (<= 0: fresh now)
--
-- Every tier must allow a request, and a denied request changes no tier (all or nothing).
--
-- KEYS: each tier's key, then the key's block (the end of the block, as an absolute time in
-- decimal ns, with a PX TTL to it). Modes besides 'c' and 'r': 'x' deletes every key (a reset),
-- 'b' blocks the key for ARGV[2] ns (decimal) from NOW, or keeps a block that ends later.
local tiers = #KEYS - 1
local BLOCK = KEYS[#KEYS]

if ARGV[1] == 'x' then
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

if ARGV[1] == 'b' then
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
  -- Past the end of the clock (2^64 - 1 ns) the block ends there.
  if us > 18446744073 or (us == 18446744073 and un > 709551615) then
    us, un = 18446744073, 709551615
  end
  local ks, kn = bsplit(redis.call('GET', BLOCK))
  if ks and (ks > us or (ks == us and kn >= un)) then
    return {}
  end
  -- Whole milliseconds to the end, rounded up.
  local ms = (us - NOW_S) * 1000 + idiv(un - NOW + 999999, 1000000)
  if ms > 0 then
    redis.call('SET', BLOCK, string.format('%d%09d', us, un), 'PX', string.format('%d', ms))
  end
  return {}
end

local cost = tonumber(ARGV[2])
local params, states = {}, {}
for i = 1, tiers do
  local p = ALG.params(ARGV, 5 + (i - 1) * ALG.NPARAMS)
  params[i] = p
  local stored = redis.call('GET', KEYS[i])
  if stored then
    local tag = ALG.TAG .. ':'
    if string.sub(stored, 1, #tag) ~= tag then
      return redis.error_reply('ERR tollgate: the key of tier ' .. i .. ' holds no ' .. ALG.TAG .. ' state')
    end
    states[i] = ALG.decode(string.sub(stored, #tag + 1), p)
    if not states[i] then
      return redis.error_reply('ERR tollgate: the key of tier ' .. i .. ' holds a corrupt ' .. ALG.TAG .. ' state')
    end
  else
    states[i] = ALG.fresh(p)
  end
end

local function save(i, state)
  local ttl = ALG.fresh_in(state, NOW, params[i])
  if ttl <= 0 then
    redis.call('DEL', KEYS[i])
  else
    local ms = idiv(ttl + 999999, 1000000)
    redis.call('SET', KEYS[i], ALG.TAG .. ':' .. ALG.encode(state, params[i]), 'PX', string.format('%d', ms))
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
  local bs, bn = bsplit(redis.call('GET', BLOCK))
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

-- A tier's standing as the denial of a blocked key (allowed 2 marks a block): nothing left,
-- fresh no sooner than the block ends, which is when it may retry.
local function block_of(decision)
  local reset = blocked_text
  if tonumber(decision[3]) > blocked then
    reset = decision[3]
  end
  return { 2, 0, reset, blocked_text, 0, 0 }
end

if ARGV[1] == 'r' then
  -- Each tier's receipt follows the parameters.
  local receipts = 5 + tiers * ALG.NPARAMS
  for i = 1, tiers do
    local refunded = ALG.refund(states[i], NOW, cost, params[i], ARGV[receipts + i - 1])
    if refunded then
      save(i, refunded)
      states[i] = refunded
    end
    local standing = (ALG.check(states[i], NOW, 0, params[i]))
    if blocked > 0 then
      standing = block_of(standing)
    end
    answer(standing)
  end
  return reply
end

if blocked > 0 then
  -- Denied, consuming nothing, in every tier.
  for i = 1, tiers do
    answer(block_of((ALG.check(states[i], NOW, 0, params[i]))))
  end
  return reply
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
  if all then
    if nexts[i] then
      save(i, nexts[i])
    end
  elseif decisions[i][1] == 1 then
    -- Denied by another tier: this one consumes nothing and reports its standing.
    decisions[i] = (ALG.check(states[i], NOW, 0, params[i]))
  end
  answer(decisions[i])
end
return reply
