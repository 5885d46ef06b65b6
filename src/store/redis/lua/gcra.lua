-- GCRA (also the leaky bucket's queue, and shaping with a maximum delay): the state is the
-- theoretical arrival time (TAT). Parameters: the emission interval T, the tolerance (what
-- passes at once), the bound (the tolerance plus the longest wait) and the capacity that
-- `remaining` counts against, all in ns.
--
-- Leases (see the driver): a slice is counted at once and spent up to a margin M later,
-- M = min(bound / 16, 1 s) rounded down to whole intervals (the store does not lease a bucket
-- whose margin rounds to 0). Counting a unit up to M early lets the bucket drain meanwhile by
-- at most M more than counting it when spent, so a key whose slices may be out is decided with
-- a bound M smaller: then every unit spent later passes the algorithm too. The state then keeps
-- `lease`, the end of the latest slice's life; the margin holds until the bucket has stood
-- empty for M after both the TAT and that end (what was spent late has drained by then), and
-- the state forgets it.
local ALG = { TAG = 'gcra', NPARAMS = 4 }

function ALG.params(argv, i)
  return {
    interval = tonumber(argv[i]),
    tolerance = tonumber(argv[i + 1]),
    bound = tonumber(argv[i + 2]),
    capacity = tonumber(argv[i + 3]),
  }
end

-- A key never seen: its TAT is long past.
function ALG.fresh(p)
  return { tat = -math.huge }
end

-- '<tat>' or, while slices may be out, '<tat>:<end of the latest slice's life>'.
function ALG.decode(text, p)
  local tat, lease = string.match(text, '^(%d+):(%d+)$')
  if not tat then
    tat = text
  end
  tat = tparse(tat)
  if not tat then
    return nil
  end
  if lease then
    lease = tparse(lease)
    if not lease then
      return nil
    end
  end
  return { tat = tat, lease = lease }
end

function ALG.encode(state, p)
  if state.lease then
    return tformat(state.tat) .. ':' .. tformat(state.lease)
  end
  return tformat(state.tat)
end

-- The lease margin M, in ns: whole intervals.
local function margin(p)
  local m = math.min(idiv(p.bound, 16), E9)
  return m - (m % p.interval)
end

-- The margin that holds for `state` at `now` (0 for none), and the lease the state keeps.
local function held(state, now, p)
  local lease = state.lease
  if not lease then
    return 0, nil
  end
  local m = margin(p)
  if now < math.max(state.tat, lease) + m then
    return m, lease
  end
  return 0, nil
end

local function standing(p, tat, now, m)
  local reset_after = math.max(tat - now, 0)
  return reset_after, idiv(math.max(p.capacity - m - reset_after, 0), p.interval)
end

-- The last time a state can hold, 2^64 - 1 ns after the origin, as seconds and ns.
local LAST_S, LAST_NS = 18446744073, 709551615

-- Whether a relative time lies past the end of the clock.
local function past_the_end(rel)
  local secs = idiv(rel, E9)
  local s = NOW_S + secs
  return s > LAST_S or (s == LAST_S and rel - secs * E9 > LAST_NS)
end

function ALG.check(state, now, cost, p)
  local m, lease = held(state, now, p)
  local bound = p.bound - m
  local reset_after, remaining = standing(p, state.tat, now, m)
  -- A cost above the bound can never pass. (A cost of 2^53 or more is not exact as a number,
  -- but it rounds to 2^53 at least, and every bound is at most 2^52.) One that only the lease
  -- margin keeps out is told the wait past the bound less the margin.
  local increment = cost * p.interval
  if increment > p.bound then
    return deny(remaining, reset_after, -1)
  end
  local tat = math.max(state.tat, now) + increment
  -- Past the end of the clock nothing passes any more.
  if past_the_end(tat) then
    return deny(remaining, reset_after, -1)
  end
  if tat - now > bound then
    return deny(remaining, reset_after, tat - bound - now)
  end
  local after, left = standing(p, tat, now, m)
  local delay = 0
  if after > p.tolerance then
    delay = after - p.tolerance
  end
  local next
  if cost > 0 then
    next = { tat = tat, lease = lease }
  end
  -- The receipt is the TAT this request set: the end of its slot.
  return allow(left, after, delay, cost > 0 and tformat(tat) or 0), next
end

-- Takes the admission's slot back when it is still the last one (its receipt is the TAT) and
-- ends after now: the TAT goes back to where the admission found it, but not before now.
function ALG.refund(state, now, cost, p, receipt)
  local slot_end = tparse(receipt)
  if cost == 0 or state.tat <= now or slot_end ~= state.tat then
    return nil
  end
  return { tat = math.max(slot_end - cost * p.interval, now), lease = state.lease }
end

-- The longest a state takes to be fresh after a request, leases aside: the bound.
function ALG.span(p)
  return p.bound
end

-- Fresh when the TAT has passed and no lease margin holds.
function ALG.fresh_in(state, now, p)
  if state.lease then
    return math.max(state.tat, state.lease) + margin(p) - now
  end
  return state.tat - now
end

-- The state a lease at `now` decides with: the margin in force, for a slice living until
-- `now + M`.
function ALG.lease_begin(state, now, p)
  local lease = now + margin(p)
  if state.lease and state.lease > lease then
    lease = state.lease
  end
  return { tat = state.tat, lease = lease }
end

-- A slice lives M: the margin its decisions were taken with.
function ALG.lease_life(state, now, p)
  return margin(p)
end
