-- The hybrid quota-linear algorithm (after wide.lua): a fixed window per key holding `limit`
-- tokens (bursty), and after a window's last token a bucket that refills at one ns per ns,
-- starting negative (smooth). Parameters: the limit, the period and the emission interval T,
-- each at most 2^53. A whole quota of smooth tokens, limit * T, reaches 2^54, and the bucket
-- can lack up to a period below empty, so every time and smooth figure is wide.
local ALG = { TAG = 'hybrid', NPARAMS = 3 }

function ALG.params(argv, i)
  local limit, period, interval = tonumber(argv[i]), tonumber(argv[i + 1]), tonumber(argv[i + 2])
  return {
    limit = limit,
    period = wide(period),
    interval = interval,
    quota = wmul(limit, interval),
  }
end

-- A key never seen: `HybridState::Fresh`. Fresh states are never stored.
function ALG.fresh(p)
  return { mode = 'f' }
end

-- 'b:<window start>:<tokens left>' or 's:<last admitted>:<empty at>', times in absolute ns. A
-- token count above 2^53 is no state this store wrote (every limit is at most 2^53).
function ALG.decode(text, p)
  local mode, a, b = string.match(text, '^([bs]):(%d+):(%d+)$')
  a, b = wparse(a), wparse(b)
  if not a or not b or (mode == 'b' and not wsmall(b)) then
    return nil
  elseif mode == 'b' then
    return { mode = 'b', start = a, tokens = wnum(b) }
  end
  return { mode = 's', time = a, empty_at = b }
end

function ALG.encode(state, p)
  if state.mode == 'b' then
    return 'b:' .. wformat(state.start) .. ':' .. string.format('%d', state.tokens)
  end
  return 's:' .. wformat(state.time) .. ':' .. wformat(state.empty_at)
end

-- The state read at `now` (a `now` before the state's own time counts as no time elapsed):
-- fresh (a window over, a whole quota in the bucket), a window with `left` ns to go, or a
-- bucket with `tokens` ns of tokens, below a whole quota and possibly negative.
local function standing(state, now, p)
  if state.mode == 'b' then
    now = wmax(now, state.start)
    local left = wsub(p.period, wsub(now, state.start))
    if wlt({ 0, 0 }, left) then
      return { mode = 'b', now = now, start = state.start, tokens = state.tokens, left = left }
    end
  elseif state.mode == 's' then
    now = wmax(now, state.time)
    local tokens = wsub(now, state.empty_at)
    if wlt(tokens, p.quota) then
      return { mode = 's', now = now, empty_at = state.empty_at, tokens = tokens }
    end
  end
  return { mode = 'f', now = now }
end

-- remaining and reset_after for a standing.
local function report(s, p)
  if s.mode == 'b' then
    return s.tokens, wnum(s.left)
  elseif s.mode == 's' then
    local whole = 0
    if not wneg(s.tokens) then
      whole = wdiv(s.tokens, p.interval)
    end
    return whole, wreply(wsub(p.quota, s.tokens))
  end
  return p.limit, 0
end

local function smooth(now, empty_at, p)
  local after = { mode = 's', now = now, empty_at = empty_at, tokens = wsub(now, empty_at) }
  local remaining, reset_after = report(after, p)
  return allow(remaining, reset_after), { mode = 's', time = now, empty_at = empty_at }
end

local decide

function ALG.check(state, now, cost, p)
  local s = standing(state, WNOW, p)
  local d, next = decide(s, cost, p)
  -- A reading before the state's own time: the waits run from the reading.
  return wlater(d, wsub(s.now, WNOW)), next
end

decide = function(s, cost, p)
  local remaining, reset_after = report(s, p)
  -- Above the limit never passes; at or below it, `cost` is an exact double.
  if wlt(wide(p.limit), wcost(cost)) then
    return deny(remaining, reset_after, -1)
  elseif cost == 0 then
    return allow(remaining, reset_after)
  elseif s.mode == 'f' then
    -- A new window, with this request's tokens taken.
    local tokens = p.limit - cost
    return allow(tokens, wnum(p.period)), { mode = 'b', start = s.now, tokens = tokens }
  elseif s.mode == 'b' then
    if s.tokens == cost then
      -- The window's last tokens: smooth, with one token at the window's end; past the
      -- clock's range the bucket stays empty.
      local empty_at = wsub(wadd(s.start, p.period), wide(p.interval))
      if wlt(U64MAX, empty_at) then
        empty_at = U64MAX
      end
      return smooth(s.now, empty_at, p)
    elseif s.tokens > cost then
      local tokens = s.tokens - cost
      return allow(tokens, reset_after), { mode = 'b', start = s.start, tokens = tokens }
    end
    -- Too few tokens in the window: the next one opens with a full quota.
    return deny(remaining, reset_after, reset_after)
  end
  local take = wmul(cost, p.interval)
  if wlt(s.tokens, take) then
    return deny(remaining, reset_after, wreply(wsub(take, s.tokens)))
  end
  return smooth(s.now, wadd(s.empty_at, take), p)
end

-- Nothing is given back (as in Rust).
function ALG.refund(state, now, cost, p)
  return nil
end

-- The longest a state takes to be fresh after a request: a window, then a whole quota of
-- smooth tokens.
function ALG.span(p)
  return wnum(wadd(p.period, p.quota))
end

-- Until the window ends, or until the bucket holds a whole quota.
function ALG.fresh_in(state, now, p)
  if state.mode == 'b' then
    return wttl(wsub(wadd(state.start, p.period), WNOW))
  elseif state.mode == 's' then
    local full = wadd(state.empty_at, p.quota)
    if not wlt(state.time, full) then
      return 0
    end
    return wttl(wsub(full, WNOW))
  end
  return 0
end
