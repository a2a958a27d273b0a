-- The leased token bucket's helpers, prepended after prelude.lua.
--
-- A time is a pair (q, r): q + r/limit microseconds, 0 <= r < limit, as
-- the plain bucket stores its theoretical arrival time. Products j*T of a
-- unit count j <= burst and the emission interval T = period/limit stay
-- below burst*T = tau < 2^50 us, and j*r below 2^48, so every number here
-- is an integer that Lua's doubles hold exactly.
--
-- The bucket KEYS[1] is the plain one, "tat frac", followed while a lease
-- may still allow units by its mark, " markq markr": the end of the
-- latest lease's slots, which refunds must not move the bucket below.
-- Leases are stacked on the timeline, so every earlier lease ends before
-- the latest one. One key, so that it is evicted and moved between
-- Cluster nodes as a whole; the plain decision (tokenbucket.lua), which a
-- leasing instance sends when it leases nothing, keeps the mark. The
-- rate's version follows (prelude_rate.lua).

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

-- tb_read returns the arrival time and the lease mark (nil when there is
-- none) of s, the bucket's numbers (rate_get in prelude_rate.lua), or
-- nil when the key does not exist.
local function tb_read(s)
  if not s then
    return nil
  end
  local a, b = string.match(s, '^(%d+) (%d+)$')
  if a then
    return tonumber(a), tonumber(b)
  end
  local c, d
  a, b, c, d = string.match(s, '^(%d+) (%d+) (%d+) (%d+)$')
  if not a then
    error('floodgate: malformed token bucket state in ' .. KEYS[1])
  end
  return tonumber(a), tonumber(b), tonumber(c), tonumber(d)
end

-- live_mark returns the mark (wq, wr) while the latest lease's last unit
-- may still be allowed, until the start of its slot, T before the mark;
-- nil after.
local function live_mark(wq, wr, now, tq, tr, limit)
  if not wq then
    return nil
  end
  local lq, lr = p_sub(wq, wr, tq, tr, limit)
  if p_le(now, 0, lq, lr) then
    return wq, wr
  end
  return nil
end

-- tb_write stores the bucket, with the mark while the latest lease's last
-- unit may still be allowed (until the start of its slot, T before the
-- mark), and then suffix, the rate's (prelude_rate.lua), to vanish when
-- the arrival time has passed: the bucket is full then. A bucket at or
-- before now is deleted.
local function tb_write(q, r, wq, wr, now, tq, tr, limit, floor, suffix)
  if p_le(q, r, now, 0) then
    redis.call('DEL', KEYS[1])
    return
  end
  local ttl = q - now
  if r > 0 then
    ttl = ttl + 1
  end
  local s = string.format('%d %d', q, r)
  wq, wr = live_mark(wq, wr, now, tq, tr, limit)
  if wq then
    s = s .. string.format(' %d %d', wq, wr)
  end
  redis.call('SET', KEYS[1], s .. suffix, 'PX', expiry_ms(ttl, floor))
end
