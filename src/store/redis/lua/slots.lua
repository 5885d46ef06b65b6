-- tollgate: the slots of a limit on requests in flight, kept as leases.
--
-- KEYS[1]: the client key's leases, a sorted set whose members are '<server>.<lease>.<cost>',
-- each scored by its expiry in ms; KEYS[2]: the slots those leases hold. Both keys share the
-- client key's hash tag, so Redis Cluster keeps them in one slot.
-- ARGV: the operation ('a' acquire, 'r' release, 'n' renew), the lease's member, its cost, the
-- limit, the lease's time to live in ms, and the caller's time in ms ('' to read Redis TIME).
-- Replies {done, slots held afterwards}: done is 1 when the lease was taken, given back or
-- renewed.
local op, member = ARGV[1], ARGV[2]
local cost, limit, ttl = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local now
if ARGV[6] ~= '' then
  now = tonumber(ARGV[6])
else
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

local function cost_of(m)
  return tonumber(string.match(m, '%.(%d+)$')) or 0
end

local held = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
-- Leases past their expiry (a server that died, or lost Redis) give their slots back.
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
if #expired > 0 then
  for _, m in ipairs(expired) do
    held = held - cost_of(m)
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
end

local done = 0
if op == 'a' then
  if cost == 0 then
    -- A peek: it takes nothing.
    done = 1
  elseif held + cost <= limit then
    redis.call('ZADD', KEYS[1], now + ttl, member)
    held = held + cost
    done = 1
  end
elseif op == 'r' then
  if redis.call('ZREM', KEYS[1], member) == 1 then
    held = held - cost
    done = 1
  end
elseif op == 'n' then
  -- Only a lease still held is renewed: one that expired stays given back.
  if redis.call('ZSCORE', KEYS[1], member) then
    redis.call('ZADD', KEYS[1], now + ttl, member)
    done = 1
  end
end

-- The count agrees with the leases (it could only drift if a key were edited by hand).
if held < 0 or redis.call('ZCARD', KEYS[1]) == 0 then
  held = 0
  for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    held = held + cost_of(m)
  end
end

if held == 0 then
  redis.call('DEL', KEYS[1], KEYS[2])
else
  redis.call('SET', KEYS[2], held)
  -- Both keys live as long as the last lease.
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  local life = math.max(tonumber(last[2]) - now, 1)
  redis.call('PEXPIRE', KEYS[1], life)
  redis.call('PEXPIRE', KEYS[2], life)
end
return {done, held}
