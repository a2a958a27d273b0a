-- The intervally refilled token bucket's helpers, prepended after
-- prelude.lua.

local function ceildiv(a, b)
  return floordiv(a + b - 1, b)
end

-- interval_at reads the bucket KEYS[1] at now and returns the start of its
-- current period and the tokens used in it: every whole period since the
-- stored start gave limit tokens back. A full bucket starts its period
-- now.
local function interval_at(now, limit, period)
  local start, used = now, 0
  local s = redis.call('GET', KEYS[1])
  if s then
    local a, b = string.match(s, '^(%d+) (%d+)$')
    if not a then
      error('floodgate: malformed token bucket state in ' .. KEYS[1])
    end
    start, used = tonumber(a), tonumber(b)
  end
  if used > 0 and now - start >= period then
    local k = floordiv(now - start, period)
    if k >= ceildiv(used, limit) then
      used = 0
    else
      used = used - k * limit
      start = start + k * period
    end
  end
  if used == 0 then
    start = now
  end
  return start, used
end

-- interval_save writes the bucket back, to vanish when it is full again,
-- or deletes it if it is full now.
local function interval_save(start, used, now, limit, period, floor)
  if used == 0 then
    redis.call('DEL', KEYS[1])
    return
  end
  local full = start + ceildiv(used, limit) * period
  redis.call('SET', KEYS[1], string.format('%d %d', start, used), 'PX', expiry_ms(full - now, floor))
end
