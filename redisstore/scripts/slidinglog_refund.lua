-- Gives back events an allowed decision recorded: removes the n newest
-- members (the log cannot tell whose they are; see SlidingLog.RefundN) and
-- moves the expiry to the new newest event.
--
-- KEYS[1]  the log, as in slidinglog.lua
-- ARGV[1]  now in microseconds, or "" to read the server's TIME
-- ARGV[2]  n
-- ARGV[3]  period in microseconds
-- ARGV[4]  the shortest expiry in milliseconds (see WithClock)

local key = KEYS[1]
redis.call('ZPOPMAX', key, ARGV[2])
local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
if #newest == 0 then
  return {0}
end
local now = clock_us(ARGV[1])
local reset = tonumber(newest[2]) + tonumber(ARGV[3]) - now
if reset <= 0 then
  redis.call('DEL', key)
  return {0}
end
redis.call('PEXPIRE', key, expiry_ms(reset, ARGV[4]))
return {1}
