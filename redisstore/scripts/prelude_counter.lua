-- The sliding counter's helpers, prepended after prelude.lua.

-- counter_read returns a sliding counter key's "w count" state, or nil, 0.
local function counter_read(key)
  local s = redis.call('GET', key)
  if not s then
    return nil, 0
  end
  local w, c = string.match(s, '^(%d+) (%d+)$')
  if not w then
    error('floodgate: malformed sliding counter state in ' .. key)
  end
  return tonumber(w), tonumber(c)
end

-- counter_windows reads a sliding counter (KEYS[1] the current fixed
-- window, KEYS[2] the one before) at now and returns the window index, now
-- (held back if the clock went back past the window last counted in, so
-- its events are not forgotten), the window's start, and the previous and
-- current counts.
local function counter_windows(now, period)
  local w = floordiv(now, period)
  local w1, c1 = counter_read(KEYS[1])
  if w1 and w1 > w then
    w = w1
    now = w * period
  end
  local prev, cur = 0, 0
  if w1 == w then
    cur = c1
    local w0, c0 = counter_read(KEYS[2])
    if w0 == w - 1 then
      prev = c0
    end
  elseif w1 == w - 1 then
    prev = c1
  end
  return w, now, w * period, prev, cur
end
