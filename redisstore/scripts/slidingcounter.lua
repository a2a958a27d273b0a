-- Sliding-window counter: check and count in one script.
--
-- KEYS[1]  the counter: "w prev cur", and a leasing limiter's leased
--          units, which it keeps (prelude_counter.lua)
-- ARGV[1]  now in microseconds, or "" to read the server's TIME
-- ARGV[2]  n, the cost (0 reports without counting)
-- ARGV[3]  limit
-- ARGV[4]  period in microseconds
-- ARGV[5]  origin of the fixed windows in microseconds (0: the Unix epoch)
-- ARGV[6]  the shortest expiry in milliseconds (see WithClock)
-- ARGV[7..10] the rate's version, suffix, and the caller's conversion,
--          as ARGV[9..12] of tokenbucket.lua
-- ARGV[11] the strategy of a plan's decision, as ARGV[15] of
--          tokenbucket.lua
--
-- The sliding window's estimate is prev·(period - elapsed)/period + cur;
-- the request fits if cur + n <= limit and
-- prev·(period - elapsed) <= (limit - cur - n)·period. Those products can
-- pass 2^53, where Lua's doubles stop being exact, so they are compared as
-- four limbs of base 2^24 (divisions by a power of two are exact); prev may
-- reach 2^30 after a downgrade.
--
-- Reply: {allowed, prev, cur, now, real}: the counts after the decision,
-- the time, in microseconds since the origin, they are as of, and the
-- time it is: later than now when the counter's window is still to come
-- (a debt carried ahead by ChargeN, or a clock that stepped back), every
-- window until then counting the limit. The caller derives Remaining
-- from the counts as of now, and RetryAfter and ResetAfter, waits from
-- real. Or a reply of rate_get, without deciding.

local n = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local period = tonumber(ARGV[4])
local clock = clock_us(ARGV[1])
local s, converted, prate = rate_get(3, ARGV[7], ARGV[9], ARGV[10], ARGV[8], clock, period)
if type(s) == 'table' then
  return s
end
local real = clock - tonumber(ARGV[5])
local w, now, start, prev, cur, leased = counter_windows(s, real, period)
if prate then
  -- Written under another plan of this period: its counts as of now,
  -- converted as the plan says and as inherit.Strategy.Counts does in Go
  -- (taken from the previous window first; added to the newest, at least
  -- what any sum from cur to prev + cur would gain, so that a state that
  -- counts more converts to one that does too), and written whatever
  -- this decision does.
  local how = tonumber(ARGV[11])
  local used = prev + cur
  local u = rate_units(how, used, prate[1], limit)
  if u < used then
    local take = math.min(prev, used - u)
    prev, cur = prev - take, cur - (used - u - take)
  elseif cur > 0 then
    local function gain(t)
      return math.max(0, rate_units(how, t, prate[1], limit) - t)
    end
    local most = math.max(gain(used), gain(math.min(used, math.max(cur, prate[1]))))
    cur = math.min(u, cur + most)
    prev = u - cur
  else
    prev = prev + u - used
  end
  converted = true
end
local elapsed = now - start

local B = 16777216 -- 2^24
-- mul returns a·b as four limbs of base 2^24, most significant first, for
-- a < 2^31 (a count, up to a debt's 2^30) and b < 2^50: every partial
-- product and carry stays below 2^53.
local function mul(a, b)
  local a0 = a % B
  local a1 = (a - a0) / B
  local b0 = b % B
  local r = (b - b0) / B
  local b1 = r % B
  local b2 = (r - b1) / B
  local c0, c1, c2, c3 = a0 * b0, a0 * b1 + a1 * b0, a0 * b2 + a1 * b1, a1 * b2
  local l0 = c0 % B
  c1 = c1 + (c0 - l0) / B
  local l1 = c1 % B
  c2 = c2 + (c1 - l1) / B
  local l2 = c2 % B
  c3 = c3 + (c2 - l2) / B
  return c3, l2, l1, l0
end

-- le reports whether the product a is at most the product b, limb by limb.
local function le(a3, a2, a1, a0, b3, b2, b1, b0)
  if a3 ~= b3 then return a3 < b3 end
  if a2 ~= b2 then return a2 < b2 end
  if a1 ~= b1 then return a1 < b1 end
  return a0 <= b0
end

local allowed = 0
if n == 0 then
  allowed = 1 -- a report, even above a downgraded limit (see SetRate)
elseif cur + n <= limit then
  local x3, x2, x1, x0 = mul(prev, period - elapsed)
  local y3, y2, y1, y0 = mul(limit - cur - n, period)
  if le(x3, x2, x1, x0, y3, y2, y1, y0) then
    allowed = 1
  end
end

if allowed == 1 and n > 0 then
  cur = cur + n
end
if (allowed == 1 and n > 0) or converted then
  counter_save(w, now, start, period, prev, cur, ARGV[6], ARGV[8], leased)
end
return {allowed, prev, cur, now, real}
