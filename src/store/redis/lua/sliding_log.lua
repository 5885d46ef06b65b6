-- Sliding log, mirrored from src/algorithm/sliding_log.rs: the (time, cost) of each instant with
-- admitted requests, oldest first, and for each the running total of the cost logged up to and
-- including it, so the cost in the window is one subtraction and the entry a denied request
-- waits for is found by a search, as in the Rust reference. Parameters: the limit, and the
-- period in ns.
--
-- Stored as '<total before the first record>|' then one 20-byte record per entry: its time as
-- absolute whole seconds (a double) and nanoseconds (4 bytes), and its running total (a
-- double), little-endian (struct). A call reads the records it needs (O(1) while the oldest
-- entry is in the window, O(log k) to find the k-th), and an admission copies the live records
-- and appends one (a copy in C, no Lua work per record). A refund rewrites the totals on the
-- shorter side of the refunded record, and the totals are rewritten from 0 (a pass over the
-- log) when they would pass 2^53: the store caps the limit so that such a pass stays well
-- under a millisecond.
--
-- A record's time, relative to NOW_S, is exact within 2^53 ns of it; an entry further back is
-- out of the window whichever way it rounds. Totals are integers below 2^53, so every figure is
-- exact. A log whose newest entry is so far after now that a wait until it leaves the window
-- would pass 2^53 is refused (only a clock that jumped back by weeks sees one). The header, the
-- oldest and the newest records are checked when a log is read.
local ALG = { TAG = 'log', NPARAMS = 2 }
local W = 20

function ALG.params(argv, i)
  return { limit = tonumber(argv[i]), period = tonumber(argv[i + 1]) }
end

-- A log: `body` holds `n` records; `before` is the running total before the first record.
function ALG.fresh(p)
  return { body = '', n = 0, before = 0 }
end

-- A record of time `t` (relative) and running total `total`.
local function pack(t, total)
  local secs = idiv(t, E9)
  return struct.pack('<dI4d', NOW_S + secs, t - secs * E9, total)
end

-- Record j (1-based) of `state` with `delta` added to its running total.
local function moved(state, j, delta)
  local secs, ns, total = struct.unpack('<dI4d', state.body, (j - 1) * W + 1)
  return struct.pack('<dI4d', secs, ns, total + delta)
end

-- The time (relative) and the running total of record j (1-based).
local function record(state, j)
  local secs, ns, total = struct.unpack('<dI4d', state.body, (j - 1) * W + 1)
  return (secs - NOW_S) * E9 + ns, total
end

local function time_of(state, j)
  local t = record(state, j)
  return t
end

-- The running total before record j.
local function total_before(state, j)
  if j <= 1 then
    return state.before
  end
  local _, total = record(state, j - 1)
  return total
end

local function integral(x)
  return x and x == x and x >= 0 and x < EXACT and math.floor(x) == x
end

function ALG.decode(text, p)
  local _, head, before = string.find(text, '^(%d+)|')
  before = natural(before)
  if not before or before >= EXACT then
    return nil
  end
  local body = string.sub(text, head + 1)
  local n = #body / W
  if n < 1 or n ~= math.floor(n) then
    return nil
  end
  local state = { body = body, n = n, before = before }
  for _, j in ipairs({ 1, n }) do
    local secs, ns, total = struct.unpack('<dI4d', body, (j - 1) * W + 1)
    if not (integral(secs) and ns < E9 and integral(total)) or total <= before then
      return nil
    end
  end
  local oldest, first = record(state, 1)
  local newest, last = record(state, n)
  if last < first or newest < oldest or newest - NOW > EXACT - p.period then
    return nil
  end
  return state
end

function ALG.encode(state, p)
  return string.format('%d|', state.before) .. state.body
end

-- The first j from `from` on for which found(j) holds (n + 1 when none does), for a `found`
-- that is false up to some record and true from there on: a galloping search, whose work grows
-- with the logarithm of the distance from `from`.
local function first_where(state, from, found)
  local n = state.n
  local lo, hi, step = from, from, 1
  while hi <= n and not found(hi) do
    lo = hi + 1
    hi = math.min(hi + step, n + 1)
    step = step * 2
  end
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if found(mid) then
      hi = mid
    else
      lo = mid + 1
    end
  end
  return lo
end

-- The instant the window ends at (now, or the newest entry's time when the clock reads
-- earlier), the index of the oldest entry in the window (n + 1 when none is), and the cost in
-- the window.
local function read(state, now, p)
  local n = state.n
  if n == 0 then
    return now, 1, 0
  end
  local newest, last = record(state, n)
  local at = math.max(newest, now)
  local first = first_where(state, 1, function(j)
    return at - time_of(state, j) < p.period
  end)
  return at, first, last - total_before(state, first)
end

-- The wait from now until an entry at `t` leaves the window.
local function expiry(t, now, p)
  return math.max(t - now + p.period, 0)
end

-- The records from `first` on with totals from 0: a pass over the log, when a total would
-- pass 2^53.
local function rebased(state, first)
  local before, parts = total_before(state, first), {}
  for j = first, state.n do
    parts[#parts + 1] = moved(state, j, -before)
  end
  return { body = table.concat(parts), n = state.n - first + 1, before = 0 }
end

-- The log from record `first` on.
local function from(state, first)
  return {
    body = string.sub(state.body, (first - 1) * W + 1),
    n = state.n - first + 1,
    before = total_before(state, first),
  }
end

-- Logs `cost` at `at` (not before the newest entry) in a log of live records.
local function push(state, at, cost)
  local n = state.n
  if n == 0 then
    return { body = pack(at, cost), n = 1, before = 0 }
  end
  local newest, last = record(state, n)
  if last + cost >= EXACT then
    state = rebased(state, 1)
    newest, last = record(state, n)
  end
  local body = state.body
  if newest == at then
    body = string.sub(body, 1, (n - 1) * W)
    n = n - 1
  end
  state.body, state.n = body .. pack(at, last + cost), n + 1
  return state
end

function ALG.check(state, now, cost, p)
  local n = state.n
  local at, first, used = read(state, now, p)
  local remaining = math.max(p.limit - used, 0)
  local reset_after = 0
  if n >= first then
    reset_after = expiry(time_of(state, n), now, p)
  end
  if cost > remaining then
    local retry_after = -1
    if cost <= p.limit then
      -- Wait until the oldest entries have freed used + cost - limit.
      local need = used - (p.limit - cost)
      local before = total_before(state, first)
      local j = first_where(state, first, function(j)
        local _, total = record(state, j)
        return total - before >= need
      end)
      if j <= n then
        retry_after = expiry(time_of(state, j), now, p)
      end
    end
    return deny(remaining, reset_after, retry_after)
  end
  if cost == 0 then
    return allow(remaining, reset_after)
  end
  -- Log the request at `at`, dropping the entries that have left the window. The receipt is
  -- the time the request was logged at.
  local next = push(from(state, first), at, cost)
  return allow(remaining - cost, expiry(at, now, p), 0, tformat(at)), next
end

-- Takes up to `cost` back from the entry logged at the admission's receipt, while it is in the
-- window; nothing else. The entries that have left the window are dropped.
function ALG.refund(state, now, cost, p, receipt)
  local at = tparse(receipt)
  if cost == 0 or not at then
    return nil
  end
  local _, first = read(state, now, p)
  local found = first_where(state, first, function(j)
    return time_of(state, j) >= at
  end)
  if found > state.n or time_of(state, found) ~= at then
    return nil
  end
  local live = from(state, first)
  found = found - first + 1
  local own = select(2, record(live, found)) - total_before(live, found)
  local taken = math.min(cost, own)
  -- Only differences of totals count: the totals after the entry go down, or those before it
  -- (and `before`) go up, whichever side is shorter.
  local n, before, parts = live.n, live.before, {}
  local function rewrite(j, delta)
    parts[#parts + 1] = moved(live, j, delta)
  end
  if found - 1 < n - found then
    before = before + taken
    for j = 1, found - 1 do
      rewrite(j, taken)
    end
    if taken < own then
      rewrite(found, 0)
    end
    parts[#parts + 1] = string.sub(live.body, found * W + 1)
  else
    parts[1] = string.sub(live.body, 1, (found - 1) * W)
    if taken < own then
      rewrite(found, -taken)
    end
    for j = found + 1, n do
      rewrite(j, -taken)
    end
  end
  if taken == own then
    n = n - 1
  end
  if n == 0 then
    return ALG.fresh(p)
  end
  live.body, live.n, live.before = table.concat(parts), n, before
  return live
end

-- The longest a state takes to be fresh after a request: a period.
function ALG.span(p)
  return p.period
end

function ALG.fresh_in(state, now, p)
  if state.n == 0 then
    return 0
  end
  return time_of(state, state.n) - now + p.period
end
