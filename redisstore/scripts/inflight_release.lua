-- Gives back n slots of the caller's holder, and renews the lease of the
-- slots it still holds (n = 0 renews only). A holder whose lease ran out
-- has nothing left to give back.
--
-- KEYS[1]  the key's holders, as in inflight.lua
-- ARGV[1]  now in microseconds, or "" to read the server's TIME
-- ARGV[2]  the holder
-- ARGV[3]  n
-- ARGV[4]  the lease in microseconds
-- ARGV[5]  the shortest expiry in milliseconds (see WithClock)
--
-- Reply: {held}: the slots the holder still holds.

local now = clock_us(ARGV[1])
local s = redis.call('HGET', KEYS[1], ARGV[2])
if not s then
  return {0}
end
local c, e = string.match(s, '^(%d+) (%d+)$')
if not c then
  return redis.error_reply('ERR floodgate: malformed in-flight state')
end
if tonumber(e) <= now then
  redis.call('HDEL', KEYS[1], ARGV[2])
  return {0}
end
c = tonumber(c) - tonumber(ARGV[3])
if c <= 0 then
  redis.call('HDEL', KEYS[1], ARGV[2])
  return {0}
end
local lease = tonumber(ARGV[4])
redis.call('HSET', KEYS[1], ARGV[2], string.format('%d %d', c, now + lease))
local ms = expiry_ms(lease, ARGV[5])
if redis.call('PTTL', KEYS[1]) < ms then
  redis.call('PEXPIRE', KEYS[1], ms)
end
return {c}
