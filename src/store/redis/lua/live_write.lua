-- tollgate: a write to a layer's record of its quotas changed live (KEYS[1], a hash).
--
-- Adds a value (ARGV[2]) to a field's history (ARGV[1]: its values, the latest last, each after
-- an empty line; the latest ARGV[3] kept) and increments the version `v`; returns the new
-- version. A new record's version starts at Redis's time in microseconds, so that a record made
-- again (a Redis restarted empty) never goes back to a version a server has read.
if redis.call('EXISTS', KEYS[1]) == 0 then
  local t = redis.call('TIME')
  redis.call('HSET', KEYS[1], 'v', t[1] .. string.sub('00000' .. t[2], -6))
end
local old = redis.call('HGET', KEYS[1], ARGV[1])
local parts = {}
if old then
  for part in string.gmatch(old .. '\n\n', '(.-)\n\n') do
    parts[#parts + 1] = part
  end
end
parts[#parts + 1] = ARGV[2]
while #parts > tonumber(ARGV[3]) do table.remove(parts, 1) end
redis.call('HSET', KEYS[1], ARGV[1], table.concat(parts, '\n\n'))
return redis.call('HINCRBY', KEYS[1], 'v', 1)
