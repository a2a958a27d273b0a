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
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[1])
end
local reset = tonumber(newest[2]) + tonumber(ARGV[3]) - now
if reset <= 0 then
  redis.call('DEL', key)
  return {0}
end
local ms = (reset - reset % 1000) / 1000
if reset % 1000 > 0 then
  ms = ms + 1
end
redis.call('PEXPIRE', key, math.max(ms, tonumber(ARGV[4])))
return {1}
