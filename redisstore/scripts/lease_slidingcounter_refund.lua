-- Uncounts events an allowed decision counted, as
-- slidingcounter_refund.lua does, but never the units leased in the
-- current window: an instance may still grant them.
--
-- KEYS, ARGV[1] and ARGV[3..6] as in slidingcounter_refund.lua (KEYS[3]
-- the leased units, as in lease_slidingcounter.lua); ARGV[2] is n.

local n = tonumber(ARGV[2])
local period = tonumber(ARGV[4])
local w, now, start, prev, cur = counter_windows(clock_us(ARGV[1]) - tonumber(ARGV[5]), period)
local leased = lease_read(w)
local take = math.max(0, math.min(cur - leased, n))
local rest = math.min(prev, n - take)
if take == 0 and rest == 0 then
  return {0}
end
counter_save(w, now, start, period, prev - rest, cur - take, leased, ARGV[6])
return {1}
