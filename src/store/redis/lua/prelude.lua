-- tollgate: the shared beginning of every script.
--
-- A state keeps absolute times as decimal nanoseconds since the clock's origin (the Unix epoch
-- for Redis TIME). Inside the script every time is relative to NOW_S whole seconds, in
-- nanoseconds: Lua numbers are doubles, exact for integers up to 2^53 (104 days in ns), and the
-- store only accepts quotas whose figures keep each module's arithmetic below that (or a module
-- works with wider integers), so every sum, product and comparison is exact, as in the Rust
-- reference.
--
-- KEYS: one key per tier, then the key's block (see the driver). ARGV: mode ('c' check, 'r' refund,
-- 'd' charge, ...), cost, the caller's time as whole seconds and nanoseconds ('' and '' to read
-- the server's TIME), then each tier's parameters.
local NOW_S, NOW
if ARGV[3] ~= '' then
  NOW_S = tonumber(ARGV[3])
  NOW = tonumber(ARGV[4])
else
  local time = redis.call('TIME')
  NOW_S = tonumber(time[1])
  NOW = tonumber(time[2]) * 1000
end
local E9 = 1000000000
-- The script's time as a wide integer (wide.lua sets it, for the modules that read it); nil
-- for the others.
local WNOW

-- floor(a / b) for integers, b > 0, corrected for the rounding of the division.
local function idiv(a, b)
  local q = math.floor(a / b)
  local r = a - q * b
  if r < 0 then
    q = q - 1
  elseif r >= b then
    q = q + 1
  end
  return q
end

-- An absolute time in decimal nanoseconds, as nanoseconds relative to NOW_S; nil when the text
-- is not a time.
local function tparse(text)
  if not text or not string.find(text, '^%d+$') or #text > 20 then
    return nil
  end
  local secs = 0
  if #text > 9 then
    secs = tonumber(string.sub(text, 1, -10))
  end
  return (secs - NOW_S) * E9 + tonumber(string.sub(text, -9))
end

-- A relative time (at or after the origin) as absolute decimal nanoseconds.
local function tformat(rel)
  local secs = idiv(rel, E9)
  return string.format('%d%09d', NOW_S + secs, rel - secs * E9)
end

-- A decision: allowed (1 or 0), remaining, reset_after, retry_after (-1: none) and delay, in ns,
-- then the admission's receipt: what a refund needs to give back only what it took (an
-- absolute time as decimal ns, from tformat; 0 when nothing was taken).
local function allow(remaining, reset_after, delay, receipt)
  return { 1, remaining, reset_after, -1, delay or 0, receipt or 0 }
end

local function deny(remaining, reset_after, retry_after)
  return { 0, remaining, reset_after, retry_after or -1, 0, 0 }
end
