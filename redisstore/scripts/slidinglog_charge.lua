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
local L = log_open(clock_us(ARGV[1]), period, limit)
log_charge(L, tonumber(ARGV[2]), limit)
log_save(L, period, ARGV[5])
return {L.used}
