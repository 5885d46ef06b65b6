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
local cost = tonumber(ARGV[2])
local tiers = #KEYS
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

if ARGV[1] == 'r' then
  -- Each tier's receipt follows the parameters.
  local receipts = 5 + tiers * ALG.NPARAMS
  for i = 1, tiers do
    local refunded = ALG.refund(states[i], NOW, cost, params[i], ARGV[receipts + i - 1])
    if refunded then
      save(i, refunded)
      states[i] = refunded
    end
    answer((ALG.check(states[i], NOW, 0, params[i])))
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
