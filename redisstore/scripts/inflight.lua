-- In-flight slots held under leases (redisstore.InFlight): takes n slots
-- for the caller's holder (one per limiter instance) if the key's holders
-- hold at most max-n, after forgetting the holders whose lease ran out
-- (an instance that died, or stopped renewing: its slots come back).
--
-- KEYS[1]  the key's holders: a hash, holder -> "slots expiry", expiry in
--          microseconds
-- ARGV[1]  now in microseconds, or "" to read the server's TIME
-- ARGV[2]  the holder
-- ARGV[3]  n (0 reports without taking)
-- ARGV[4]  max
-- ARGV[5]  the lease in microseconds
-- ARGV[6]  the shortest expiry in milliseconds (see WithClock)
--
-- The work is one pass over the holders with slots of this key: at most
-- as many as instances of the service, and at most max.
--
-- Reply: {allowed, held}: held is the slots held after the decision.

local now = clock_us(ARGV[1])
local n, max = tonumber(ARGV[3]), tonumber(ARGV[4])
local held, mine, last = 0, 0, 0
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local c, e = string.match(all[i + 1], '^(%d+) (%d+)$')
  if not c then
    return redis.error_reply('ERR floodgate: malformed in-flight state')
  end
  c, e = tonumber(c), tonumber(e)
  if e <= now then
    redis.call('HDEL', KEYS[1], all[i])
  else
    held = held + c
    last = math.max(last, e)
    if all[i] == ARGV[2] then
      mine = c
    end
  end
end
if n == 0 then
  return {1, held}
end
if held + n > max then
  return {0, held}
end
local expiry = now + tonumber(ARGV[5])
redis.call('HSET', KEYS[1], ARGV[2], string.format('%d %d', mine + n, expiry))
-- The key vanishes with the last lease.
redis.call('PEXPIRE', KEYS[1], expiry_ms(math.max(last, expiry) - now, ARGV[6]))
return {1, held + n}
