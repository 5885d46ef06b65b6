-- Sliding window, mirrored from src/algorithm/sliding_window.rs and its frame.rs: the state is
-- a sub-window boundary (base), the newest admitted request's time (last) and the counts of
-- the last k + 1 sub-windows, oldest first, stored as '<last ns>:<last - base>:<c0>,...,<ck>'.
-- The base itself is never needed, only how far it is before `last` (the span): `last` is
-- exact whenever the state still counts, but a base up to a period before it may not be. A
-- state whose `last` is so far after now that a wait from now would pass 2^53 is refused (only
-- a clock that jumped back by weeks sees one).
-- Parameters: the limit, the period in ns, k, and the horizon p + ceil(p / k): the longest a
-- request weighs in the estimate, and so the longest wait from `last` (the store keeps it
-- below 2^53).
--
-- The Rust reference multiplies in 128 bits; here the products of two figures below 2^53 are
-- compared exactly in base-2^24 limbs, quotients are found by correcting an estimate against
-- those comparisons, and a time `units / k` past the base is split so that no intermediate
-- result exceeds 2^53. The counts are each at most 2^53, and so are the counts but the oldest
-- added up (the sum of the counters wholly inside a window; decode checks both).
local ALG = { TAG = 'sw', NPARAMS = 4 }

local LIMB = 16777216

-- The base-2^24 limbs of 0 <= x <= 2^53, least significant first.
local function limbs(x)
  local l0 = x % LIMB
  x = (x - l0) / LIMB
  local l1 = x % LIMB
  return l0, l1, (x - l1) / LIMB
end

-- x * y for 0 <= x, y <= 2^53, as six base-2^24 limbs: every partial sum stays below 2^51.
local function product(x, y)
  local x0, x1, x2 = limbs(x)
  local y0, y1, y2 = limbs(y)
  local d = { x0 * y0, x0 * y1 + x1 * y0, x0 * y2 + x1 * y1 + x2 * y0, x1 * y2 + x2 * y1, x2 * y2, 0 }
  for i = 1, 5 do
    local carry = math.floor(d[i] / LIMB)
    d[i] = d[i] - carry * LIMB
    d[i + 1] = d[i + 1] + carry
  end
  return d
end

-- Whether a * b <= c * d, exactly, for figures from 0 to 2^53.
local function le(a, b, c, d)
  local x, y = product(a, b), product(c, d)
  for i = 6, 1, -1 do
    if x[i] ~= y[i] then
      return x[i] < y[i]
    end
  end
  return true
end

-- floor(a * b / c) for a quotient known to be at most hi (<= 2^53): the estimate in doubles
-- is off by a few units at most, and each step is an exact comparison.
local function floor_muldiv(a, b, c, hi)
  local q = math.min(math.max(math.floor(a / c * b), 0), hi)
  while q > 0 and not le(q, c, a, b) do
    q = q - 1
  end
  while q < hi and le(q + 1, c, a, b) do
    q = q + 1
  end
  return q
end

-- ceil(a * b / c), for a quotient known to be at most hi.
local function ceil_muldiv(a, b, c, hi)
  local q = floor_muldiv(a, b, c, hi)
  if le(a, b, q, c) then
    return q
  end
  return q + 1
end

function ALG.params(argv, i)
  local p = {
    limit = tonumber(argv[i]),
    period = tonumber(argv[i + 1]),
    k = tonumber(argv[i + 2]),
    horizon = tonumber(argv[i + 3]),
  }
  -- period = a * k + b
  p.a = idiv(p.period, p.k)
  p.b = p.period - p.a * p.k
  return p
end

-- A key without counters (a state kept with another k reads the same).
function ALG.fresh(p)
  return { last = 0, span = 0, counts = {} }
end

function ALG.decode(text, p)
  local last, span, rest = string.match(text, '^(%d+):(%d+):([%d,]+)$')
  last, span = tparse(last), natural(span)
  if not last or not span or last - NOW > EXACT - p.horizon then
    return nil
  end
  local counts, inside, pos = {}, 0, 1
  while true do
    local _, ends, digits = string.find(rest, '^(%d+)', pos)
    local count = natural(digits)
    if not count or #counts > 64 then
      return nil
    end
    if #counts > 0 then
      -- (Compared before adding: a sum past 2^53 would round.)
      if count > EXACT - inside then
        return nil
      end
      inside = inside + count
    end
    counts[#counts + 1] = count
    if ends == #rest then
      return { last = last, span = span, counts = counts }
    end
    if string.sub(rest, ends + 1, ends + 1) ~= ',' then
      return nil
    end
    pos = ends + 2
  end
end

function ALG.encode(state, p)
  local parts = {}
  for j, count in ipairs(state.counts) do
    parts[j] = string.format('%d', count)
  end
  return tformat(state.last) .. ':' .. string.format('%d', state.span) .. ':'
    .. table.concat(parts, ',')
end

-- floor(r * k / period) and (r * k) mod period, for 0 <= r < period, one k at a time.
local function scale(r, p)
  local index, offset, gap = 0, 0, p.period - r
  for _ = 1, p.k do
    if offset >= gap then
      offset, index = offset - gap, index + 1
    else
      offset = offset + r
    end
  end
  return index, offset
end

-- The state read at `now` (Rust's Frame), or nil when it is fresh. Time in units of 1/k ns
-- from the base: the current sub-window's index is q * k + i, q the whole periods from the
-- base to `at` and r what is left over (so the current period begins at at - r), and the
-- offset into that sub-window is in units. The counters in the window are counts[first..].
local function frame(state, now, p)
  local counts = state.counts
  if #counts ~= p.k + 1 then
    return nil
  end
  local at = math.max(now, state.last)
  local since = at - state.last
  -- Nothing weighs in a horizon after the newest request (and `since` may be inexact past it).
  if since >= p.horizon then
    return nil
  end
  local lq = idiv(state.span, p.period)
  local lr = state.span - lq * p.period
  local sq = idiv(since, p.period)
  local sr = since - sq * p.period
  local q, r = lq + sq, lr + sr
  if lr >= p.period - sr then
    q, r = q + 1, lr - (p.period - sr)
  end
  local li = scale(lr, p)
  local i, offset = scale(r, p)
  -- Sub-windows passed since the newest counter's.
  local passed = (q - lq) * p.k + i - li
  if passed > p.k then
    return nil
  end
  for j = passed + 1, p.k + 1 do
    if counts[j] > 0 then
      return { first = passed + 1, i = i, offset = offset, at = at, r = r }
    end
  end
  return nil
end

-- The counter straddling the window's start and the sum of those wholly inside, `ahead`
-- sub-windows from the frame's.
local function split(counts, f, ahead)
  local partial = counts[f.first + ahead] or 0
  local full = 0
  for j = f.first + ahead + 1, #counts do
    full = full + counts[j]
  end
  return partial, full
end

-- What is left of the limit when `full` counts in full and `cost` comes on top: exact when not
-- negative, and negative exactly when full + cost > limit.
local function room(p, full, cost)
  return (p.limit - full) - cost
end

-- The wait from now until j sub-windows and `off` units past the frame's sub-window: the
-- first ns at or after at - r + ((i + j) * period + off) / k, with period = a * k + b and
-- off = c * k + e. The terms are added in increasing order from (at - now) - r > -period.
local function wait(p, f, j, off, now)
  local m = f.i + j
  local c = idiv(off, p.k)
  local e = off - c * p.k
  local s = idiv(m * p.b + e + p.k - 1, p.k)
  local half = math.floor(m / 2)
  local w = (f.at - now) - f.r
  w = w + c + s + half * p.a + (m - half) * p.a
  return math.max(w, 0)
end

-- floor(limit - estimate), with `extra` just admitted in the current sub-window.
local function remaining(p, counts, f, extra)
  local partial, full = split(counts, f, 0)
  local weighed = ceil_muldiv(partial, p.period - f.offset, p.period, partial)
  return math.max(room(p, full, extra) - weighed, 0)
end

-- The wait until the newest non-zero counter (or the current sub-window, when `extra` was
-- just admitted there) leaves the estimate.
local function reset_after(p, counts, f, extra, now)
  if extra > 0 then
    return wait(p, f, p.k + 1, 0, now)
  end
  for j = p.k + 1, f.first, -1 do
    if counts[j] > 0 then
      return wait(p, f, j - f.first + 1, 0, now)
    end
  end
  return 0
end

-- The wait until a request of `cost` (at most the limit) passes, sub-window by sub-window.
local function retry_after(p, counts, f, cost, now)
  for ahead = 0, p.k + 1 do
    local partial, full = split(counts, f, ahead)
    local left = room(p, full, cost)
    if left >= 0 then
      -- It passes once the straddling counter's weight is at most left * period / partial.
      local offset = 0
      if partial > left then
        offset = p.period - floor_muldiv(left, p.period, partial, p.period - 1)
      end
      if offset < p.period then
        return wait(p, f, ahead, offset, now)
      end
    end
  end
  return 0
end

-- The counters after admitting `cost` at `now`: moved up to the current sub-window, the base
-- moved up to the current period.
local function admit(state, now, cost, p, f)
  local counts = {}
  if not f then
    for j = 1, p.k + 1 do
      counts[j] = 0
    end
    counts[p.k + 1] = cost
    return { last = now, span = 0, counts = counts }
  end
  for j = 1, p.k + 1 do
    counts[j] = state.counts[j + f.first - 1] or 0
  end
  counts[p.k + 1] = counts[p.k + 1] + cost
  return { last = f.at, span = f.r, counts = counts }
end

function ALG.check(state, now, cost, p)
  local f = frame(state, now, p)
  if not f then
    -- Fresh: a first request opens the key's windows at now.
    if cost > p.limit then
      return deny(p.limit, 0, -1)
    end
    if cost == 0 then
      return allow(p.limit, 0)
    end
    return allow(p.limit - cost, p.horizon, 0, tformat(now)), admit(state, now, cost, p, nil)
  end
  local counts = state.counts
  local partial, full = split(counts, f, 0)
  local left = room(p, full, cost)
  if left < 0 or not le(partial, p.period - f.offset, left, p.period) then
    local retry = -1
    if cost <= p.limit then
      retry = retry_after(p, counts, f, cost, now)
    end
    return deny(remaining(p, counts, f, 0), reset_after(p, counts, f, 0, now), retry)
  end
  if cost > 0 then
    -- The receipt is a time in the sub-window the request is counted in: the newest's.
    local decision = allow(remaining(p, counts, f, cost), reset_after(p, counts, f, cost, now),
      0, tformat(f.at))
    return decision, admit(state, now, cost, p, f)
  end
  return allow(remaining(p, counts, f, cost), reset_after(p, counts, f, cost, now))
end

-- The sub-window index of a time x ns after the base, plus 2k, for -2 * period <= x < period:
-- floor((x + 2 * period) * k / period), one whole period at a time.
local function index_2k(x, p)
  local shifted = x + 2 * p.period
  local q = idiv(shifted, p.period)
  return q * p.k + scale(shifted - q * p.period, p)
end

-- Takes the admission back from the counter it was added to (the one holding its receipt, a
-- time in that sub-window), never below zero, while that counter is in the window.
function ALG.refund(state, now, cost, p, receipt)
  local f = frame(state, now, p)
  local at = tparse(receipt)
  if not f or cost == 0 or not at or at > state.last then
    return nil
  end
  -- The receipt's time from the base; before it by less than the window's k + 1 sub-windows
  -- (at most two periods) when its counter can still be live.
  local x = state.span - (state.last - at)
  if x < -2 * p.period then
    return nil
  end
  local back = index_2k(state.span, p) - index_2k(x, p)
  local j = p.k + 1 - back
  if j < f.first or j > p.k + 1 or state.counts[j] == 0 then
    return nil
  end
  local counts, any = {}, false
  for i, count in ipairs(state.counts) do
    counts[i] = count
  end
  counts[j] = counts[j] - math.min(cost, counts[j])
  for i = f.first, p.k + 1 do
    any = any or counts[i] > 0
  end
  if not any then
    return ALG.fresh(p)
  end
  return { last = state.last, span = state.span, counts = counts }
end

-- The longest a state takes to be fresh after a request: the horizon.
function ALG.span(p)
  return p.horizon
end

function ALG.fresh_in(state, now, p)
  local f = frame(state, now, p)
  return f and reset_after(p, state.counts, f, 0, now) or 0
end

-- How long a slice of the budget counted at `now` may be spent later without changing any
-- decision: to the end of the current sub-window. Within it the estimate only falls (the
-- straddling counter weighs less as time passes), and a unit counted in it counts as one spent
-- later in it.
function ALG.lease_life(state, now, p)
  local f = frame(state, now, p)
  return f and wait(p, f, 1, 0, now) or 0
end
