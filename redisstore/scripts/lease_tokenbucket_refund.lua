-- Gives back tokens an allowed decision took, as tokenbucket_refund.lua
-- does, but never below the lease mark: the slots of a lease some instance
-- may still grant from stay taken.
--
-- KEYS[1]  the bucket, KEYS[2] the lease mark, as in lease_tokenbucket.lua
-- ARGV[1]  now in microseconds, or "" to read the server's TIME
-- ARGV[2]  decq, ARGV[3] decr: n*T
-- ARGV[4]  limit
-- ARGV[5]  the shortest expiry in milliseconds (see WithClock)

local sq, sr = tb_read(KEYS[1])
if not sq then
  return {0}
end
local now = clock_us(ARGV[1])
local limit = tonumber(ARGV[4])
local q, r = p_sub(sq, sr, tonumber(ARGV[2]), tonumber(ARGV[3]), limit)
local wq, wr = tb_read(KEYS[2])
if wq and p_le(q, r, wq, wr) then
  if p_le(sq, sr, wq, wr) then
    return {0}
  end
  q, r = wq, wr
end
tb_write(KEYS[1], q, r, now, ARGV[5])
return {1}
