-- Charges events beyond what the estimate has room for (floodgate.Charger):
-- the current window counts n more, up to maxcount.
--
-- KEYS[1]  the counter, as in slidingcounter.lua
-- ARGV[1]  now in microseconds, or "" to read the server's TIME
-- ARGV[2]  n
-- ARGV[3]  period in microseconds
-- ARGV[4]  origin of the fixed windows in microseconds
-- ARGV[5]  maxcount: the most a window counts (2^30)
-- ARGV[6]  the shortest expiry in milliseconds (see WithClock)
--
-- Reply: {cur}.

local period = tonumber(ARGV[3])
local s = rate_get(3, ARGV[7], '', '')
if type(s) == 'table' then
  return s
end
local w, now, start, prev, cur = counter_windows(s, clock_us(ARGV[1]) - tonumber(ARGV[4]), period)
cur = math.max(math.min(cur + tonumber(ARGV[2]), tonumber(ARGV[5])), cur)
counter_save(w, now, start, period, prev, cur, ARGV[6], ARGV[8])
return {cur}
