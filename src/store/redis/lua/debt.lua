-- Debts (after wide.lua; for gcra.lua and token_bucket.lua): a cost settled after the response
-- above its reservation is charged whatever the key has left, moving the end of its schedule
-- (GCRA's TAT, the instant a token bucket is full again) that many intervals further, up to the
-- end of the clock. A debt may take that end further ahead than a double holds exactly: the
-- modules keep such an end as a wide integer, and decide it here. Every request then waits,
-- so the decision needs no more than the end, the time and the cost. Parameters: `p.interval`
-- and `p.bound` (ns), as both modules name them.

-- a * x for a wide a >= 0 and an integer 1 <= x <= 2^53; nil when the product passes
-- u64::MAX (its whole seconds alone do).
local function wtimes(a, x)
  local h = a[1] * x
  if h > U64MAX[1] then
    return nil
  end
  return wadd({ h, 0 }, wmul(a[2], x))
end

-- The end `e` of a schedule (wide, absolute) charged `cost` (ARGV[2]'s, read exactly) intervals
-- more, stopping at the end of the clock: Rust's `saturating_add` of a `saturating_mul`.
local function charged_end(e, cost, p)
  local take = wtimes(wcost(cost), p.interval)
  if not take then
    return U64MAX
  end
  local later = wadd(e, take)
  if wlt(U64MAX, later) then
    return U64MAX
  end
  return later
end

-- The decision for a request of `cost` at `now` (wide, absolute) against a schedule that ends
-- at `e`, past every bound (`m`, the lease margin that holds): denied, with nothing left, until
-- the end less the bound; never, for a cost above the bound or one whose end would pass the end
-- of the clock.
local function in_debt(e, now, cost, p, m)
  local owed = wsub(e, now)
  local increment = cost * p.interval
  if increment > p.bound or wlt(U64MAX, wadd(e, wide(increment))) then
    return deny(0, wreply(owed), -1)
  end
  return deny(0, wreply(owed), wreply(wsub(wadd(owed, wide(increment)), wide(p.bound - m))))
end

-- What a schedule that ends `owed` ns (wide) after the time owes past the bound, in intervals
-- rounded up (Rust's `debt`): 0 when it ends within the bound. Exact up to 2^53 intervals;
-- beyond, a debt the driver charges again at 2^53 - 1 intervals (some 104 days at least).
local function owed_units(owed, p)
  local past = wsub(owed, wide(p.bound))
  if not wlt({ 0, 0 }, past) then
    return 0
  elseif not wsmall(past) then
    return math.min(math.ceil(wnum(past) / p.interval), MAX53 - 1)
  end
  local n = wnum(past)
  local q = idiv(n, p.interval)
  if n - q * p.interval > 0 then
    q = q + 1
  end
  return q
end
