-- Sliding log, weighted: at most limit units in any window (now - period,
-- now]. One entry per recorded decision, carrying its cost as a weight, so
-- a decision's work does not grow with its cost.
--
-- KEYS[1]  the log: a sorted set, one member "seq:w" per entry (w units),
--          scored by its time in integer microseconds. seq is unique
--          within the key, so entries of one microsecond never collapse.
-- KEYS[2]  the log's state "used seq": the units its entries hold and the
--          next seq. It lets a decision read the total without summing
--          the log; its_state rebuilds it from the log if it is missing.
-- ARGV[1]  now in microseconds, or "" to read the server's TIME
-- ARGV[2]  n, the cost (0 reports without consuming)
-- ARGV[3]  limit
-- ARGV[4]  period in microseconds
-- ARGV[5]  "1" to record denied attempts too: the oldest units are
--          dropped so that the log holds limit units with the attempt
-- ARGV[6]  the shortest expiry in milliseconds (see WithClock)
--
-- The work of one decision: the entries that left the window (each is
-- read once in its life), and when denied, the oldest entries up to the
-- units the request needs. Entries weigh at least one unit and the log
-- holds at most limit units, so at most limit entries (limit <= 2^16).
--
-- Reply: {allowed, used, retry, reset}: the log holds used units after the
-- decision; when denied, the request fits in retry us; the log is empty
-- again in reset us.

local now = clock_us(ARGV[1])
local n = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local period = tonumber(ARGV[4])
local used, seq = log_state(now - period)

local allowed = 0
if used + n <= limit then
  allowed = 1
  if n > 0 then
    redis.call('ZADD', KEYS[1], now, seq .. ':' .. n)
    used, seq = used + n, seq + 1
  end
elseif ARGV[5] == '1' and n > 0 then
  log_take_oldest(used + n - limit)
  redis.call('ZADD', KEYS[1], now, seq .. ':' .. n)
  used, seq = limit, seq + 1
end

local retry = 0
if allowed == 0 then
  -- The request fits once used + n - limit units have left the window:
  -- when the oldest entry that brings the count from the oldest up to
  -- that many does.
  local need, acc, from = used + n - limit, 0, 0
  while retry == 0 do
    local es = redis.call('ZRANGE', KEYS[1], from, from + 63, 'WITHSCORES')
    if #es == 0 then
      error('floodgate: sliding log ' .. KEYS[1] .. ' holds fewer units than its state says')
    end
    for i = 1, #es, 2 do
      local _, w = log_entry(es[i])
      acc = acc + w
      if acc >= need then
        retry = tonumber(es[i + 1]) + period - now
        break
      end
    end
    from = from + 64
  end
end

return {allowed, used, retry, log_save(used, seq, now, period, ARGV[6])}
