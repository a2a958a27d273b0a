-- Uncounts events an allowed decision counted: from the current fixed
-- window first and, if it holds fewer, from the previous one (where they
-- are if a window boundary passed since).
--
-- KEYS, ARGV[1] and ARGV[3..6] as in slidingcounter.lua; ARGV[2] is n.

local n = tonumber(ARGV[2])
local period = tonumber(ARGV[4])
local w, now, start, prev, cur = counter_windows(clock_us(ARGV[1]) - tonumber(ARGV[5]), period)
if prev == 0 and cur == 0 then
  return {0}
end

local take = math.min(cur, n)
cur = cur - take
prev = prev - math.min(prev, n - take)
-- The current key is what dates the previous one: while the previous
-- window still counts, keep it, at zero if need be.
if cur > 0 then
  redis.call('SET', KEYS[1], string.format('%d %d', w, cur), 'PX', expiry_ms(start + 2 * period - now, ARGV[6]))
elseif prev > 0 then
  redis.call('SET', KEYS[1], string.format('%d 0', w), 'PX', expiry_ms(start + period - now, ARGV[6]))
else
  redis.call('DEL', KEYS[1])
end
if prev > 0 then
  redis.call('SET', KEYS[2], string.format('%d %d', w - 1, prev), 'PX', expiry_ms(start + period - now, ARGV[6]))
else
  redis.call('DEL', KEYS[2])
end
return {1}
