-- Charges tokens beyond what an intervally refilled bucket holds
-- (floodgate.Charger): they count as used, beyond the burst if need be,
-- and come back with the periods to come; the count saturates at maxused.
--
-- KEYS[1]  the bucket, as in tokenbucket_interval.lua
-- ARGV[1]  now in microseconds, or "" to read the server's TIME
-- ARGV[2]  n
-- ARGV[3]  limit
-- ARGV[4]  period in microseconds
-- ARGV[5]  maxused: the most tokens the bucket may owe (the caller keeps
--          ceil(maxused/limit) periods below 2^51 us)
-- ARGV[6]  the shortest expiry in milliseconds (see WithClock)
-- ARGV[7..10] the rate's version, suffix, and the caller's conversion,
--          as ARGV[7..10] of tokenbucket_interval.lua: a charge converts
--          a bucket of an older rate in its own round trip
--
-- Reply: {used, capped}: capped is 1 if the count stopped at maxused
-- (floodgate.ErrDebtCapped). Or a reply of rate_get, without charging.

local now = clock_us(ARGV[1])
local limit, period = tonumber(ARGV[3]), tonumber(ARGV[4])
-- The charge always writes: a conversion it was sent is kept with it.
local s = rate_get(2, ARGV[7], ARGV[9], ARGV[10], ARGV[8], nil, nil, ARGV[6])
if type(s) == 'table' then
  return s
end
local start, used = interval_at(s, now, limit, period)
local capped = 0
if used + tonumber(ARGV[2]) > tonumber(ARGV[5]) then
  capped = 1
end
used = math.max(math.min(used + tonumber(ARGV[2]), tonumber(ARGV[5])), used)
interval_save(start, used, now, limit, period, ARGV[6], ARGV[8])
return {used, capped}
