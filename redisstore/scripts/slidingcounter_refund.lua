-- Uncounts events an allowed decision counted: from the current fixed
-- window first and, if it holds fewer, from the previous one (where they
-- are if a window boundary passed since).
--
-- KEYS, ARGV[1] and ARGV[3..6] as in slidingcounter.lua; ARGV[2] is n;
-- ARGV[7], ARGV[8] the rate's version and suffix, as in
-- tokenbucket_refund.lua.

local n = tonumber(ARGV[2])
local period = tonumber(ARGV[4])
local s = rate_get(3, ARGV[7], '', '')
if type(s) == 'table' then
  return s
end
local w, now, start, prev, cur = counter_windows(s, clock_us(ARGV[1]) - tonumber(ARGV[5]), period)
if prev == 0 and cur == 0 then
  return {0}
end

local take = math.min(cur, n)
cur = cur - take
prev = prev - math.min(prev, n - take)
counter_save(w, now, start, period, prev, cur, ARGV[6], ARGV[8])
return {1}
