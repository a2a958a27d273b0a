-- Gives back units an allowed decision recorded: takes the n newest units
-- off the log (it cannot tell whose they are; see SlidingLog.RefundN). The
-- entry holding the newest unit kept is lightened, the entries after it
-- removed (each removed once in its life, as it was added once), and the
-- expiry moves to the new newest entry.
--
-- KEYS[1]  the log, as in slidinglog.lua
-- ARGV[1]  now in microseconds, or "" to read the server's TIME
-- ARGV[2]  n
-- ARGV[3]  limit
-- ARGV[4]  period in microseconds
-- ARGV[5]  the shortest expiry in milliseconds (see WithClock)
-- ARGV[6..11] the rate's version, member, change time, strategy and
--          initial rate, as ARGV[7..12] of slidinglog.lua

local period = tonumber(ARGV[4])
local now = clock_us(ARGV[1])
local stale = log_rate(ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11], tonumber(ARGV[3]), period, ARGV[5])
if stale then
  return stale
end
local limit = tonumber(ARGV[3])
local L = log_open(now, period, limit)
if L.used == 0 then
  return {0}
end
L.used = L.used - math.min(tonumber(ARGV[2]), L.used)
if L.used > 0 then
  -- The newest units go first: a debt carried ahead's, then the entries'.
  local r = log_reaching(L, L.used)
  redis.call('ZREMRANGEBYRANK', KEYS[1], r + 1, -1)
  local total, at = log_at(r)
  local top = (L.low + L.used) % LOG_MOD
  if total ~= top then
    redis.call('ZREM', KEYS[1], string.format('%d', total))
    redis.call('ZADD', KEYS[1], at, string.format('%d', top))
  end
  L.count = r - L.off + 1
  log_tail(L)
end
log_save(L, period, ARGV[5], ARGV[7], limit)
return {L.used}
