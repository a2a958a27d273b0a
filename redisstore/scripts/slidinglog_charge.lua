-- Charges units beyond what the window has room for (floodgate.Charger):
-- records at now what the window has room for, and carries the rest into
-- the coming windows (see log_charge in prelude_log.lua).
--
-- KEYS[1]  the log, as in slidinglog.lua
-- ARGV[1]  now in microseconds, or "" to read the server's TIME
-- ARGV[2]  w
-- ARGV[3]  limit
-- ARGV[4]  period in microseconds
-- ARGV[5]  the shortest expiry in milliseconds (see WithClock)
-- ARGV[6..11] the rate's version, member, change time, strategy and
--          initial rate, as ARGV[7..12] of slidinglog.lua
-- ARGV[12] the most units the log may carry ahead (WithMaxDebt)
--
-- Reply: {used, capped}: capped is 1 if the debt stopped at its bound
-- (floodgate.ErrDebtCapped).

local limit = tonumber(ARGV[3])
local period = tonumber(ARGV[4])
local now = clock_us(ARGV[1])
local stale = log_rate(ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11], limit, period, ARGV[5])
if stale then
  return stale
end
local L = log_open(now, period, limit)
local capped = log_charge(L, tonumber(ARGV[2]), limit, tonumber(ARGV[12]))
log_save(L, period, ARGV[5], ARGV[7], limit)
return {L.used, capped}
