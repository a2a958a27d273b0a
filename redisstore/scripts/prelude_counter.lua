-- The sliding counter's helpers, prepended after prelude.lua.
--
-- A client's counter is one string, KEYS[1], "w prev cur": the counts of
-- the fixed windows w - 1 and w. One key, so that it is evicted, migrated
-- between Cluster nodes and expired as a whole.

-- counter_windows reads the counter s (KEYS[1]'s state, from rate_get)
-- at now and returns the window index,
-- now (held back if the clock went back past the window last counted in,
-- so its events are not forgotten), the window's start, the previous
-- and current counts, and the units a leasing limiter leased in the
-- current window (lease_prelude_counter.lua), 0 for none.
local function counter_windows(s, now, period)
  local w = floordiv(now, period)
  local prev, cur, leased = 0, 0, 0
  if s then
    local sw, sp, sc, sl = string.match(s, '^(%d+) (%d+) (%d+) ?(%d*)')
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

-- counter_save writes the counts back, followed by suffix
-- (prelude_rate.lua), to vanish when they stop weighing
-- on the estimate: the current window's at the end of the next window, the
-- previous one's at the end of this one. leased, when given, is the units
-- leased in window w that the counts still hold: a decision that leases
-- nothing keeps them, since a refund must never uncount them (their
-- unused tail goes back on its own, and would be taken twice).
local function counter_save(w, now, start, period, prev, cur, floor, suffix, leased)
  local ttl
  if cur > 0 then
    ttl = start + 2 * period - now
  elseif prev > 0 then
    ttl = start + period - now
  else
    redis.call('DEL', KEYS[1])
    return
  end
  local state = string.format('%d %d %d', w, prev, cur)
  if leased and leased > 0 then
    state = state .. string.format(' %d', math.min(leased, cur))
  end
  redis.call('SET', KEYS[1], state .. suffix, 'PX', expiry_ms(ttl, floor))
end
