-- Gives back units an allowed decision recorded: takes the n newest units
-- off the log (it cannot tell whose they are; see SlidingLog.RefundN),
-- dropping the entries they empty, and moves the expiry to the new newest
-- entry.
--
-- KEYS[1], KEYS[2]  the log and its state, as in slidinglog.lua
-- ARGV[1]  now in microseconds, or "" to read the server's TIME
-- ARGV[2]  n
-- ARGV[3]  period in microseconds
-- ARGV[4]  the shortest expiry in milliseconds (see WithClock)

local now = clock_us(ARGV[1])
local period = tonumber(ARGV[3])
local used, seq = log_state(now - period)
local k = math.min(tonumber(ARGV[2]), used)
used = used - k
while k > 0 do
  local es = redis.call('ZRANGE', KEYS[1], 0, 63, 'REV', 'WITHSCORES')
  if #es == 0 then
    break
  end
  for i = 1, #es, 2 do
    local s, w = log_entry(es[i])
    if w > k then
      redis.call('ZADD', KEYS[1], es[i + 1], s .. ':' .. (w - k))
      redis.call('ZREM', KEYS[1], es[i])
      k = 0
      break
    end
    redis.call('ZREM', KEYS[1], es[i])
    k = k - w
    if k == 0 then
      break
    end
  end
end
log_save(used, seq, now, period, ARGV[4])
return {used}
