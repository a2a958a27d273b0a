-- Gives back tokens an allowed decision took: the theoretical arrival time
-- moves back by n*period/limit, but never below now (a bucket never holds
-- more than its burst). A full bucket's key is deleted.
--
-- KEYS[1]  the bucket, as in tokenbucket.lua
-- ARGV[1]  now in microseconds, or "" to read the server's TIME
-- ARGV[2]  decq, ARGV[3] decr: n*period/limit = decq + decr/limit us
-- ARGV[4]  limit
-- ARGV[5]  the shortest expiry in milliseconds (see WithClock)
-- ARGV[6]  the version of the rate, and ARGV[7] what follows the numbers
--          of a state written under it (prelude_rate.lua); a state of
--          another version gets rate_get's reply, and no refund

local s = rate_get(2, ARGV[6], '', '')
if type(s) == 'table' then
  return s
end
if not s then
  return {0}
end
local now = clock_us(ARGV[1])
local a, b = string.match(s, '^(%d+) (%d+)') -- a lease mark may follow
local tat = tonumber(a) - tonumber(ARGV[2])
local frac = tonumber(b) - tonumber(ARGV[3])
if frac < 0 then
  tat, frac = tat - 1, frac + tonumber(ARGV[4])
end
if tat < now or (tat == now and frac == 0) then
  rate_clear(ARGV[7], ARGV[5])
  return {1}
end
local ttl = tat - now
if frac > 0 then
  ttl = ttl + 1
end
redis.call('SET', KEYS[1], string.format('%d %d', tat, frac) .. ARGV[7], 'PX', expiry_ms(ttl, ARGV[5]))
return {1}
