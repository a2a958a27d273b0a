-- Uncounts events an allowed decision counted, as
-- slidingcounter_refund.lua does, but never the units leased in the
-- current window: an instance may still allow them.
--
-- KEYS[1]  the counter and its leased units (lease_prelude_counter.lua)
-- ARGV[1] and ARGV[3..6] as in slidingcounter_refund.lua; ARGV[2] is n;
-- ARGV[7], ARGV[8] the rate's version and suffix, as in
-- lease_tokenbucket_refund.lua.

local n = tonumber(ARGV[2])
local period = tonumber(ARGV[4])
local s = rate_get(3, ARGV[7], '', '')
if type(s) == 'table' then
  return s
end
local w, now, start, prev, cur, leased = lease_counter_read(s, clock_us(ARGV[1]) - tonumber(ARGV[5]), period)
local take = math.max(0, math.min(cur - leased, n))
local rest = math.min(prev, n - take)
if take == 0 and rest == 0 then
  return {0}
end
lease_counter_save(w, now, start, period, prev - rest, cur - take, leased, ARGV[6], ARGV[8])
return {1}
