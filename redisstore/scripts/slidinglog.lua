-- Sliding log: at most limit events in any window (now - period, now].
--
-- KEYS[1]  the log: a sorted set, one member per event, scored by its time
--          in integer microseconds. Members are ARGV[5] .. index: unique per
--          call, so two events at the same microsecond never collapse into
--          one (which a timestamp or the client's value as member would do).
-- ARGV[1]  now in microseconds, or "" to read the server's TIME
-- ARGV[2]  n, the cost (0 reports without consuming)
-- ARGV[3]  limit
-- ARGV[4]  period in microseconds
-- ARGV[5]  a member prefix unique to this call
-- ARGV[6]  "1" to record denied attempts too (the log still keeps at most
--          limit members: the oldest are dropped)
-- ARGV[7]  the shortest expiry in milliseconds (see WithClock)
--
-- Scores and times are integers below 2^53, exact in Lua's doubles.
--
-- Reply: {allowed, count, retry, reset}: count events in the window after
-- the decision; when denied, the request fits in retry us; the log is empty
-- again in reset us.

local now = clock_us(ARGV[1])
local key = KEYS[1]
local n = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local period = tonumber(ARGV[4])

-- An event at time t is in the window while t > now - period.
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - period)
local count = redis.call('ZCARD', key)

-- add records n events at now, in batches that stay well inside Lua's
-- stack limit for unpack.
local function add(cnt)
  local i = 1
  while i <= cnt do
    local batch = {}
    local last = math.min(cnt, i + 499)
    for j = i, last do
      batch[#batch + 1] = now
      batch[#batch + 1] = ARGV[5] .. j
    end
    redis.call('ZADD', key, unpack(batch))
    i = last + 1
  end
end

-- expire sets the key to vanish when its newest event leaves the window,
-- and returns that wait in microseconds (0 for an empty log).
local function expire()
  local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if #newest == 0 then
    return 0
  end
  local reset = tonumber(newest[2]) + period - now
  redis.call('PEXPIRE', key, expiry_ms(reset, ARGV[7]))
  return reset
end

if count + n <= limit then
  if n > 0 then
    add(n)
    count = count + n
  end
  return {1, count, 0, expire()}
end

-- Denied. With ARGV[6], the attempt is recorded first (its events replace
-- the oldest beyond limit), so that the wait reported accounts for it.
if ARGV[6] == '1' and n > 0 then
  add(n)
  redis.call('ZREMRANGEBYRANK', key, 0, -(limit + 1))
  count = redis.call('ZCARD', key)
end
-- The request fits once the (count + n - limit) oldest events have left
-- the window, that is when the event at that rank does.
local rank = count + n - limit - 1
local e = redis.call('ZRANGE', key, rank, rank, 'WITHSCORES')
local retry = tonumber(e[2]) + period - now
return {0, count, retry, expire()}
