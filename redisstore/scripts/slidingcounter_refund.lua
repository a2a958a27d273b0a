-- Uncounts events an allowed decision counted: from the current fixed
-- window first and, if it holds fewer, from the previous one (where they
-- are if a window boundary passed since).
--
-- KEYS, ARGV[1] and ARGV[3..6] as in slidingcounter.lua; ARGV[2] is n.

local n = tonumber(ARGV[2])
local period = tonumber(ARGV[4])
local w, now, start, prev, cur = counter_windows(clock_us(ARGV[1]) - tonumber(ARGV[5]), period)
if prev == 0 and cur == 0 then
  return {0}
end

local take = math.min(cur, n)
cur = cur - take
prev = prev - math.min(prev, n - take)
counter_save(w, now, start, period, prev, cur, ARGV[6])
return {1}
