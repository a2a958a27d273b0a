-- Intervally refilled token bucket, booking ahead (floodgate.Reserver):
-- decides as tokenbucket_interval.lua, and books a request whose tokens
-- come back within maxwait: they count as used now, beyond the burst,
-- and the caller waits for the period boundary that returns them.
--
-- KEYS[1]  the bucket, as in tokenbucket_interval.lua
-- ARGV[1]..ARGV[6] as in tokenbucket_interval.lua
-- ARGV[7]  maxwait in microseconds
-- ARGV[8..11] the rate's version, suffix, and the caller's conversion,
--          as ARGV[7..10] of tokenbucket_interval.lua: a booking converts
--          a bucket of an older rate in its own round trip
--
-- Reply: {code, start, used, now}: code 1 allowed at once, 2 booked, 0
-- denied; the caller derives the wait from start and used. Or a reply of
-- rate_get, without deciding.

local now = clock_us(ARGV[1])
local n = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local limit, period = tonumber(ARGV[4]), tonumber(ARGV[5])
local s, converted = rate_get(2, ARGV[8], ARGV[10], ARGV[11], ARGV[9], nil, nil, ARGV[6])
if type(s) == 'table' then
  return s
end
local start, used = interval_at(s, now, limit, period)

local code = 0
if used + n <= burst then
  code = 1
elseif start + ceildiv(used + n - burst, limit) * period - now <= tonumber(ARGV[7]) then
  code = 2
end
if code > 0 and n > 0 then
  used = used + n
end
if (code > 0 and n > 0) or converted then
  interval_save(start, used, now, limit, period, ARGV[6], ARGV[9])
end
return {code, start, used, now}
