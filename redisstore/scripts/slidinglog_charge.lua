-- Charges units beyond what the window has room for (floodgate.Charger):
-- records w units at now, the log may count more than limit, in debt (see
-- log_charge in prelude_log.lua for the bounds).
--
-- KEYS[1]  the log, as in slidinglog.lua
-- ARGV[1]  now in microseconds, or "" to read the server's TIME
-- ARGV[2]  w
-- ARGV[3]  limit
-- ARGV[4]  period in microseconds
-- ARGV[5]  the shortest expiry in milliseconds (see WithClock)
--
-- Reply: {used}.

local limit = tonumber(ARGV[3])
local period = tonumber(ARGV[4])
local now = clock_us(ARGV[1])
local stale = log_rate(ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11], limit, period, ARGV[5])
if stale then
  return stale
end
local L = log_open(now, period, limit)
log_charge(L, tonumber(ARGV[2]), limit)
log_save(L, period, ARGV[5], ARGV[7])
return {L.used}
