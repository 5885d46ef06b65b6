-- Wide integers, for the modules whose figures outgrow a double's 2^53 (the token bucket's
-- and the hybrid's absolute times, the hybrid's quota of `limit * T` ns up to 2^54).
--
-- A wide integer is { h, l }: h * 10^9 + l, with 0 <= l < 10^9 and h exact (|h| < 2^53), so
-- it is exact up to about 2^82 either side of zero; an absolute time is its whole seconds and
-- nanoseconds. Every function below is exact.
local MAX53 = 9007199254740992
-- u64::MAX, the end of the clock's range.
local U64MAX = { 18446744073, 709551615 }

-- h and l with l of any sign, |l| < 2^53, carried into range.
local function wnorm(h, l)
  local carry = idiv(l, E9)
  return { h + carry, l - carry * E9 }
end

-- An integer |x| <= 2^53 as a wide one.
local function wide(x)
  return wnorm(0, x)
end

local function wadd(a, b)
  return wnorm(a[1] + b[1], a[2] + b[2])
end

local function wsub(a, b)
  return wnorm(a[1] - b[1], a[2] - b[2])
end

local function wlt(a, b)
  return a[1] < b[1] or (a[1] == b[1] and a[2] < b[2])
end

local function wmax(a, b)
  if wlt(a, b) then
    return b
  end
  return a
end

local function wneg(a)
  return a[1] < 0
end

-- As a number: exact when |a| <= 2^53.
local function wnum(a)
  return a[1] * E9 + a[2]
end

-- Whether a <= 2^53 (compared without a table for the bound).
local function wsmall(a)
  return a[1] < 9007199 or (a[1] == 9007199 and a[2] <= 254740992)
end

-- x * y for integers 0 <= x, y <= 2^53 whose product is below 2^53 * 10^9: both split at
-- 10^9, and the low halves' product (up to 10^18) split once more.
local function wmul(x, y)
  local x1, y1 = idiv(x, E9), idiv(y, E9)
  local x0, y0 = x - x1 * E9, y - y1 * E9
  local xa = idiv(x0, 100000)
  local u = xa * y0
  local uh = idiv(u, 10000)
  return wnorm(x1 * y1 * E9 + x1 * y0 + x0 * y1 + uh, (u - uh * 10000) * 100000 + (x0 - xa * 100000) * y0)
end

-- floor(a / d) for a wide a >= 0 and an integer 1 <= d <= 2^53, when the quotient is at most
-- 2^53: a double's estimate, corrected by the exact remainder.
local function wdiv(a, d)
  local q = math.floor(wnum(a) / d)
  local wd = wide(d)
  local r = wsub(a, wmul(q, d))
  while wneg(r) do
    q, r = q - 1, wadd(r, wd)
  end
  while not wlt(r, wd) do
    q, r = q + 1, wsub(r, wd)
  end
  return q
end

-- A u64 in decimal (an absolute time, a cost); nil when the text is not one.
local function wparse(text)
  if not text or not string.find(text, '^%d+$') or #text > 20 then
    return nil
  end
  local h = 0
  if #text > 9 then
    h = tonumber(string.sub(text, 1, -10))
  end
  local a = { h, tonumber(string.sub(text, -9)) }
  if wlt(U64MAX, a) then
    return nil
  end
  return a
end

-- A wide integer >= 0 in decimal.
local function wformat(a)
  if a[1] == 0 then
    return string.format('%d', a[2])
  end
  return string.format('%d%09d', a[1], a[2])
end

-- A figure of a decision (ns >= 0): a number up to 2^53, beyond it its decimal text, which
-- Redis replies as a bulk string that the client reads as the same integer. Saturates at
-- u64::MAX, as the Rust reference does.
local function wreply(a)
  if wsmall(a) then
    return wnum(a)
  elseif wlt(U64MAX, a) then
    return wformat(U64MAX)
  end
  return wformat(a)
end

-- A decision's figures (`{ allowed, remaining, reset_after, retry_after, delay, receipt }`)
-- measured from `skew` ns (wide, >= 0) earlier: a reading before the state's own time is
-- decided at the state's time, and the waits it reports run from the reading (as in Rust). A
-- retry of -1 (none) and a delay of 0 (none) stay as they are.
local function wlater(d, skew)
  if not wlt({ 0, 0 }, skew) then
    return d
  end
  local function later(x)
    local a
    if type(x) == 'number' then
      a = wide(x)
    else
      a = wparse(x)
    end
    return wreply(wadd(a, skew))
  end
  d[3] = later(d[3])
  if d[4] ~= -1 then
    d[4] = later(d[4])
  end
  if d[5] ~= 0 then
    d[5] = later(d[5])
  end
  return d
end

-- A time until fresh for the driver, which takes ns as a number and rounds them up to whole
-- ms: exact up to 2^53. Beyond, `ms` whole ms less 999936 ns: a multiple of 64, exact up to
-- 2^59 ns (18 years), which the driver's `+ 999999` (rounded to a multiple of at most 64)
-- takes back to between `ms` and `ms` + 64 ns, so to `ms` ms, as ceil(a / 1 ms).
local function wttl(a)
  if wneg(a) or wsmall(a) then
    return wnum(a)
  end
  local ms = a[1] * 1000 + idiv(a[2] + 999999, 1000000)
  return ms * 1000000 - 999936
end

-- The script's time as a wide integer: the instant the driver passes as `now` (relative to
-- NOW_S), which the modules after this one read from here instead.
WNOW = { NOW_S, NOW }

-- A cost the driver passes (the request's, or 0 for a peek) as a wide integer: the driver's
-- double reads 2^53 + 1 as 2^53, so from 2^53 on it is the request's cost, read from its text.
local function wcost(cost)
  if cost < MAX53 then
    return wide(cost)
  end
  return wparse(ARGV[2])
end
