-- The intervally refilled token bucket's helpers, prepended after
-- prelude.lua.

local function ceildiv(a, b)
  return floordiv(a + b - 1, b)
end

-- interval_at reads the bucket s (KEYS[1]'s state, from rate_get) at now
-- and returns the start of its current period and the tokens used in it:
-- every whole period since the stored start gave limit tokens back. A
-- full bucket starts its period now.
local function interval_at(s, now, limit, period)
  local start, used = now, 0
  if s then
    local a, b = string.match(s, '^(%d+) (%d+)')
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

-- interval_save writes the bucket back, its numbers followed by suffix
-- (prelude_rate.lua), to vanish when it is full again, or deletes it if
-- it is full now.
local function interval_save(start, used, now, limit, period, floor, suffix)
  if used == 0 then
    rate_clear(suffix, floor)
    return
  end
  local full = start + ceildiv(used, limit) * period
  redis.call('SET', KEYS[1], string.format('%d %d', start, used) .. suffix, 'PX', expiry_ms(full - now, floor))
end
