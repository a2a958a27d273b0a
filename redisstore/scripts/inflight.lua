-- In-flight slots held under leases (redisstore.InFlight): takes n slots
-- for a call if the key's calls hold at most max-n, after forgetting the
-- calls whose lease ran out (their instance died, stopped renewing, or
-- gave up on the decision that took them: their slots come back).
--
-- KEYS[1]  the key's slots (inflight_prelude.lua)
-- ARGV[1]  now in microseconds, or "" to read the server's TIME
-- ARGV[2]  the call's member, "<call> <n>", unique to the call
-- ARGV[3]  n (0 reports without taking)
-- ARGV[4]  max
-- ARGV[5]  the lease in microseconds
-- ARGV[6]  the shortest expiry in milliseconds (see WithClock)
--
-- The work is a lookup, a range read of the expired calls (at most 100
-- forgotten a run) and two writes, whatever max and the calls held.
--
-- Reply: {allowed, held}: held is the units held after the decision.

local now = clock_us(ARGV[1])
local n, max = tonumber(ARGV[3]), tonumber(ARGV[4])
local held = inflight_expire(now)
if n == 0 then
  return {1, held}
end
if held + n > max then
  return {0, held}
end
local lease = tonumber(ARGV[5])
redis.call('ZADD', KEYS[1], now + lease, ARGV[2])
held = held + n
inflight_save(held)
inflight_keep(lease, ARGV[6])
return {1, held}
