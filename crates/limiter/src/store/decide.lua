-- Sluice: decides a check atomically inside Redis.
--
-- This is the body of a chunk that returns `main(KEYS, ARGV)`; the service
-- wraps it into a Redis function library (loaded once, called with FCALL)
-- or, on servers without functions, into an EVAL script.
--
-- The six algorithms with sluice-core's integer arithmetic, step for step,
-- in microseconds: Lua numbers are doubles, exact below 2^53, which holds
-- microseconds since the epoch but not nanoseconds. Products that may pass
-- 2^53 (scaled bucket levels reach `burst * window`) are computed exactly
-- with wide integers (arrays of 24-bit limbs), so the decisions are those of
-- sluice-core run on microsecond times.
--
-- CODE: each algorithm's name mapped to its code (sluice-core's
--       `Algorithm::code`), defined by the service before this chunk.
-- PERMITS: sluice-core's permits constants (`code`, `max_holders`,
--       `retry_us`), defined by the service before this chunk.
-- KEYS: one state key per limit.
-- ARGV: mode ("check" or "refund"), now in microseconds ("" = server TIME),
--       admitted_at in microseconds (refund only), requests (check: how
--       many identical requests the check carries; refund: how many to give
--       back; "" = 1), then per limit:
--       algorithm code, requests, window_us, burst, precision, soft_percent,
--       cost (a request's weight under this limit), max_delay_us (delay
--       mode, gcra and leaky_bucket; "" = none), lease (check: the most
--       units to take beyond the cost once admitted, one request only;
--       refund: the units granted, given back with the cost; 0 = none),
--       returned (check: units to give back before deciding, 0 = none),
--       returned_age_us (how long before now they were consumed), reserve
--       (check: units that must still fit beside the cost, not consumed:
--       sluice-core's decide_reserving; 0 = none), block_us (check: a
--       penalty box; 0 = none).
-- Penalty box: a limit with block_us that refuses over its limit (denial
--       1) stores when its block ends in `<key>:block` (the key's hash tag,
--       so the same slot; PX the block) and reports denial 5 with the
--       block as its retry_after; while that key holds a later time, every
--       check carrying the limit is refused, consuming nothing, the limit
--       reporting denial 4 and the block's end as retry_after and reset.
-- Check reply: allowed (every request admitted), now, admitted (how many
--       requests, the first ones in arrival order), delays (how many delay
--       values end the reply: 0, or one per admitted request), then per
--       limit: allowed, limit, remaining, reset_us, retry_after_us, denial
--       (0 none, 1 over limit, 2 cost exceeds capacity, 3 delay too long,
--       4 blocked, 5 over limit and blocked from now),
--       delay_us (delay mode: how long the request waits until it
--       conforms), leased (units granted), all of the last request decided (the last one, or the
--       first refused one after the admitted ones); then the delays, in
--       microseconds, of each admitted request (delay mode, when any waits).
-- Refund reply: as a check's, with each limit decided again after the
--       refund without consuming (a request of its weight).
-- Concurrency limits: a limit whose code is PERMITS.code takes, per limit,
--       code, permits, ttl_us, holder (decimal), "", "", cost, "", 0, 0, 0, 0, 0;
--       sluice-core's `permits` semantics. Its key is a hash: field = holder
--       in decimal, value = "count:expires_us"; it expires (PX) when the
--       last holder's permits do. A refund gives the cost back (a release).
-- Adjust mode ("adjust"): as a check's arguments (admitted_at "", requests
--       1), each limit's cost being the units to charge (0 = none) and its
--       returned / returned_age_us the units to refund; each key on its own:
--       a charge (sluice-core's `charge`: unconditional, possibly into
--       debt) or a refund (`refund_at`). Reply: as a check's (allowed 1,
--       admitted 0, no delays), each limit decided after its adjustment as
--       a query (cost 0).
-- Permits mode ("permits"): now ("" = TIME), holder, ttl_us, then per key:
--       units to release (0 = none), renew (1 or 0). Releases first, then
--       renewals. Reply: now, then per key: released, renewed (1 or 0):
--       the holder held permits there.
--
-- States are msgpack arrays whose first element is the algorithm code.

local TOKEN_BUCKET, LEAKY_BUCKET, GCRA = CODE.token_bucket, CODE.leaky_bucket, CODE.gcra
local FIXED_WINDOW, SLIDING_LOG = CODE.fixed_window, CODE.sliding_log
local SLIDING_WINDOW = CODE.sliding_window

local SAFE = 9007199254740992 -- 2^53
local LIMB = 16777216 -- 2^24
local floor, fmod, min, max = math.floor, math.fmod, math.min, math.max

local POW2 = {}
do
  local v = 1
  for i = 0, 63 do
    POW2[i] = v
    v = v * 2
  end
end

-- Wide integers: plain numbers below 2^53, otherwise normalized tables.

local function big(x)
  if type(x) == 'table' then return x end
  local t, i = {}, 1
  while x > 0 do
    local l = fmod(x, LIMB)
    t[i] = l
    x = (x - l) / LIMB
    i = i + 1
  end
  return t
end

local function norm(t)
  local n = #t
  while n > 0 and t[n] == 0 do
    t[n] = nil
    n = n - 1
  end
  if n <= 2 then return (t[1] or 0) + (t[2] or 0) * LIMB end
  if n == 3 and t[3] < 32 then return t[1] + t[2] * LIMB + t[3] * LIMB * LIMB end
  return t
end

local function cmp(a, b)
  local ta, tb = type(a) == 'table', type(b) == 'table'
  if not ta and not tb then
    if a < b then return -1 elseif a > b then return 1 else return 0 end
  end
  if not ta then return -1 end
  if not tb then return 1 end
  if #a ~= #b then
    if #a < #b then return -1 else return 1 end
  end
  for i = #a, 1, -1 do
    if a[i] ~= b[i] then
      if a[i] < b[i] then return -1 else return 1 end
    end
  end
  return 0
end

local function add(a, b)
  if type(a) ~= 'table' and type(b) ~= 'table' then
    local s = a + b
    if s < SAFE then return s end
  end
  a, b = big(a), big(b)
  local r, carry = {}, 0
  for i = 1, max(#a, #b) do
    local s = (a[i] or 0) + (b[i] or 0) + carry
    if s >= LIMB then
      r[i] = s - LIMB
      carry = 1
    else
      r[i] = s
      carry = 0
    end
  end
  if carry > 0 then r[#r + 1] = carry end
  return norm(r)
end

-- a - b, saturating at zero.
local function sub(a, b)
  if cmp(a, b) <= 0 then return 0 end
  if type(a) ~= 'table' then return a - b end
  b = big(b)
  local r, borrow = {}, 0
  for i = 1, #a do
    local s = a[i] - (b[i] or 0) - borrow
    if s < 0 then
      r[i] = s + LIMB
      borrow = 1
    else
      r[i] = s
      borrow = 0
    end
  end
  return norm(r)
end

local function mul(a, b)
  if type(a) ~= 'table' and type(b) ~= 'table' then
    local p = a * b
    if p < SAFE then return p end
  end
  a, b = big(a), big(b)
  local r = {}
  for i = 1, #a + #b + 1 do r[i] = 0 end
  for i = 1, #a do
    local ai = a[i]
    if ai ~= 0 then
      local carry = 0
      for j = 1, #b do
        local s = r[i + j - 1] + ai * b[j] + carry
        local lo = fmod(s, LIMB)
        r[i + j - 1] = lo
        carry = (s - lo) / LIMB
      end
      local k = i + #b
      while carry > 0 do
        local s = r[k] + carry
        local lo = fmod(s, LIMB)
        r[k] = lo
        carry = (s - lo) / LIMB
        k = k + 1
      end
    end
  end
  return norm(r)
end

-- Quotient and remainder of a by a plain number d (1 <= d < 2^52).
local function divmod(a, d)
  if type(a) ~= 'table' then
    local r = fmod(a, d)
    return (a - r) / d, r
  end
  local q, r = {}, 0
  for i = #a, 1, -1 do
    local limb, ql = a[i], 0
    for j = 23, 0, -1 do
      local p = POW2[j]
      local bit = 0
      if limb >= p then
        limb = limb - p
        bit = 1
      end
      r = r * 2 + bit
      ql = ql * 2
      if r >= d then
        r = r - d
        ql = ql + 1
      end
    end
    q[i] = ql
  end
  return norm(q), r
end

local function floor_div(a, d)
  local q = divmod(a, d)
  return q
end

local function ceil_div(a, d)
  local q, r = divmod(a, d)
  if r ~= 0 then return add(q, 1) end
  return q
end

-- A wide result as a reply number; past 2^53 it saturates there.
local function sat(x)
  if type(x) == 'table' then return SAFE end
  return x
end

local function wmin(a, b)
  if cmp(a, b) <= 0 then return a end
  return b
end

-- Limits, as sluice-core's Params.

local MAX_REQUESTS = 1000000000000
-- Windows in microseconds: 1 ms to 366 days, as sluice-core accepts.
local MIN_WINDOW = 1000
local MAX_WINDOW = 366 * 24 * 3600 * 1000000
local MAX_PRECISION = 1000
local MAX_SOFT_PERCENT = 1000
local MAX_LOG_ENTRIES = 100000

local function clamp(x, lo, hi)
  return min(max(x, lo), hi)
end

local function with_soft(n, percent)
  if percent == 0 then return n end
  return n + floor_div(n * percent, 100)
end

local function params(alg, requests, window, burst, precision, soft, max_delay)
  requests = clamp(requests, 1, MAX_REQUESTS)
  burst = clamp(burst, 1, MAX_REQUESTS)
  soft = min(soft, MAX_SOFT_PERCENT)
  window = clamp(window, MIN_WINDOW, MAX_WINDOW)
  local cap = with_soft(burst, soft)
  if alg == SLIDING_LOG then cap = min(cap, MAX_LOG_ENTRIES) end
  local p = {
    alg = alg,
    requests = requests,
    rate = with_soft(requests, soft),
    window = window,
    cap = cap,
    soft_extra = max(cap - burst, 0),
    precision = clamp(precision, 1, MAX_PRECISION),
  }
  p.capacity = mul(cap, window)
  -- Delay mode: the level may pass the capacity by what waits.
  p.max_level = p.capacity
  if max_delay then
    p.max_delay = min(max_delay, MAX_WINDOW)
    p.max_level = add(p.capacity, mul(p.max_delay, p.rate))
  end
  return p
end

local function report(p, remaining)
  return max(remaining - p.soft_extra, 0)
end

local function decision(allowed, p, remaining, reset, retry, denial, delay)
  return {
    allowed = allowed,
    limit = p.requests,
    remaining = report(p, remaining),
    reset = reset,
    retry = retry,
    denial = denial,
    delay = delay or 0,
  }
end

-- The meter shared by token bucket, leaky bucket and GCRA (scaled units:
-- a request weighs `window`, the bucket drains `rate` per microsecond).

-- level - elapsed * rate, saturating; the product is formed only when it
-- is below the level (a long idle time would otherwise need wide integers).
local function drain(p, level, elapsed)
  if cmp(level, 0) == 0 or cmp(elapsed, ceil_div(level, p.rate)) >= 0 then return 0 end
  return sub(level, mul(elapsed, p.rate))
end

local function judge(p, level, cost, commit)
  local cap = p.capacity
  local full = add(level, mul(cost, p.window))
  local allowed, retry, denial, delay = true, 0, 0, 0
  if cmp(full, cap) > 0 then
    -- Rounded up so that waiting exactly this long conforms.
    local wait = sat(ceil_div(sub(full, cap), p.rate))
    if p.max_delay == nil then
      allowed, denial, retry = false, 1, wait
    elseif wait <= p.max_delay then
      delay = wait
    else
      allowed, denial, retry = false, 3, wait
    end
  end
  local consumed = allowed and commit
  local after = level
  if consumed then after = full end
  local d = decision(allowed, p, sat(floor_div(sub(cap, after), p.window)),
    sat(ceil_div(after, p.rate)), retry, denial, delay)
  if consumed then return d, after end
  return d, nil
end

local function refundable(p, cost, admitted_at, at)
  local need = mul(cost, p.window)
  return sub(need, mul(max(at - admitted_at, 0), p.rate))
end

-- Every algorithm runs one skeleton: `read` the state at `now` (its view,
-- and whether a clock step back was repaired), `step` one decision on the
-- view (the decision, whether it consumed, and what to write), `write` the
-- new state when it consumed or repaired. A refund is `refund(p, st,
-- admitted_at, now, cost)`: the new state, or nil when nothing changes.

-- The meters (token bucket, leaky bucket, GCRA) view a state as a level
-- (scaled units) and step with `judge`; each gives `hold(p, st,
-- admitted_at, now)`, the stamp to write a refund at, the level then and
-- the instant the refund is measured at, and `store(p, t, level)`.
--
-- Debt (sluice-core's debt layout): a level beyond what a meter's own
-- state holds (`m.max_stored`) is {code, last, whole level, fraction in
-- 1/window, 'debt'}, read back as a level that drains from `last`.
local function debt_decode(p, st)
  if not st or st[1] ~= p.alg or st[5] ~= 'debt' then return nil end
  if st[4] >= p.window then return st[2], mul(st[3] + 1, p.window) end
  return st[2], add(mul(st[3], p.window), st[4])
end

local function meter(m)
  local function store(p, t, level)
    if cmp(level, m.max_stored(p)) > 0 then
      local whole, frac = divmod(level, p.window)
      return {p.alg, t, sat(whole), frac, 'debt'}
    end
    return m.store(p, t, level)
  end
  return {
    read = function(p, st, now)
      local last, level = debt_decode(p, st)
      if last == nil then return m.read(p, st, now) end
      if now < last then return level, true end
      return drain(p, level, now - last), false
    end,
    step = function(p, level, _, cost, commit)
      local d, after = judge(p, level, cost, commit)
      return d, after ~= nil, after or level
    end,
    write = function(p, _, now, level) return store(p, now, level) end,
    owe = function(p, level, cost) return add(level, mul(cost, p.window)) end,
    refund = function(p, st, admitted_at, now, cost)
      local stamp, level, at = debt_decode(p, st)
      if stamp ~= nil then
        at = max(now, admitted_at, stamp)
      else
        stamp, level, at = m.hold(p, st, admitted_at, now)
      end
      if stamp == nil then return nil end
      local back = refundable(p, cost, admitted_at, at)
      if cmp(back, 0) == 0 or cmp(level, 0) == 0 then return nil end
      return store(p, stamp, sub(level, back))
    end,
  }
end

-- The buckets: {code, last, whole units, fraction in 1/window}; `decode`
-- gives the last update and the level then.
local function bucket(decode, store, max_stored)
  return meter({
    max_stored = max_stored,
    read = function(p, st, now)
      local last, level = decode(p, st)
      if last == nil then return 0, false end
      if now < last then return level, true end
      return drain(p, level, now - last), false
    end,
    hold = function(p, st, admitted_at, now)
      local last, level = decode(p, st)
      if last == nil then return nil end
      return last, level, max(now, admitted_at, last)
    end,
    store = store,
  })
end

-- Token bucket: {TOKEN_BUCKET, last, whole tokens, fraction in 1/window};
-- its level is what is missing from a full bucket.
local TB = bucket(
  function(p, st)
    if not st or st[1] ~= TOKEN_BUCKET then return nil end
    local frac = min(st[4], p.window - 1)
    local tokens = wmin(add(mul(st[3], p.window), frac), p.capacity)
    return st[2], sub(p.capacity, tokens)
  end,
  function(p, last, level)
    local whole, frac = divmod(sub(p.capacity, level), p.window)
    return {TOKEN_BUCKET, last, sat(whole), frac}
  end,
  -- Tokens cannot go below zero: a level above the capacity is debt.
  function(p) return p.capacity end)

-- Leaky bucket: {LEAKY_BUCKET, last, whole level, fraction in 1/window}.
local LB = bucket(
  function(p, st)
    if not st or st[1] ~= LEAKY_BUCKET then return nil end
    local level
    if st[4] >= p.window then
      level = mul(st[3] + 1, p.window)
    else
      level = add(mul(st[3], p.window), st[4])
    end
    return st[2], wmin(level, p.max_level)
  end,
  function(p, last, level)
    local whole, frac = divmod(level, p.window)
    return {LEAKY_BUCKET, last, sat(whole), frac}
  end,
  function(p) return p.max_level end)

-- GCRA: {GCRA, TAT whole microseconds, fraction in 1/rate}. sluice-core keeps
-- the TAT scaled by the rate (`tat * rate`, past 2^53 for any real clock);
-- here it is taken relative to an instant `t`: `tat * rate - t * rate` =
-- `(whole - t) * rate + frac`, which is the same integer whenever it is
-- positive, and the TAT is never below `t` when the result is zero.

local function gcra_decode(p, st)
  if not st or st[1] ~= GCRA then return nil end
  if st[3] >= p.rate then return st[2] + 1, 0 end
  return st[2], st[3]
end

-- max(tat * rate - t * rate, 0)
local function gcra_ahead(p, whole, frac, t)
  if whole < t then return 0 end
  return add(mul(whole - t, p.rate), frac)
end

local GC = meter({
  max_stored = function(p) return p.max_level end,
  read = function(p, st, now)
    local whole, frac = gcra_decode(p, st)
    if whole == nil then return 0, false end
    local level = gcra_ahead(p, whole, frac, now)
    -- More ahead than any valid state can be: the clock stepped back.
    if cmp(level, p.max_level) > 0 then return p.max_level, true end
    return level, false
  end,
  hold = function(p, st, admitted_at, now)
    local whole, frac = gcra_decode(p, st)
    if whole == nil then return nil end
    local at = max(now, admitted_at)
    return at, gcra_ahead(p, whole, frac, at), at
  end,
  -- The state for a scaled TAT of `t * rate + ahead`.
  store = function(p, t, ahead)
    local q, r = divmod(ahead, p.rate)
    return {GCRA, sat(add(t, q)), r}
  end,
})

-- Fixed window: {FIXED_WINDOW, window start, count}.

local function window_of(p, now)
  local into = fmod(now, p.window)
  return now - into, p.window - into
end

local FW = {
  read = function(p, st, now)
    local start, left = window_of(p, now)
    local view = {start = start, left = left, count = 0}
    if st and st[1] == FIXED_WINDOW then
      if st[2] == start then
        view.count = st[3]
      elseif st[2] > start then
        view.count = st[3]
        return view, true
      end
    end
    return view, false
  end,
  step = function(p, v, _, cost, commit)
    local count, left = v.count, v.left
    local allowed = count + cost <= p.cap
    local consumed = allowed and commit
    local after = count
    if consumed then after = count + cost end
    local reset, retry, denial = 0, 0, 0
    if after > 0 then reset = left end
    if not allowed then retry, denial = left, 1 end
    return decision(allowed, p, max(p.cap - after, 0), reset, retry, denial), consumed, after
  end,
  write = function(_, v, _, after) return {FIXED_WINDOW, v.start, after} end,
  -- Debt: the count beyond the capacity, until the window ends.
  owe = function(_, v, cost) return v.count + cost end,
  refund = function(p, st, admitted_at, _, cost)
    if not st or st[1] ~= FIXED_WINDOW then return nil end
    local start = window_of(p, admitted_at)
    if st[2] ~= start or st[3] == 0 or cost == 0 then return nil end
    return {FIXED_WINDOW, st[2], max(st[3] - cost, 0)}
  end,
}

-- Sliding log: {SLIDING_LOG, shift, base, tick, tick, ...}, ticks of 2^shift
-- microseconds, sorted, rounded up.

local function shift_for(window)
  local bits, w = 0, window
  while w >= 1 do
    w = floor(w / 2)
    bits = bits + 1
  end
  return max(bits - 31, 0)
end

local function tick_of(t, shift)
  local q, r = divmod(t, POW2[shift])
  if r ~= 0 then return q + 1 end
  return q
end

local function partition(n, pred)
  local lo, hi = 0, n
  while lo < hi do
    local mid = lo + floor((hi - lo) / 2)
    if pred(mid) then lo = mid + 1 else hi = mid end
  end
  return lo
end

local function sl_log(p, st)
  if not st or st[1] ~= SLIDING_LOG or st[2] ~= shift_for(p.window) then return nil end
  return st
end

-- The i-th (0-based) tick; past the end, the base (as sluice-core reads it).
local function sl_raw(log, i)
  if not log then return 0 end
  local v = log[4 + i]
  if v == nil then return log[3] end
  return v
end

local function sl_encode(shift, ticks, last, extra)
  local base = last
  if ticks[1] ~= nil then base = min(ticks[1], last) end
  local out = {SLIDING_LOG, shift, base}
  for _, t in ipairs(ticks) do out[#out + 1] = t end
  for _ = 1, extra do out[#out + 1] = last end
  return out
end

local SL = {
  read = function(p, st, now)
    local shift = shift_for(p.window)
    local v = {shift = shift, unit = POW2[shift], now_tick = tick_of(now, shift), log = sl_log(p, st)}
    v.n, v.newest = 0, 0
    if v.log then v.n = #v.log - 3 end
    if v.log and v.n > 0 then v.newest = sl_raw(v.log, v.n - 1) end
    -- The clock stepped back behind the newest entry: every entry moves back.
    v.back = max(v.newest - v.now_tick, 0)
    v.tick = function(i) return max(sl_raw(v.log, i) - v.back, 0) end
    v.expiry = function(t) return t * v.unit + p.window end
    return v, v.back > 0
  end,
  step = function(p, v, now, cost, commit)
    local n, tick, expiry = v.n, v.tick, v.expiry
    local first = partition(n, function(i) return expiry(tick(i)) <= now end)
    local live = n - first
    local allowed = live + cost <= p.cap
    local consumed = allowed and commit
    local after, newest_after = live, max(v.newest - v.back, 0)
    if consumed then after, newest_after = live + cost, v.now_tick end
    local retry, denial = 0, 0
    if not allowed then
      denial = 1
      local drop = live + cost - p.cap
      local at = min(max(first + drop - 1, 0), max(n - 1, 0))
      retry = max(expiry(tick(at)) - now, 0)
    end
    local reset = 0
    if after > 0 then reset = max(expiry(newest_after) - now, 0) end
    local d = decision(allowed, p, max(p.cap - after, 0), reset, retry, denial)
    local extra = 0
    if consumed then extra = cost end
    return d, consumed, {first = first, last = newest_after, extra = extra}
  end,
  write = function(_, v, _, w)
    local ticks = {}
    for i = w.first, v.n - 1 do ticks[#ticks + 1] = v.tick(i) end
    return sl_encode(v.shift, ticks, w.last, w.extra)
  end,
  refund = function(p, st, admitted_at, _, cost)
    local log = sl_log(p, st)
    if not log then return nil end
    local at = tick_of(admitted_at, log[2])
    local n = #log - 3
    local stop = partition(n, function(i) return sl_raw(log, i) <= at end)
    local start = partition(stop, function(i) return sl_raw(log, i) < at end)
    local take = min(stop - start, cost)
    if take == 0 then return nil end
    local kept = {}
    for i = 0, n - 1 do
      if i < stop - take or i >= stop then kept[#kept + 1] = sl_raw(log, i) end
    end
    local last = kept[#kept] or at
    return sl_encode(log[2], kept, last, 0)
  end,
}

-- Sliding window: {SLIDING_WINDOW, precision, index, count oldest, ..., count newest}.

-- floor(now * P / window) and its remainder, without forming now * P
-- (past 2^53 for P > 5): now = a * window + b.
local function sw_position(p, now)
  local a, b = divmod(now, p.window)
  local q, r = divmod(mul(b, p.precision), p.window)
  return add(mul(a, p.precision), q), r
end

-- ceil((m * window + extra) / P) - now, saturating, without forming
-- m * window (about now * P): m = c * P + d.
local function sw_time(p, m, extra, now)
  local c, d = divmod(m, p.precision)
  local t = add(mul(c, p.window), ceil_div(add(mul(d, p.window), extra), p.precision))
  return sat(sub(t, now))
end

local function sw_decode(p, st)
  if not st or st[1] ~= SLIDING_WINDOW or st[2] ~= p.precision or #st ~= p.precision + 4 then
    return nil
  end
  local counts = {}
  for i = 4, #st do counts[#counts + 1] = st[i] end
  return st[3], counts
end

local function sw_encode(p, index, counts)
  local out = {SLIDING_WINDOW, p.precision, index}
  for _, c in ipairs(counts) do out[#out + 1] = c end
  return out
end

local function sw_retry(p, counts, index, into, cost, now)
  local cap = p.capacity
  local need = mul(cost, p.window)
  local w = p.window
  local len = #counts
  -- newer[k] = counts[k..] summed (1-based, newer[len + 1] = 0).
  local newer = {}
  newer[len + 1] = 0
  for i = len, 1, -1 do newer[i] = newer[i + 1] + counts[i] end
  for k = 0, len do
    local oldest = counts[k + 1] or 0
    local rest = mul(newer[k + 2] or 0, w)
    if cmp(add(need, rest), cap) <= 0 then
      local room = sub(sub(cap, need), rest)
      local earliest = nil
      if oldest == 0 then
        earliest = 0
      else
        local q = floor_div(room, oldest)
        if cmp(q, w) >= 0 then
          earliest = 0
        elseif q ~= 0 then
          earliest = w - q
        end
      end
      if earliest ~= nil then
        if k == 0 then earliest = max(earliest, into) end
        return sw_time(p, index + k, earliest, now)
      end
    end
  end
  return 0
end

local SW = {
  -- The view: the current sub-window's index, how far into it now is, and
  -- the counts moved to end at it.
  read = function(p, st, now)
    local index, into = sw_position(p, now)
    local v = {index = index, into = into}
    local slots = p.precision + 1
    local cindex, counts = sw_decode(p, st)
    if cindex ~= nil and cindex > index then
      v.counts = counts
      return v, true
    end
    local by = slots
    if cindex ~= nil then by = index - cindex end
    v.counts = {}
    for i = 1, slots do
      if by >= slots then v.counts[i] = 0 else v.counts[i] = counts[i + by] or 0 end
    end
    return v, false
  end,
  step = function(p, v, now, cost, commit)
    local index, into, counts = v.index, v.into, v.counts
    local slots = p.precision + 1
    local w = p.window
    local cap = p.capacity
    local need = mul(cost, w)
    local est = 0
    for i = 1, slots do
      local weight = w
      if i == 1 then weight = w - into end
      est = add(est, mul(counts[i], weight))
    end
    local allowed = cmp(add(est, need), cap) <= 0
    local consumed = allowed and commit
    if consumed then counts[slots] = counts[slots] + cost end
    local after = est
    if consumed then after = add(est, need) end
    local retry, denial = 0, 0
    if not allowed then
      denial = 1
      retry = sw_retry(p, counts, index, into, cost, now)
    end
    local reset = 0
    for i = slots, 1, -1 do
      if counts[i] > 0 then
        reset = sw_time(p, index + i, 0, now)
        break
      end
    end
    local d = decision(allowed, p, sat(floor_div(sub(cap, after), w)), reset, retry, denial)
    return d, consumed, counts
  end,
  write = function(p, v, _, counts) return sw_encode(p, v.index, counts) end,
  -- Debt: the current sub-window's counter beyond the capacity.
  owe = function(_, v, cost)
    local counts = v.counts
    counts[#counts] = counts[#counts] + cost
    return counts
  end,
  refund = function(p, st, admitted_at, _, cost)
    local cindex, counts = sw_decode(p, st)
    if cindex == nil then return nil end
    local at = sw_position(p, admitted_at)
    local back = cindex - at
    if back < 0 then return nil end
    local slot = #counts - back
    if slot < 1 or counts[slot] == 0 or cost == 0 then return nil end
    counts[slot] = max(counts[slot] - cost, 0)
    return sw_encode(p, cindex, counts)
  end,
}

-- One decision in the shared skeleton: read, step, write back when the
-- step consumed or the read repaired a clock step.
local function run(alg)
  return function(p, st, now, cost, commit)
    local view, repaired = alg.read(p, st, now)
    local d, consumed, next = alg.step(p, view, now, cost, commit)
    if consumed or repaired then return d, alg.write(p, view, now, next) end
    return d, nil
  end
end

-- Dispatch, as sluice-core's decide_in and refund_at.

-- Every algorithm by name. Each one sluice-core knows (CODE) must be here:
-- the first call fails otherwise, naming the algorithm.
local ALGORITHMS = {
  token_bucket = TB,
  leaky_bucket = LB,
  gcra = GC,
  fixed_window = FW,
  sliding_log = SL,
  sliding_window = SW,
}
for _, alg in pairs(ALGORITHMS) do alg.decide = run(alg) end


local BY_CODE = {}
for name, code in pairs(CODE) do
  BY_CODE[code] = ALGORITHMS[name] or error('decide.lua has no implementation of ' .. name)
end
for name in pairs(ALGORITHMS) do
  if not CODE[name] then error('decide.lua implements ' .. name .. ', unknown to sluice-core') end
end

local function decide_in(p, st, now, cost, commit)
  local decide = BY_CODE[p.alg].decide
  local probe = max(cost, 1)
  if probe > p.cap then
    local d, new = decide(p, st, now, 1, false)
    d.allowed, d.retry, d.denial, d.delay = false, 0, 2, 0
    return d, new
  end
  -- A weight of 0 asks whether one unit would pass, taking nothing.
  return decide(p, st, now, probe, commit and cost > 0)
end

-- `times` requests of weight `cost` at one instant decide as one request
-- of weight `times * cost` (sluice-core's decide_times): only the single
-- weight is held against the capacity, since delay mode may queue past it.
local function decide_times(p, st, now, cost, times, commit)
  if cost == 0 or times <= 1 then return decide_in(p, st, now, cost, commit) end
  local decide = BY_CODE[p.alg].decide
  if cost > p.cap then return decide_in(p, st, now, cost, commit) end
  return decide(p, st, now, cost * times, commit)
end

-- Whether a limit admits `times` requests of weight `cost` at once. A total
-- past 2^53 is past anything a limit admits (at most its capacity plus a
-- window's worth queued, below 2^45 requests) and inexact here: refused.
local function admits(p, st, now, cost, times)
  if cost ~= 0 and cost * times >= SAFE then return false end
  local d = decide_times(p, st, now, cost, times, false)
  return d.allowed
end

-- Priority (sluice-core's decide_reserving, and decide_batch for
-- `times`): the requests pass while `reserve` more units still fit after
-- them, at once.
local function admits_reserving(p, st, now, cost, times, reserve)
  local total = cost * times + reserve
  if total >= SAFE then return false end
  local d = decide_in(p, st, now, total, false)
  return d.allowed and d.delay == 0
end

-- A refused request's decision under a limit with a reserve: refused
-- with the wait until cost + reserve fits, or, when it would pass, what
-- remains without it.
local function refused_reserving(p, st, now, cost, reserve)
  local d, new = decide_in(p, st, now, cost + reserve, false)
  if d.allowed and d.delay == 0 then return decide_in(p, st, now, cost, false) end
  d.allowed, d.delay = false, 0
  if (d.denial or 0) == 0 then d.denial = 1 end
  return d, new
end

local function refund_at(p, st, admitted_at, now, cost)
  if cost == 0 then return nil end
  return BY_CODE[p.alg].refund(p, st, admitted_at, now, cost)
end

-- Concurrency limits, as sluice-core's `permits`: a key's live holders
-- (expiry after now, count above 0), whose permits add up to `used`.

local function holders_read(key, now)
  local flat = redis.call('HGETALL', key)
  local hs = {n = 0, used = 0, list = {}, dropped = false}
  for j = 1, #flat, 2 do
    local count, expires = string.match(flat[j + 1], '^(%d+):(%d+)$')
    count, expires = tonumber(count), tonumber(expires)
    if count and expires and expires > now and count > 0 then
      hs.list[flat[j]] = {count = count, expires = expires}
      hs.n = hs.n + 1
      hs.used = hs.used + count
    else
      hs.dropped = true
    end
  end
  return hs
end

-- Rewrites the hash with the live holders, expiring with the last of them
-- (test clocks are not the server's: then without expiry).
local function holders_write(key, hs, now, overridden)
  redis.call('DEL', key)
  local args, last = {}, 0
  for holder, e in pairs(hs.list) do
    args[#args + 1] = holder
    args[#args + 1] = string.format('%.0f:%.0f', e.count, e.expires)
    last = max(last, e.expires)
  end
  if #args == 0 then return end
  redis.call('HSET', key, unpack(args))
  if not overridden then
    redis.call('PEXPIRE', key, max(ceil_div(last - now, 1000), 1))
  end
end

-- permits::acquire: takes `cost` permits for the item's holder when they
-- fit (cost 0 asks whether one more unit fits, taking nothing).
local function acquire(pp, hs, now, cost, commit)
  local cap = max(pp.max, 1)
  local probe = max(cost, 1)
  local mine = hs.list[pp.holder]
  local room = mine ~= nil or hs.n < PERMITS.max_holders
  if probe > cap or not room or hs.used + probe > cap then
    local denial, wait = 1, PERMITS.retry_us
    if probe > cap then denial, wait = 2, 0 end
    return {allowed = false, limit = cap, remaining = max(cap - hs.used, 0), reset = wait,
      retry = wait, denial = denial, delay = 0}, false
  end
  local after = hs.used + cost
  local d = {allowed = true, limit = cap, remaining = cap - after, reset = 0, retry = 0,
    denial = 0, delay = 0}
  if cost == 0 or not commit then
    d.remaining = cap - hs.used
    return d, false
  end
  local expires = now + pp.ttl
  if mine then
    mine.count = mine.count + cost
    mine.expires = expires
  else
    hs.list[pp.holder] = {count = cost, expires = expires}
    hs.n = hs.n + 1
  end
  hs.used = after
  return d, true
end

-- What a check that takes nothing reports: refused as acquire refuses, or,
-- when the permits would fit, the free units without taking them.
local function acquire_report(pp, hs, now, cost)
  local d = acquire(pp, hs, now, cost, false)
  if d.allowed then d = acquire(pp, hs, now, 0, false) end
  return d
end

-- permits::release: no more than the holder holds.
local function release(hs, holder, cost)
  local mine = hs.list[holder]
  if not mine or cost <= 0 then return false end
  local back = min(cost, mine.count)
  mine.count = mine.count - back
  hs.used = hs.used - back
  if mine.count == 0 then
    hs.list[holder] = nil
    hs.n = hs.n - 1
  end
  return true
end

-- permits::renew: never earlier than before.
local function renew(hs, holder, now, ttl)
  local mine = hs.list[holder]
  if not mine then return false end
  mine.expires = max(mine.expires, now + ttl)
  return true
end

local function clock(override)
  if override ~= '' then return tonumber(override) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Permits mode: one holder's releases, then renewals, key by key.
local function permits_op(KEYS, ARGV)
  local now, holder, ttl = clock(ARGV[2]), ARGV[3], tonumber(ARGV[4])
  local reply = {now}
  for i = 1, #KEYS do
    local back, again = tonumber(ARGV[3 + 2 * i]) or 0, ARGV[4 + 2 * i] == '1'
    local hs = holders_read(KEYS[i], now)
    local released = back > 0 and release(hs, holder, back)
    local renewed = again and renew(hs, holder, now, ttl)
    if released or renewed or hs.dropped then holders_write(KEYS[i], hs, now, ARGV[2] ~= '') end
    reply[#reply + 1] = released and 1 or 0
    reply[#reply + 1] = renewed and 1 or 0
  end
  return reply
end

-- Main: decides or refunds one call.

local function reply_of(allowed, now, admitted, decisions, delays)
  local reply = {0, now, admitted, #delays}
  if allowed then reply[1] = 1 end
  for _, d in ipairs(decisions) do
    local a = 0
    if d.allowed then a = 1 end
    reply[#reply + 1] = a
    reply[#reply + 1] = d.limit
    reply[#reply + 1] = d.remaining
    reply[#reply + 1] = d.reset
    reply[#reply + 1] = d.retry
    reply[#reply + 1] = d.denial
    reply[#reply + 1] = d.delay
    reply[#reply + 1] = d.leased or 0
  end
  for _, delay in ipairs(delays) do reply[#reply + 1] = delay end
  return reply
end

-- The call's arguments (see the top of the file) and each key's state.
local function parse(KEYS, ARGV)
  local call = {mode = ARGV[1], overridden = ARGV[2] ~= '', requests = tonumber(ARGV[4]) or 1,
    admitted_at = tonumber(ARGV[3]), limits = {}, costs = {}, states = {}, leases = {},
    returned = {}, returned_age = {}, reserves = {}, permits = {}, blocks = {}, blocked = {}}
  call.now = clock(ARGV[2])
  for i = 1, #KEYS do
    local a = 4 + (i - 1) * 13
    if tonumber(ARGV[a + 1]) == PERMITS.code then
      call.permits[i] = {max = tonumber(ARGV[a + 2]), ttl = tonumber(ARGV[a + 3]),
        holder = ARGV[a + 4]}
      call.states[i] = holders_read(KEYS[i], call.now)
    end
    call.costs[i] = tonumber(ARGV[a + 7])
    call.leases[i] = tonumber(ARGV[a + 9]) or 0
    call.returned[i] = tonumber(ARGV[a + 10]) or 0
    call.returned_age[i] = tonumber(ARGV[a + 11]) or 0
    call.reserves[i] = tonumber(ARGV[a + 12]) or 0
    call.blocks[i] = tonumber(ARGV[a + 13]) or 0
    if call.blocks[i] > 0 and call.mode == 'check' then
      local ends = tonumber(redis.call('GET', KEYS[i] .. ':block'))
      if ends and ends > call.now then
        call.blocked[i] = ends - call.now
        call.any_blocked = true
      end
    end
    if not call.permits[i] then call.limits[i] = params(tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]),
      tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6]), tonumber(ARGV[a + 8]))
    end
    local raw = call.limits[i] and redis.call('GET', KEYS[i])
    if raw then
      local ok, st = pcall(cmsgpack.unpack, raw)
      -- Bytes that do not decode are no state, as in sluice-core.
      if ok and type(st) == 'table' then call.states[i] = st end
    end
  end
  return call
end

-- Refund mode: give the cost back, then report each limit as a denied
-- check reports its admitting limits: decided again without consuming.
local function refund(KEYS, c)
  local decisions = {}
  for i = 1, #KEYS do
    local pp = c.permits[i]
    if pp then
      if release(c.states[i], pp.holder, c.costs[i] * c.requests) then
        holders_write(KEYS[i], c.states[i], c.now, c.overridden)
      end
      decisions[i] = acquire_report(pp, c.states[i], c.now, c.costs[i])
    elseif c.states[i] then
      local new = refund_at(c.limits[i], c.states[i], c.admitted_at, c.now,
        c.costs[i] * c.requests + c.leases[i])
      if new then
        redis.call('SET', KEYS[i], cmsgpack.pack(new), 'KEEPTTL')
        c.states[i] = new
      end
    end
    if not pp then
      decisions[i] = decide_in(c.limits[i], c.states[i], c.now, c.costs[i], false)
    end
  end
  return reply_of(true, c.now, 0, decisions, {})
end

-- Returns first, as sluice-core's decide_all_leased: written whether or
-- not the check is then admitted (returning is not consuming). Returns
-- which keys were given units back.
local function take_returns(n, c)
  local given = {}
  for i = 1, n do
    if c.returned[i] > 0 and c.states[i] then
      local at = max(c.now - c.returned_age[i], 0)
      local new = refund_at(c.limits[i], c.states[i], at, c.now, c.returned[i])
      if new then
        c.states[i] = new
        given[i] = true
      end
    end
  end
  return given
end

-- The requests are decided in arrival order, as sluice-core's
-- decide_batch: at one instant a limit that refuses a request refuses
-- every later one, so each limit's share is a binary search.
local function admitted_of(n, c)
  local admitted = c.requests
  for i = 1, n do
    local lo, hi = 0, admitted
    while lo < hi do
      local mid = lo + floor((hi - lo + 1) / 2)
      local ok
      if c.permits[i] then
        ok = acquire(c.permits[i], c.states[i], c.now, c.costs[i] * mid, false).allowed
      elseif c.reserves[i] > 0 and c.costs[i] > 0 then
        ok = admits_reserving(c.limits[i], c.states[i], c.now, c.costs[i], mid, c.reserves[i])
      else
        ok = admits(c.limits[i], c.states[i], c.now, c.costs[i], mid)
      end
      if ok then lo = mid else hi = mid - 1 end
    end
    admitted = lo
  end
  return admitted
end

-- Leases (one request, admitted): the largest k whose cost + k fits now,
-- without a wait, found by binary search; then one decision of cost + k.
local function lease(n, c, decisions, news)
  for i = 1, n do
    if c.leases[i] > 0 then
      local lo, hi = 0, c.leases[i]
      while lo < hi do
        local mid = lo + floor((hi - lo + 1) / 2)
        local d = decide_in(c.limits[i], c.states[i], c.now, c.costs[i] + mid, false)
        if d.allowed and d.delay == 0 then lo = mid else hi = mid - 1 end
      end
      if lo > 0 then
        decisions[i], news[i] = decide_in(c.limits[i], c.states[i], c.now, c.costs[i] + lo, true)
        decisions[i].leased = lo
      end
    end
  end
end

-- Delay mode: each admitted request's wait, the longest of its limits';
-- none when no request waits.
local function delays_of(n, c, admitted)
  local delays, waits = {}, false
  for i = 1, n do
    if c.limits[i] and c.limits[i].max_delay then
      for r = 1, admitted do
        local d = decide_times(c.limits[i], c.states[i], c.now, c.costs[i], r, false)
        delays[r] = max(delays[r] or 0, d.delay)
        if d.delay > 0 then waits = true end
      end
    end
  end
  if not waits then return {} end
  return delays
end

-- Writes the new states, each expiring when it is back to full (which
-- reads as no state); a state given units back is written even when
-- nothing else changed.
local function write_back(KEYS, c, decisions, news, given)
  for i = 1, #KEYS do
    if given[i] and not news[i] then news[i] = c.states[i] end
    if c.permits[i] then
      if news[i] or c.states[i].dropped then
        holders_write(KEYS[i], c.states[i], c.now, c.overridden)
      end
    elseif news[i] then
      local packed = cmsgpack.pack(news[i])
      if c.overridden then
        -- Test clocks are not the server's: keep the state without expiry.
        redis.call('SET', KEYS[i], packed)
      else
        local ttl = max(floor_div(decisions[i].reset + 999, 1000), 1)
        redis.call('SET', KEYS[i], packed, 'PX', ttl)
      end
    end
  end
end

-- sluice-core's charge: `cost` consumed whatever the state holds; nil for
-- an algorithm without debt (no `owe`).
local function charge(p, st, now, cost)
  local alg = BY_CODE[p.alg]
  if alg.owe == nil or cost == 0 then return nil end
  local view = alg.read(p, st, now)
  return alg.write(p, view, now, alg.owe(p, view, cost))
end

-- Adjust mode: each key charged or refunded on its own, then decided as a
-- query (sluice-core's `adjust`), its state written back with its reset.
local function adjust(KEYS, c)
  local decisions, news = {}, {}
  for i = 1, #KEYS do
    local p, st = c.limits[i], c.states[i]
    local new = nil
    if c.costs[i] > 0 then
      new = charge(p, st, c.now, c.costs[i])
    elseif c.returned[i] > 0 and st then
      new = refund_at(p, st, max(c.now - c.returned_age[i], 0), c.now, c.returned[i])
    end
    local d, rebased = decide_in(p, new or st, c.now, 0, false)
    decisions[i], news[i] = d, new or rebased
  end
  write_back(KEYS, c, decisions, news, {})
  return reply_of(true, c.now, 0, decisions, {})
end

-- Penalty boxes: the blocked limits report their block; when none is
-- blocked, each blocking limit that refused over its limit starts its block
-- (a check of weight 0 reads: it starts none).
local function boxes(KEYS, c, decisions, admitted)
  for i = 1, #KEYS do
    local d, block = decisions[i], c.blocks[i]
    if c.blocked[i] then
      decisions[i] = {allowed = false, limit = c.limits[i].requests, remaining = 0,
        reset = c.blocked[i], retry = c.blocked[i], denial = 4, delay = 0}
    elseif not c.any_blocked and admitted < c.requests and block > 0 and d.denial == 1
        and c.costs[i] > 0 then
      local ends = c.now + block
      if c.overridden then
        redis.call('SET', KEYS[i] .. ':block', ends)
      else
        redis.call('SET', KEYS[i] .. ':block', ends, 'PX', max(floor_div(block + 999, 1000), 1))
      end
      d.denial, d.remaining, d.retry, d.reset = 5, 0, block, max(d.reset, block)
    end
  end
end

local function main(KEYS, ARGV)
  if ARGV[1] == 'permits' then return permits_op(KEYS, ARGV) end
  local c = parse(KEYS, ARGV)
  if c.mode == 'refund' then return refund(KEYS, c) end
  if c.mode == 'adjust' then return adjust(KEYS, c) end
  local n, now = #KEYS, c.now
  local given = take_returns(n, c)
  local admitted = 0
  if not c.any_blocked then admitted = admitted_of(n, c) end
  local decisions, news = {}, {}
  if admitted > 0 then
    for i = 1, n do
      if c.permits[i] then
        decisions[i], news[i] = acquire(c.permits[i], c.states[i], now, c.costs[i] * admitted, true)
      else
        decisions[i], news[i] = decide_times(c.limits[i], c.states[i], now, c.costs[i], admitted,
          c.costs[i] ~= 0)
      end
    end
  end
  if admitted < c.requests then
    -- The first refused request, after the admitted ones: a denied request
    -- consumes nothing, so the limits that would admit it are decided
    -- without consuming.
    for i = 1, n do
      local st = news[i] or c.states[i]
      if c.permits[i] then
        decisions[i] = acquire_report(c.permits[i], c.states[i], now, c.costs[i])
      else
        local d, new
        if c.reserves[i] > 0 and c.costs[i] > 0 then
          d, new = refused_reserving(c.limits[i], st, now, c.costs[i], c.reserves[i])
        else
          d, new = decide_in(c.limits[i], st, now, c.costs[i], false)
        end
        decisions[i] = d
        if new then news[i] = new end
      end
    end
  elseif c.requests == 1 then
    lease(n, c, decisions, news)
  end
  boxes(KEYS, c, decisions, admitted)
  local delays = delays_of(n, c, admitted)
  write_back(KEYS, c, decisions, news, given)
  return reply_of(admitted == c.requests, now, admitted, decisions, delays)
end

return main
