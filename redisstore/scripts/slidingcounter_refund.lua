-- Uncounts events an allowed decision counted: from the current fixed
-- window first and, if it holds fewer, from the previous one (where they
-- are if a window boundary passed since). From a debt carried ahead
-- (ChargeN), as floodgate.SlidingCounter does in memory: from its last
-- window back, what is left carried again from now's window; taking more
-- than the debt leaves now's window counting the limit less the rest,
-- and the window before it the limit.
--
-- KEYS, ARGV[1] and ARGV[3..6] as in slidingcounter.lua; ARGV[2] is n;
-- ARGV[7], ARGV[8] the rate's version and suffix, as in
-- tokenbucket_refund.lua.

local n = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local period = tonumber(ARGV[4])
local s = rate_get(3, ARGV[7], '', '')
if type(s) == 'table' then
  return s
end
local real = clock_us(ARGV[1]) - tonumber(ARGV[5])
local w, now, start, prev, cur = counter_windows(s, real, period)
if prev == 0 and cur == 0 then
  return {0}
end

local rw = floordiv(real, period)
if w > rw then
  local carried = (w - rw - 1) * limit + cur -- the windows after now's
  if n < carried then
    local left = carried - n
    local k = floordiv(left + limit - 1, limit)
    if rw + k ~= w then
      prev = limit
    end
    w, cur = rw + k, left - (k - 1) * limit
  else
    local c = prev -- now's window, when it is the one before the last
    if w - rw > 1 then
      c = limit
    end
    w, prev, cur = rw, limit, c - math.min(c, n - carried)
  end
  counter_save(w, real, w * period, period, prev, cur, ARGV[6], ARGV[8])
  return {1}
end

local take = math.min(cur, n)
cur = cur - take
prev = prev - math.min(prev, n - take)
counter_save(w, now, start, period, prev, cur, ARGV[6], ARGV[8])
return {1}
