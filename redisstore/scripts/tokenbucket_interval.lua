-- Token bucket refilled intervally (WithIntervalRefill): the whole limit
-- comes back at once each period, counted from the key's first event
-- after its bucket was last full, as floodgate.TokenBucket does in memory.
--
-- KEYS[1]  the bucket: "start used", the start of the current period and
--          the tokens used in it, in integer microseconds and tokens
-- ARGV[1]  now in microseconds, or "" to read the server's TIME
-- ARGV[2]  n, the cost (0 reports without consuming)
-- ARGV[3]  burst
-- ARGV[4]  limit
-- ARGV[5]  period in microseconds
-- ARGV[6]  the shortest expiry in milliseconds (see WithClock)
-- ARGV[7..10] the rate's version, suffix, and the caller's conversion,
--          as ARGV[9..12] of tokenbucket.lua
-- ARGV[11] the strategy of a plan's decision, as ARGV[15] of
--          tokenbucket.lua
--
-- Every number stays an integer below 2^53: the caller bounds
-- ceil(burst/limit) periods below 2^51 us.
--
-- Reply: {allowed, start, used, now} after the decision; the caller
-- derives Remaining, RetryAfter and ResetAfter from them. Or a reply of
-- rate_get, without deciding.

local now = clock_us(ARGV[1])
local n = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local limit, period = tonumber(ARGV[4]), tonumber(ARGV[5])
local s, converted, prate = rate_get(2, ARGV[7], ARGV[9], ARGV[10], ARGV[8], now, period, ARGV[6])
if type(s) == 'table' then
  return s
end
local start, used
if prate then
  -- Written under another plan: its period as of now at its limit, its
  -- tokens used converted (inherit.IntervalUsed), held so that they come
  -- back within 2^50 us.
  start, used = interval_at(s, now, prate[1], period)
  used = math.min(rate_units(tonumber(ARGV[11]), used, prate[3], burst), limit * floordiv(1125899906842624, period))
  if used == 0 then
    start = now
  end
  converted = true
else
  start, used = interval_at(s, now, limit, period)
end

local allowed = 0
if n == 0 or used + n <= burst then
  allowed = 1
  used = used + n
end
if (allowed == 1 and n > 0) or converted then
  interval_save(start, used, now, limit, period, ARGV[6], ARGV[8])
end
return {allowed, start, used, now}
