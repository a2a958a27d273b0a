-- Gives back tokens an allowed decision took from an intervally refilled
-- bucket: from the current period's use; tokens a period boundary already
-- returned are not returned twice. A full bucket's key is deleted.
--
-- KEYS[1]  the bucket, as in tokenbucket_interval.lua
-- ARGV[1]  now in microseconds, or "" to read the server's TIME
-- ARGV[2]  n
-- ARGV[3]  limit
-- ARGV[4]  period in microseconds
-- ARGV[5]  the shortest expiry in milliseconds (see WithClock)
-- ARGV[6], ARGV[7] the rate's version and suffix, as in tokenbucket_refund.lua

local s = rate_get(2, ARGV[6], '', '')
if type(s) == 'table' then
  return s
end
local now = clock_us(ARGV[1])
local limit, period = tonumber(ARGV[3]), tonumber(ARGV[4])
local start, used = interval_at(s, now, limit, period)
used = math.max(used - tonumber(ARGV[2]), 0)
interval_save(start, used, now, limit, period, ARGV[5], ARGV[7])
return {1}
