-- The in-flight scripts' helpers, prepended after prelude.lua.
--
-- KEYS[1] holds a key's slots as a sorted set: one member per call that
-- took slots, "<call> <n>", scored by the expiry of its lease in
-- microseconds (always above 0), and "#", scored by minus the units the
-- calls hold (0 or below: never a lease). Each call's lease is its own:
-- an instance renews the calls it knows it holds, so a slot taken by a
-- decision its instance gave up on is never renewed, and comes back when
-- its lease runs out if no release found it first.

-- inflight_held returns the units the calls hold, expired ones included.
local function inflight_held()
  local s = redis.call('ZSCORE', KEYS[1], '#')
  if not s then
    return 0
  end
  return -tonumber(s)
end

-- inflight_units returns the units of a call's member.
local function inflight_units(m)
  local n = string.match(m, ' (%d+)$')
  if not n then
    error('floodgate: malformed in-flight state in ' .. KEYS[1])
  end
  return tonumber(n)
end

-- inflight_save records held.
local function inflight_save(held)
  if held > 0 then
    redis.call('ZADD', KEYS[1], -held, '#')
  else
    redis.call('ZREM', KEYS[1], '#')
  end
end

-- inflight_expire forgets the calls whose lease ran out by now, at most
-- 100 a run (more are left to the next runs, counted meanwhile: the safe
-- side), and returns the units held after.
local function inflight_expire(now)
  local held = inflight_held()
  local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '(0', now, 'LIMIT', 0, 100)
  if #gone == 0 then
    return held
  end
  for i = 1, #gone do
    held = held - inflight_units(gone[i])
  end
  redis.call('ZREM', KEYS[1], unpack(gone))
  held = math.max(held, 0)
  inflight_save(held)
  return held
end

-- inflight_keep makes the key outlive a lease written now, and vanish
-- with the last one.
local function inflight_keep(lease, floor)
  local ms = expiry_ms(lease, floor)
  if redis.call('PTTL', KEYS[1]) < ms then
    redis.call('PEXPIRE', KEYS[1], ms)
  end
end
