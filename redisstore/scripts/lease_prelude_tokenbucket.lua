-- The leased token bucket's helpers, prepended after prelude.lua.
--
-- A time is a pair (q, r): q + r/limit microseconds, 0 <= r < limit, as
-- the plain bucket stores its theoretical arrival time. Products j*T of a
-- unit count j <= burst and the emission interval T = period/limit stay
-- below burst*T = tau < 2^50 us, and j*r below 2^48, so every number here
-- is an integer that Lua's doubles hold exactly.

-- tb_read returns the pair stored at key, or nil.
local function tb_read(key)
  local s = redis.call('GET', key)
  if not s then
    return nil
  end
  local a, b = string.match(s, '^(%d+) (%d+)$')
  if not a then
    error('floodgate: malformed token bucket state in ' .. key)
  end
  return tonumber(a), tonumber(b)
end

local function p_add(aq, ar, bq, br, limit)
  local q, r = aq + bq, ar + br
  if r >= limit then
    q, r = q + 1, r - limit
  end
  return q, r
end

local function p_sub(aq, ar, bq, br, limit)
  local q, r = aq - bq, ar - br
  if r < 0 then
    q, r = q - 1, r + limit
  end
  return q, r
end

-- p_le reports whether (aq, ar) <= (bq, br).
local function p_le(aq, ar, bq, br)
  return aq < bq or (aq == bq and ar <= br)
end

-- p_mul returns j*(tq + tr/limit) as a pair.
local function p_mul(j, tq, tr, limit)
  local x = j * tr
  local c = x % limit
  return j * tq + (x - c) / limit, c
end

-- tb_write stores the pair at key, to vanish when it is in the past: a
-- bucket whose arrival time has passed is full, a lease mark whose end has
-- passed guards nothing. A pair at or before now is deleted.
local function tb_write(key, q, r, now, floor)
  if p_le(q, r, now, 0) then
    redis.call('DEL', key)
    return
  end
  local ttl = q - now
  if r > 0 then
    ttl = ttl + 1
  end
  redis.call('SET', key, string.format('%d %d', q, r), 'PX', expiry_ms(ttl, floor))
end
