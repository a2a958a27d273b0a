-- The leased sliding counter's helpers, prepended after prelude.lua.
--
-- The counter KEYS[1] is the plain one, "w prev cur", followed while
-- units are leased in window w by " leased": the units leased in w beyond
-- the decisions that took them, which refunds leave counted, since an
-- instance may still allow them. One key, so that it is evicted and moved
-- between Cluster nodes as a whole. The plain decision
-- (slidingcounter.lua), which a leasing instance sends when it leases
-- nothing, keeps them when it writes in their window (counter_save in
-- prelude_counter.lua): dropped, a refund could take leased units that
-- their tail then gives back again.

-- lease_counter_read reads the counter s (its numbers, from rate_get in
-- prelude_rate.lua) at now, as counter_windows in
-- prelude_counter.lua does, and returns the window index, now, the
-- window's start, the previous and current counts, and the units leased
-- in the current window.
local function lease_counter_read(s, now, period)
  local w = floordiv(now, period)
  local prev, cur, leased = 0, 0, 0
  if s then
    local sw, sp, sc, sl = string.match(s, '^(%d+) (%d+) (%d+) ?(%d*)$')
    if not sw then
      error('floodgate: malformed sliding counter state in ' .. KEYS[1])
    end
    sw, sp, sc, sl = tonumber(sw), tonumber(sp), tonumber(sc), tonumber(sl) or 0
    if sw > w then
      w = sw
      now = w * period
    end
    if sw == w then
      prev, cur, leased = sp, sc, sl
    elseif sw == w - 1 then
      prev = sc
    end
  end
  return w, now, w * period, prev, cur, leased
end

-- lease_counter_save writes the counts back, as counter_save does, with
-- the leased units while there are any, then suffix (prelude_rate.lua).
local function lease_counter_save(w, now, start, period, prev, cur, leased, floor, suffix)
  local ttl
  if cur > 0 then
    ttl = start + 2 * period - now
  elseif prev > 0 then
    ttl = start + period - now
  else
    redis.call('DEL', KEYS[1])
    return
  end
  local s = string.format('%d %d %d', w, prev, cur)
  if leased > 0 then
    s = s .. string.format(' %d', leased)
  end
  redis.call('SET', KEYS[1], s .. suffix, 'PX', expiry_ms(ttl, floor))
end

local B = 33554432 -- 2^25
-- mul returns a*b as (hi, lo) in base 2^25, for a < 2^25 and b < 2^50.
local function mul(a, b)
  local bl = b % B
  local p2 = a * bl
  local lo = p2 % B
  return a * ((b - bl) / B) + (p2 - lo) / B, lo
end

-- share returns ceil(prev*rest/period), the previous window's events still
-- weighing on the estimate: an estimate in doubles, corrected with exact
-- products (prev < 2^25 and rest <= period < 2^50).
local function share(prev, rest, period)
  if prev == 0 or rest == 0 then
    return 0
  end
  local ah, al = mul(prev, rest)
  local c = math.min(prev, math.ceil(prev * rest / period))
  -- the smallest c with c*period >= prev*rest
  while c < prev do
    local bh, bl = mul(c, period)
    if bh > ah or (bh == ah and bl >= al) then
      break
    end
    c = c + 1
  end
  while c > 0 do
    local bh, bl = mul(c - 1, period)
    if bh < ah or (bh == ah and bl < al) then
      break
    end
    c = c - 1
  end
  return c
end
