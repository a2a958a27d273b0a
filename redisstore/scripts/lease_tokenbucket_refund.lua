-- Gives back tokens an allowed decision took, as tokenbucket_refund.lua
-- does, but never below the lease mark: the slots of a lease some instance
-- may still allow units from stay taken.
--
-- KEYS[1]  the bucket and its lease mark, as in lease_tokenbucket.lua
-- ARGV[1]  now in microseconds, or "" to read the server's TIME
-- ARGV[2]  decq, ARGV[3] decr: n*T
-- ARGV[4]  tq, ARGV[5] tr: the emission interval T
-- ARGV[6]  limit
-- ARGV[7]  the shortest expiry in milliseconds (see WithClock)
-- ARGV[8], ARGV[9] the rate's version and suffix, as in tokenbucket_refund.lua

local s = rate_get(2, ARGV[8], '', '')
if type(s) == 'table' then
  return s
end
local sq, sr, wq, wr = tb_read(s)
if not sq then
  return {0}
end
local now = clock_us(ARGV[1])
local tq, tr, limit = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local q, r = p_sub(sq, sr, tonumber(ARGV[2]), tonumber(ARGV[3]), limit)
wq, wr = live_mark(wq, wr, now, tq, tr, limit)
if wq and p_le(q, r, wq, wr) then
  if p_le(sq, sr, wq, wr) then
    return {0}
  end
  q, r = wq, wr
end
tb_write(q, r, wq, wr, now, tq, tr, limit, ARGV[7], ARGV[9])
return {1}
