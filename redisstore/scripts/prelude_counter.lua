-- The sliding counter's helpers, prepended after prelude.lua.
--
-- A client's counter is one string, KEYS[1], "w prev cur": the counts of
-- the fixed windows w - 1 and w. One key, so that it is evicted, migrated
-- between Cluster nodes and expired as a whole.

-- counter_windows reads the counter s (KEYS[1]'s state, from rate_get)
-- at now and returns the window index,
-- now (held back if the clock went back past the window last counted in,
-- so its events are not forgotten), the window's start, and the previous
-- and current counts.
local function counter_windows(s, now, period)
  local w = floordiv(now, period)
  local prev, cur = 0, 0
  if s then
    -- A leasing limiter may have appended the units it leased in window
    -- sw (see lease_prelude_counter.lua); this script keeps the counts.
    local sw, sp, sc = string.match(s, '^(%d+) (%d+) (%d+)')
    sw, sp, sc = tonumber(sw), tonumber(sp), tonumber(sc)
    if sw > w then
      w = sw
      now = w * period
    end
    if sw == w then
      prev, cur = sp, sc
    elseif sw == w - 1 then
      prev = sc
    end
  end
  return w, now, w * period, prev, cur
end

-- counter_save writes the counts back, followed by suffix
-- (prelude_rate.lua), to vanish when they stop weighing
-- on the estimate: the current window's at the end of the next window, the
-- previous one's at the end of this one.
local function counter_save(w, now, start, period, prev, cur, floor, suffix)
  local ttl
  if cur > 0 then
    ttl = start + 2 * period - now
  elseif prev > 0 then
    ttl = start + period - now
  else
    redis.call('DEL', KEYS[1])
    return
  end
  redis.call('SET', KEYS[1], string.format('%d %d %d', w, prev, cur) .. suffix, 'PX', expiry_ms(ttl, floor))
end
