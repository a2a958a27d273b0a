-- Sliding log, weighted: at most limit units in any window (now - period,
-- now]. One entry per recorded decision, carrying its cost in the running
-- total it is named by, so a decision's work does not grow with its cost
-- nor with the log (see prelude_log.lua for the layout and the bound).
--
-- KEYS[1]  the log: a sorted set (prelude_log.lua)
-- ARGV[1]  now in microseconds, or "" to read the server's TIME
-- ARGV[2]  n, the cost (0 reports without consuming)
-- ARGV[3]  limit
-- ARGV[4]  period in microseconds
-- ARGV[5]  "1" to record denied attempts too: the oldest units are
--          dropped so that the log holds limit units with the attempt
-- ARGV[6]  the shortest expiry in milliseconds (see WithClock)
-- ARGV[7]  the version of the rate the caller decides under, ARGV[8] the
--          log's member naming it ('' for version 0), ARGV[9] the time of
--          its change, ARGV[10] its strategy, ARGV[11], ARGV[12] the rate
--          logs of version 0 are in, ARGV[13] the strategy of a plan's
--          decision, '' for any other (see log_rate)
-- ARGV[14] the most units the log may carry ahead (WithMaxDebt), for an
--          attempt recorded in debt
--
-- A report, and a denial not recorded, write nothing but the settling of
-- a debt carried ahead (see log_settle).
--
-- Reply: {allowed, used, retry, reset}: the log holds used units after the
-- decision; when denied, the request fits in retry us; the log is empty
-- again in reset us.

local n = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local period = tonumber(ARGV[4])
local now = clock_us(ARGV[1])
local stale = log_rate(ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11], ARGV[12], limit, period, ARGV[6], ARGV[13], now)
if stale then
  return stale
end
local L = log_open(now, period, limit)

local allowed, wrote = 0, false
if n == 0 or L.used + n <= limit then -- a report, even above a lowered limit
  allowed = 1
  if n > 0 and L.debt > 0 then
    -- A debt carried ahead still has room in its first window: the
    -- units join it.
    log_debt_add(L, n)
    wrote = true
  elseif n > 0 then
    log_clear(L)
    log_record(L, n)
    wrote = true
  end
elseif ARGV[5] == '1' and n > 0 and (L.used > limit or L.debt > 0) then
  -- In debt (ChargeN): the attempt counts as a charge would, and nothing
  -- older is dropped.
  log_charge(L, n, limit, tonumber(ARGV[14]))
  wrote = true
elseif ARGV[5] == '1' and n > 0 then
  -- Drop the oldest units so that, with the attempt, the log counts limit
  -- (only n of them when it counts more, after its limit was lowered).
  local k = math.min(L.used + n - limit, n)
  L.low, L.used = (L.low + k) % LOG_MOD, L.used - k
  log_record(L, n)
  wrote = true
end

local retry = 0
if allowed == 0 then
  -- The request fits once used + n - limit units have left the window:
  -- when the unit with which the log counts that many does.
  retry = log_expiry(L, L.used + n - limit, period, limit) - L.now
end

local reset = 0
if wrote or L.dirty then -- recorded, or a debt carried ahead was settled
  reset = log_save(L, period, ARGV[6], ARGV[8], limit)
elseif L.used > 0 then
  reset = log_end(L, period, limit) - L.now
end
return {allowed, L.used, retry, reset}
