-- GCRA (also the leaky bucket's queue, and shaping with a maximum delay): the state is the
-- theoretical arrival time (TAT). Parameters: the emission interval T, the tolerance (what
-- passes at once), the bound (the tolerance plus the longest wait) and the capacity that
-- `remaining` counts against, all in ns.
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

function ALG.decode(text, p)
  local tat = tparse(text)
  return tat and { tat = tat }
end

function ALG.encode(state, p)
  return tformat(state.tat)
end

local function standing(p, tat, now)
  local reset_after = math.max(tat - now, 0)
  return reset_after, idiv(math.max(p.capacity - reset_after, 0), p.interval)
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
  local reset_after, remaining = standing(p, state.tat, now)
  -- A cost above the bound can never pass. (A cost of 2^53 or more is not exact as a number,
  -- but it rounds to 2^53 at least, and every bound is at most 2^52.)
  local increment = cost * p.interval
  if increment > p.bound then
    return deny(remaining, reset_after, -1)
  end
  local tat = math.max(state.tat, now) + increment
  -- Past the end of the clock nothing passes any more.
  if past_the_end(tat) then
    return deny(remaining, reset_after, -1)
  end
  if tat - now > p.bound then
    return deny(remaining, reset_after, tat - p.bound - now)
  end
  local after, left = standing(p, tat, now)
  local delay = 0
  if after > p.tolerance then
    delay = after - p.tolerance
  end
  local next
  if cost > 0 then
    next = { tat = tat }
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
  return { tat = math.max(slot_end - cost * p.interval, now) }
end

function ALG.fresh_in(state, now, p)
  return state.tat - now
end
