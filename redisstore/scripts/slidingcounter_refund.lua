-- Uncounts events an allowed decision counted: from the current fixed
-- window first and, if it holds fewer, from the previous one (where they
-- are if a window boundary passed since).
--
-- KEYS, ARGV[1] and ARGV[3..6] as in slidingcounter.lua; ARGV[2] is n.

local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[1])
end
local n = tonumber(ARGV[2])
local period = tonumber(ARGV[4])
now = now - tonumber(ARGV[5])

local function read(key)
  local s = redis.call('GET', key)
  if not s then
    return nil, 0
  end
  local w, c = string.match(s, '^(%d+) (%d+)$')
  if not w then
    error('floodgate: malformed sliding counter state in ' .. key)
  end
  return tonumber(w), tonumber(c)
end

local function floordiv(a, b)
  local r = a % b
  return (a - r) / b
end

local function ms(us)
  local m = floordiv(us, 1000)
  if us % 1000 > 0 then
    m = m + 1
  end
  return math.max(m, tonumber(ARGV[6]))
end

local w = floordiv(now, period)
local w1, c1 = read(KEYS[1])
if w1 and w1 > w then
  w = w1
  now = w * period
end
local start = w * period
local prev, cur = 0, 0
if w1 == w then
  cur = c1
  local w0, c0 = read(KEYS[2])
  if w0 == w - 1 then
    prev = c0
  end
elseif w1 == w - 1 then
  prev = c1
end
if prev == 0 and cur == 0 then
  return {0}
end

local take = math.min(cur, n)
cur = cur - take
prev = prev - math.min(prev, n - take)
-- The current key is what dates the previous one: while the previous
-- window still counts, keep it, at zero if need be.
if cur > 0 then
  redis.call('SET', KEYS[1], string.format('%d %d', w, cur), 'PX', ms(start + 2 * period - now))
elseif prev > 0 then
  redis.call('SET', KEYS[1], string.format('%d 0', w), 'PX', ms(start + period - now))
else
  redis.call('DEL', KEYS[1])
end
if prev > 0 then
  redis.call('SET', KEYS[2], string.format('%d %d', w - 1, prev), 'PX', ms(start + period - now))
else
  redis.call('DEL', KEYS[2])
end
return {1}
