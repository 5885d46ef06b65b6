-- GCRA (also the leaky bucket's queue, and shaping with a maximum delay): the state is the
-- theoretical arrival time (TAT). Parameters: the emission interval T, the tolerance (what
-- passes at once), the bound (the tolerance plus the longest wait) and the capacity that
-- `remaining` counts against, all in ns.
--
-- Debts (debt.lua, with wide.lua): a TAT more than FAR ahead of the script's whole second,
-- which only a charge writes (a check writes at most the bound, 2^52 ns, past the time), is kept
-- as a wide integer too (`far`); every request waits for it. The two modules are made by the
-- first call that needs them (`make_debts`, ahead of this module, returns what they define):
-- defined up front, they would cost every call some microseconds of Redis's time.
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

-- How far past NOW_S (ns) a TAT is kept as a double: every sum of it and a bound (2^52) stays
-- exact, and a TAT further ahead is further than any bound from any time the script decides at.
local FAR = 4503601774854144 -- 2^52 + 2^31

-- The wide integers and debts, made once per call that needs them.
local made
local function debts()
  made = made or make_debts()
  return made
end

-- The state whose TAT is `e` (wide, absolute), keeping `lease`.
local function ending(e, lease)
  local d = debts()
  local rel = d.wsub(e, { NOW_S, 0 })
  local state = { tat = d.wnum(rel), lease = lease }
  if d.wlt(d.wide(FAR), rel) then
    state.far = e
  end
  return state
end

-- '<tat>' or, while slices may be out, '<tat>:<end of the latest slice's life>'.
function ALG.decode(text, p)
  local tat, lease = string.match(text, '^(%d+):(%d+)$')
  if not tat then
    tat = text
  end
  local rel = tparse(tat)
  if not rel then
    return nil
  end
  if lease then
    lease = tparse(lease)
    if not lease then
      return nil
    end
  end
  if rel > FAR then
    -- A debt (exact below 2^53, where the comparison is made).
    local e = debts().wparse(tat)
    if not e then
      return nil
    end
    return ending(e, lease)
  end
  return { tat = rel, lease = lease }
end

function ALG.encode(state, p)
  local tat = state.far and debts().wformat(state.far) or tformat(state.tat)
  if state.lease then
    return tat .. ':' .. tformat(state.lease)
  end
  return tat
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

-- Whether the sum of two relative times (each exact, their sum at most 2^53 + 2^32 ns, some
-- 105 days) lies past the end of the clock.
local function past_the_end(a, b)
  if NOW_S < LAST_S - 10000000 then
    return false
  end
  local sa, sb = idiv(a, E9), idiv(b, E9)
  local s, n = NOW_S + sa + sb, (a - sa * E9) + (b - sb * E9)
  if n >= E9 then
    s, n = s + 1, n - E9
  end
  return s > LAST_S or (s == LAST_S and n > LAST_NS)
end

function ALG.check(state, now, cost, p)
  local m, lease = held(state, now, p)
  if state.far then
    local d = debts()
    return d.in_debt(state.far, d.wnorm(NOW_S, now), cost, p, m)
  end
  local bound = p.bound - m
  local reset_after, remaining = standing(p, state.tat, now, m)
  -- A cost above the bound can never pass. (A cost of 2^53 or more is not exact as a number,
  -- but it rounds to 2^53 at least, and every bound is at most 2^52.) One that only the lease
  -- margin keeps out is told the wait past the bound less the margin.
  local increment = cost * p.interval
  if increment > p.bound then
    return deny(remaining, reset_after, -1)
  end
  local from = math.max(state.tat, now)
  -- Past the end of the clock nothing passes any more.
  if past_the_end(from, increment) then
    return deny(remaining, reset_after, -1)
  end
  -- Compared and subtracted without a sum past 2^53 (a debt takes `from` up to FAR).
  local owed = from - now
  if owed > bound - increment then
    return deny(remaining, reset_after, owed - (bound - increment))
  end
  local tat = from + increment
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
  if state.far then
    -- The admission set a TAT this far ahead only on a clock that has gone back since.
    local d = debts()
    local slot_end, len = d.wparse(receipt), d.wtimes(d.wcost(cost), p.interval)
    if cost == 0 or not slot_end or d.wlt(slot_end, state.far) or d.wlt(state.far, slot_end) then
      return nil
    end
    local back = d.wnorm(NOW_S, now)
    if len and d.wlt(back, d.wsub(slot_end, len)) then
      back = d.wsub(slot_end, len)
    end
    return ending(back, state.lease)
  end
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

-- The state charged `cost` intervals at `now`, whatever is left: from the TAT, or from now when
-- it has passed (Rust's `charge`); nil for a cost of 0.
function ALG.charge(state, now, cost, p)
  if cost == 0 then
    return nil
  end
  local d = debts()
  local from = state.far or d.wnorm(NOW_S, math.max(state.tat, now))
  return ending(d.charged_end(from, cost, p), state.lease)
end

-- What the key owes at `now` past the bound, in intervals rounded up (Rust's `debt`): 0 when
-- it is not in debt.
function ALG.debt(state, now, p)
  if state.far then
    local d = debts()
    return d.owed_units(d.wsub(state.far, d.wnorm(NOW_S, now)), p)
  end
  if state.tat - now <= p.bound then
    return 0
  end
  local d = debts()
  return d.owed_units(d.wide(state.tat - now), p)
end

-- Fresh when the TAT has passed and no lease margin holds.
function ALG.fresh_in(state, now, p)
  if state.far then
    local d, ends = debts(), state.far
    if state.lease then
      ends = d.wadd(ends, d.wide(margin(p)))
    end
    return d.wttl(d.wsub(ends, d.wnorm(NOW_S, now)))
  end
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
  return { tat = state.tat, far = state.far, lease = lease }
end

-- A slice lives M: the margin its decisions were taken with.
function ALG.lease_life(state, now, p)
  return margin(p)
end
