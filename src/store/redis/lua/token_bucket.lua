-- The token bucket (after wide.lua and debt.lua): the state is how many ns of tokens the bucket
-- lacked at its last refill, and when that was. Parameters: the emission interval T (one
-- token), the capacity T * burst, the bound (the capacity plus the longest wait, for shaping)
-- and the largest cost that fits in the bound, floor(bound / T); all at most 2^53, so
-- everything but the absolute times is an exact double, and the times are wide.
--
-- Debts (debt.lua): a charge may leave the bucket short of more than 2^53 ns of tokens. Such a
-- deficit is kept as a wide integer (`big`, for which `deficit` is nil) and written
-- `d<deficit>`, so that a plain deficit above 2^53 is still no state this store wrote; every
-- request waits until the deficit, refilled, is back within 2^53.
--
-- Leases: as GCRA's (gcra.lua). A key whose slices may be out is decided with a bound smaller
-- by the margin M = min(bound / 16, 1 s) in whole intervals; the state keeps `lease`, the end of the latest
-- slice's life, until the bucket has been full for M after both that end and the moment it
-- filled.
local ALG = { TAG = 'token_bucket', NPARAMS = 4 }

function ALG.params(argv, i)
  return {
    interval = tonumber(argv[i]),
    capacity = tonumber(argv[i + 1]),
    bound = tonumber(argv[i + 2]),
    most = wide(tonumber(argv[i + 3])),
  }
end

-- A full bucket: `TokenBucketState::default()`.
function ALG.fresh(p)
  return { at = { 0, 0 }, deficit = 0 }
end

-- '<refilled at, absolute ns>:<deficit ns>', and ':<end of the latest slice's life, absolute
-- ns>' while slices may be out; a deficit above 2^53 is no state this store wrote (every
-- bound is at most 2^53) unless it is a debt, written 'd<deficit>' (full again by the end of
-- the clock).
function ALG.decode(text, p)
  local at, deficit, lease = string.match(text, '^(%d+):(d?%d+):(%d+)$')
  if not at then
    at, deficit = string.match(text, '^(%d+):(d?%d+)$')
  end
  local debt = deficit ~= nil and string.sub(deficit, 1, 1) == 'd'
  at = wparse(at)
  deficit = wparse(debt and string.sub(deficit, 2) or deficit)
  if not at or not deficit or wsmall(deficit) == debt then
    return nil
  end
  if debt and wlt(U64MAX, wadd(at, deficit)) then
    return nil
  end
  if lease then
    lease = wparse(lease)
    if not lease then
      return nil
    end
  end
  if debt then
    return { at = at, big = deficit, lease = lease }
  end
  return { at = at, deficit = wnum(deficit), lease = lease }
end

function ALG.encode(state, p)
  local deficit = state.big and 'd' .. wformat(state.big) or string.format('%d', state.deficit)
  local text = wformat(state.at) .. ':' .. deficit
  if state.lease then
    text = text .. ':' .. wformat(state.lease)
  end
  return text
end

-- The bucket refilled at `at` (wide) short of `short` ns (wide, >= 0), keeping `lease`.
local function short_of(at, short, lease)
  if wsmall(short) then
    return { at = at, deficit = wnum(short), lease = lease }
  end
  return { at = at, big = short, lease = lease }
end

-- The deficit of `state` at its last refill, wide.
local function deficit_of(state)
  return state.big or wide(state.deficit)
end

-- The lease margin M, in ns: whole intervals.
local function margin(p)
  local m = math.min(idiv(p.bound, 16), E9)
  return m - (m % p.interval)
end

-- When the lease margin of `state` lifts (nil for none): M after both the end of the latest
-- slice's life and the moment the bucket is full.
local function lifts(state, p)
  if not state.lease then
    return nil
  end
  return wadd(wmax(wadd(state.at, deficit_of(state)), state.lease), wide(margin(p)))
end

-- The margin that holds for `state` now (0 for none), and the lease the state keeps.
local function held(state, p)
  local ends = lifts(state, p)
  if ends and wlt(WNOW, ends) then
    return margin(p), state.lease
  end
  return 0, nil
end

-- The state read at `now`: the time to read it at (a `now` before the last refill counts as no
-- time elapsed) and the deficit then; nil for a deficit still past 2^53 (a debt).
local function refill(state, now)
  if wlt(now, state.at) then
    return state.at, state.deficit
  end
  local short = wsub(deficit_of(state), wsub(now, state.at))
  if wneg(short) then
    return now, 0
  elseif not wsmall(short) then
    return now, nil
  end
  return now, wnum(short)
end

local function remaining(p, deficit, m)
  return idiv(math.max(p.capacity - m - deficit, 0), p.interval)
end

local decide

function ALG.check(state, now, cost, p)
  local d, next = decide(state, cost, p)
  -- A reading before the last refill: the waits run from the reading.
  local skew = { 0, 0 }
  if wlt(WNOW, state.at) then
    skew = wsub(state.at, WNOW)
  end
  return wlater(d, skew), next
end

decide = function(state, cost, p)
  local at, deficit = refill(state, WNOW)
  local m, lease = held(state, p)
  if not deficit then
    -- Measured from the refill: ALG.check measures the waits from the reading.
    return in_debt(wadd(state.at, state.big), at, cost, p, m)
  end
  local bound = p.bound - m
  local function refuse(retry_after)
    return deny(remaining(p, deficit, m), deficit, retry_after)
  end
  -- A cost above what the bound holds never fits; below it, `cost` is an exact double.
  if wlt(p.most, wcost(cost)) then
    return refuse(-1)
  end
  local take = cost * p.interval
  -- Full again past u64::MAX ns: denied, as in Rust.
  if wlt(U64MAX, wadd(wadd(at, wide(deficit)), wide(take))) then
    return refuse(-1)
  end
  -- deficit + take > bound (less the lease margin), without a sum above 2^53.
  if deficit > bound - take then
    return refuse(deficit - (bound - take))
  end
  local short = deficit + take
  local next
  if cost > 0 then
    next = { at = at, deficit = short, lease = lease }
  end
  -- The receipt is when the bucket is full again after this request: the end of its slot.
  local receipt = 0
  if cost > 0 then
    receipt = wformat(wadd(at, wide(short)))
  end
  return allow(remaining(p, short, m), short, math.max(short - p.capacity, 0), receipt), next
end

-- Puts the admission's tokens back while nothing was taken after it (the bucket is full again
-- exactly at its receipt), up to a full bucket.
function ALG.refund(state, now, cost, p, receipt)
  local at, deficit = refill(state, WNOW)
  -- A debt past 2^53 ends no admission's slot: an admission leaves the bucket at most its
  -- bound short at its own refill, and no refill goes back in time.
  if not deficit or deficit == 0 or cost == 0 then
    return nil
  end
  local full_at, slot_end = wadd(at, wide(deficit)), wparse(receipt)
  if not slot_end or wlt(full_at, slot_end) or wlt(slot_end, full_at) then
    return nil
  end
  -- Exact whenever cost * T < deficit <= 2^53; otherwise at least the deficit.
  return { at = at, deficit = math.max(deficit - cost * p.interval, 0), lease = state.lease }
end

-- The longest a state takes to be fresh after a request, leases aside: the bound.
function ALG.span(p)
  return p.bound
end

-- The state charged `cost` tokens now, whatever it holds: GCRA's charge on the deficit refilled
-- to now (Rust's `charge`); nil for a cost of 0.
function ALG.charge(state, now, cost, p)
  if cost == 0 then
    return nil
  end
  local at = wmax(WNOW, state.at)
  local full_at = wmax(wadd(state.at, deficit_of(state)), at)
  return short_of(at, wsub(charged_end(full_at, cost, p), at), state.lease)
end

-- What the key owes now past the bound, in intervals rounded up: GCRA's debt on the deficit
-- refilled to now (Rust's `debt`).
function ALG.debt(state, now, p)
  local short = deficit_of(state)
  if wlt(state.at, WNOW) then
    short = wsub(short, wsub(WNOW, state.at))
  end
  return owed_units(short, p)
end

-- Full at the last refill plus the deficit, and no lease margin holding.
function ALG.fresh_in(state, now, p)
  local ends = lifts(state, p)
  if ends then
    return wttl(wsub(ends, WNOW))
  end
  if state.deficit == 0 then
    return 0
  end
  return wttl(wsub(wadd(state.at, deficit_of(state)), WNOW))
end

-- The state a lease now decides with: the margin in force, for a slice living M.
function ALG.lease_begin(state, now, p)
  local lease = wadd(WNOW, wide(margin(p)))
  if state.lease then
    lease = wmax(state.lease, lease)
  end
  return { at = state.at, deficit = state.deficit, big = state.big, lease = lease }
end

-- A slice lives M: the margin its decisions were taken with.
function ALG.lease_life(state, now, p)
  return margin(p)
end
