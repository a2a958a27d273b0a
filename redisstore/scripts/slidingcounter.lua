-- Sliding-window counter: check and count in one script.
--
-- KEYS[1]  the counter: "w prev cur" (prelude_counter.lua)
-- ARGV[1]  now in microseconds, or "" to read the server's TIME
-- ARGV[2]  n, the cost (0 reports without counting)
-- ARGV[3]  limit
-- ARGV[4]  period in microseconds
-- ARGV[5]  origin of the fixed windows in microseconds (0: the Unix epoch)
-- ARGV[6]  the shortest expiry in milliseconds (see WithClock)
-- ARGV[7..10] the rate's version, suffix, and the caller's conversion,
--          as ARGV[9..12] of tokenbucket.lua
--
-- The sliding window's estimate is prev·(period - elapsed)/period + cur;
-- the request fits if cur + n <= limit and
-- prev·(period - elapsed) <= (limit - cur - n)·period. Those products can
-- pass 2^53, where Lua's doubles stop being exact, so they are compared as
-- two limbs of base 2^25 (divisions by a power of two are exact).
--
-- Reply: {allowed, prev, cur, now}: the counts after the decision and the
-- time, in microseconds since the origin, they are as of. The caller
-- derives Remaining, RetryAfter and ResetAfter from them. Or a reply of
-- rate_get, without deciding.

local n = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local period = tonumber(ARGV[4])
local s, converted = rate_get(3, ARGV[7], ARGV[9], ARGV[10])
if type(s) == 'table' then
  return s
end
local w, now, start, prev, cur = counter_windows(s, clock_us(ARGV[1]) - tonumber(ARGV[5]), period)
local elapsed = now - start

local B = 33554432 -- 2^25
-- mul returns a·b as (hi, lo) in base 2^25, for a < 2^25 and b < 2^50.
local function mul(a, b)
  local bl = b % B
  local p2 = a * bl
  local lo = p2 % B
  return a * ((b - bl) / B) + (p2 - lo) / B, lo
end

local allowed = 0
if n == 0 then
  allowed = 1 -- a report, even above a downgraded limit (see SetRate)
elseif cur + n <= limit then
  local ah, al = mul(prev, period - elapsed)
  local bh, bl = mul(limit - cur - n, period)
  if ah < bh or (ah == bh and al <= bl) then
    allowed = 1
  end
end

if allowed == 1 and n > 0 then
  cur = cur + n
end
if (allowed == 1 and n > 0) or converted then
  counter_save(w, now, start, period, prev, cur, ARGV[6], ARGV[8])
end
return {allowed, prev, cur, now}
