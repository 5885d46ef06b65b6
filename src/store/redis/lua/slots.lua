-- tollgate: the slots of a limit on requests in flight, kept as leases.
--
-- KEYS[1]: the client key's leases, a sorted set whose members are '<server>.<lease>.<cost>',
-- each scored by its expiry in ms; KEYS[2]: the slots those leases hold; KEYS[3]: the key's
-- block, the end of the block as an absolute time in decimal ns, expiring with it. The keys
-- share the client key's hash tag, so Redis Cluster keeps them in one slot.
-- ARGV: the operation ('a' acquire, 'r' release, 'n' renew, 'b' block, 'x' lift the block),
-- the lease's member, its cost (for 'b', the block's length in whole ms), the limit, the
-- lease's time to live in ms, and the caller's time in ms ('' to read Redis TIME).
-- Replies {done, slots held afterwards, ms left of the key's block (0: not blocked)}: done is
-- 1 when the lease was taken, given back or renewed. A blocked key takes no lease.
local op, member = ARGV[1], ARGV[2]
local cost, limit, ttl = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local now
if ARGV[6] ~= '' then
  now = tonumber(ARGV[6])
else
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- The whole ms from now to the end of the key's block, rounded up; 0 when it is not blocked
-- (or its block is not a time: written by hand).
local function blocked()
  local text = redis.call('GET', KEYS[3])
  if not text then
    return 0
  end
  local secs, ns = string.match(text, '^(%d+)(%d%d%d%d%d%d%d%d%d)$')
  if not secs then
    return 0
  end
  local s = math.floor(now / 1000)
  local left = (tonumber(secs) - s) * 1000 + (tonumber(ns) - (now - s * 1000) * 1000000) / 1000000
  return math.max(math.ceil(left), 0)
end

if op == 'b' then
  -- A block that ends later is kept.
  local left = math.max(cost, blocked())
  local ends = now + left
  local s = math.floor(ends / 1000)
  redis.call('SET', KEYS[3], string.format('%d%09d', s, (ends - s * 1000) * 1000000), 'PX',
    string.format('%d', math.max(left, 1)))
  return {1, 0, left}
elseif op == 'x' then
  redis.call('DEL', KEYS[3])
  return {1, 0, 0}
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

local done, block = 0, 0
if op == 'a' then
  block = blocked()
  if block > 0 then
    -- Denied until the block ends, whatever is free.
    done = 0
  elseif cost == 0 then
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
return {done, held, block}
