-- Sliding log, mirrored from src/algorithm/sliding_log.rs: the state is the (time, cost) of
-- each instant with admitted requests, oldest first, stored as
-- '<newest ns>:<age>:<cost>,<age>:<cost>,...' where each age is the time before the newest
-- (0 for the newest itself). Parameters: the limit, and the period in ns.
--
-- Times are read relative to the newest, as the entries that count lie within a period of it:
-- those are exact, and an entry so old that its time is not is out of the window whichever
-- way it rounds. A log whose newest entry is so far after now that a wait until it leaves the
-- window would pass 2^53 is refused (only a clock that jumped back by weeks sees one). Every cost is at least 1 and the costs of a stored log add up to at most
-- 2^53 (decode checks it), so every sum below is exact; differences of sums are taken so that
-- no intermediate result goes above 2^53 either.
local ALG = { TAG = 'log', NPARAMS = 2 }

function ALG.params(argv, i)
  return { limit = tonumber(argv[i]), period = tonumber(argv[i + 1]) }
end

-- An empty log: times and costs, in parallel.
function ALG.fresh(p)
  return { times = {}, costs = {} }
end

function ALG.decode(text, p)
  local _, head, newest = string.find(text, '^(%d+):')
  newest = tparse(newest)
  if not newest or newest - NOW > EXACT - p.period then
    return nil
  end
  local times, costs = {}, {}
  local total, pos, age = 0, head + 1, math.huge
  while true do
    local _, last, older, cost = string.find(text, '^(%d+):(%d+)', pos)
    if not last then
      return nil
    end
    -- Ages fall strictly, to 0 for the newest entry.
    older, cost = natural(older), natural(cost)
    -- (The total is compared before adding: a sum past 2^53 would round.)
    if not older or not cost or older >= age or cost == 0 or cost > EXACT - total then
      return nil
    end
    age, total = older, total + cost
    times[#times + 1], costs[#costs + 1] = newest - age, cost
    if last == #text then
      return age == 0 and { times = times, costs = costs } or nil
    end
    if string.sub(text, last + 1, last + 1) ~= ',' then
      return nil
    end
    pos = last + 2
  end
end

function ALG.encode(state, p)
  local times, costs = state.times, state.costs
  local newest = times[#times]
  local parts = {}
  for j = 1, #times do
    parts[j] = string.format('%d:%d', newest - times[j], costs[j])
  end
  return tformat(newest) .. ':' .. table.concat(parts, ',')
end

-- The instant the window ends at (now, or the newest entry's time when the clock reads
-- earlier), the index of the oldest entry in the window (after the last when none is), and
-- the cost in the window.
local function read(state, now, p)
  local times, costs = state.times, state.costs
  local n = #times
  local at = now
  if n > 0 then
    at = math.max(times[n], now)
  end
  local first = 1
  while first <= n and at - times[first] >= p.period do
    first = first + 1
  end
  local used = 0
  for j = first, n do
    used = used + costs[j]
  end
  return at, first, used
end

-- The wait from now until an entry at `t` leaves the window.
local function expiry(t, now, p)
  return math.max(t - now + p.period, 0)
end

function ALG.check(state, now, cost, p)
  local times, costs = state.times, state.costs
  local n = #times
  local at, first, used = read(state, now, p)
  local remaining = math.max(p.limit - used, 0)
  local reset_after = 0
  if n >= first then
    reset_after = expiry(times[n], now, p)
  end
  if cost > remaining then
    local retry_after = -1
    if cost <= p.limit then
      -- Wait until the oldest entries have freed used + cost - limit.
      local need = used - (p.limit - cost)
      local freed = 0
      for j = first, n do
        freed = freed + costs[j]
        if freed >= need then
          retry_after = expiry(times[j], now, p)
          break
        end
      end
    end
    return deny(remaining, reset_after, retry_after)
  end
  if cost == 0 then
    return allow(remaining, reset_after)
  end
  -- Log the request at `at`, dropping the entries that have left the window.
  local next = ALG.fresh(p)
  for j = first, n do
    next.times[j - first + 1], next.costs[j - first + 1] = times[j], costs[j]
  end
  local m = #next.times
  if m > 0 and next.times[m] == at then
    next.costs[m] = next.costs[m] + cost
  else
    next.times[m + 1], next.costs[m + 1] = at, cost
  end
  return allow(remaining - cost, expiry(at, now, p)), next
end

-- Takes `cost` back from the newest entries in the window, never below zero.
function ALG.refund(state, now, cost, p)
  local _, first, used = read(state, now, p)
  if cost == 0 or used == 0 then
    return nil
  end
  local next = ALG.fresh(p)
  for j = first, #state.times do
    next.times[j - first + 1], next.costs[j - first + 1] = state.times[j], state.costs[j]
  end
  local left, m = cost, #next.times
  while left > 0 and m > 0 do
    local take = math.min(left, next.costs[m])
    next.costs[m] = next.costs[m] - take
    left = left - take
    if next.costs[m] == 0 then
      next.times[m], next.costs[m] = nil, nil
      m = m - 1
    end
  end
  return next
end

function ALG.fresh_in(state, now, p)
  local n = #state.times
  return n > 0 and state.times[n] - now + p.period or 0
end
