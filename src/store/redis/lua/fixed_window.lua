-- Fixed window, mirrored from src/algorithm/fixed_window.rs: the state is the window's start
-- and the cost admitted in it, stored as '<start ns>:<count>'. Parameters: the limit, and the
-- period in ns, both below 2^53, and 1 for calendar windows (the period at least 1 ms), which
-- start at whole multiples of the period since the Unix epoch. Counts are at most 2^53 (decode checks them), and so is every
-- wait: a window that starts so far after now that its end would not be is refused (only a
-- clock that jumped back by weeks sees one). A start long past may be inexact, but it is
-- then more than a period past, exactly as it should read.
local ALG = { TAG = 'fw', NPARAMS = 3 }

function ALG.params(argv, i)
  return { limit = tonumber(argv[i]), period = tonumber(argv[i + 1]), aligned = argv[i + 2] == '1' }
end

-- Where a window opened at `now` (relative) starts: `now`, or for calendar windows the last
-- multiple of the period since the epoch, now - ((NOW_S * 10^9 + now) mod period), in wide
-- integers: the quotient is below 2^53 for a period of 1 ms or more, so it is exact. It reads
-- `now` alone, never the wide clock, which the driver moves to the instant a state is carried
-- over at.
local function window_start(now, p)
  if not p.aligned then
    return now
  end
  local abs = wnorm(NOW_S, now)
  local phase = wsub(abs, wmul(wdiv(abs, p.period), p.period))
  return now - wnum(phase)
end

-- A key without a window (count 0: the start is never read).
function ALG.fresh(p)
  return { start = 0, count = 0 }
end

function ALG.decode(text, p)
  local start, count = string.match(text, '^(%d+):(%d+)$')
  start, count = tparse(start), natural(count)
  if not start or not count or start - NOW > EXACT - p.period then
    return nil
  end
  return { start = start, count = count }
end

function ALG.encode(state, p)
  return tformat(state.start) .. ':' .. string.format('%d', state.count)
end

-- The wait until the open window ends, or nil when the key has none. A `now` before the
-- window's start reads as its start.
local function window_left(state, now, p)
  local since = now - state.start
  if state.count > 0 and math.max(since, 0) < p.period then
    return p.period - since
  end
end

function ALG.check(state, now, cost, p)
  local left = window_left(state, now, p)
  local count, reset_after = 0, 0
  if left then
    count, reset_after = state.count, left
  end
  local remaining = math.max(p.limit - count, 0)
  if cost > remaining then
    -- A cost above the limit never passes; any other passes once the window is over.
    local retry_after = -1
    if left and cost <= p.limit then
      retry_after = reset_after
    end
    return deny(remaining, reset_after, retry_after)
  end
  if cost == 0 then
    return allow(remaining, reset_after)
  end
  -- The receipt is the start of the window the request is counted in.
  if left then
    return allow(remaining - cost, reset_after, 0, tformat(state.start)),
      { start = state.start, count = count + cost }
  end
  local start = window_start(now, p)
  return allow(remaining - cost, p.period - (now - start), 0, tformat(start)), { start = start, count = cost }
end

-- Takes the admission back from its window's count (never below zero), while that window
-- (its receipt) is the open one.
function ALG.refund(state, now, cost, p, receipt)
  if cost == 0 or not window_left(state, now, p) or tparse(receipt) ~= state.start then
    return nil
  end
  local count = math.max(state.count - cost, 0)
  if count == 0 then
    return ALG.fresh(p)
  end
  return { start = state.start, count = count }
end

-- The longest a state takes to be fresh after a request: a period.
function ALG.span(p)
  return p.period
end

function ALG.fresh_in(state, now, p)
  return window_left(state, now, p) or 0
end

-- How long a slice of the budget counted at `now` may be spent later without changing any
-- decision: to the end of the open window, in which every request counts alike.
function ALG.lease_life(state, now, p)
  return window_left(state, now, p) or 0
end
