-- Brings a key's slots in line with what one instance knows of its
-- calls: renews the leases of the calls it holds, gives back the slots
-- of the calls released, and those of the decisions it gave up on (the
-- slot their script may have taken), and shrinks calls released in part.
-- A call whose member is gone had its lease run out: it is not renewed
-- (another call may hold its slot by now), and reported.
--
-- KEYS[1]  the key's slots (inflight_prelude.lua)
-- ARGV[1]  now in microseconds, or "" to read the server's TIME
-- ARGV[2]  the lease in microseconds
-- ARGV[3]  the shortest expiry in milliseconds (see WithClock)
-- ARGV[4]  r, the calls to renew; ARGV[5] g, the calls released;
-- ARGV[6]  a, the records that may be gone (decisions given up on,
--          releases retried)
-- then     r members to renew, g members released, a members to remove,
--          and pairs of members: a call's old member and its new one,
--          with fewer units
--
-- Shrinks and removals go first, so that a renewal finds a shrunk call.
-- Every step is idempotent: a removal or a shrink that finds nothing did
-- its work before (or the lease did).
--
-- Reply: {held, missing, i...}: the units held after, the released calls
-- whose record was gone, and the positions (1..r) of the calls to renew
-- whose record was gone: their leases ran out while they held them.

local now = clock_us(ARGV[1])
local lease = tonumber(ARGV[2])
local r, g, a = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local held = inflight_held()
local first = 7 + r + g + a
for i = first, #ARGV - 1, 2 do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score then
    redis.call('ZREM', KEYS[1], ARGV[i])
    redis.call('ZADD', KEYS[1], score, ARGV[i + 1])
    held = held - inflight_units(ARGV[i]) + inflight_units(ARGV[i + 1])
  end
end
local missing = 0
for i = 7 + r, first - 1 do
  if redis.call('ZREM', KEYS[1], ARGV[i]) == 1 then
    held = held - inflight_units(ARGV[i])
  elseif i < 7 + r + g then
    missing = missing + 1
  end
end
held = math.max(held, 0)
inflight_save(held)
local reply = {held, missing}
local renewed = false
for i = 1, r do
  local m = ARGV[6 + i]
  -- A call still here is still counted, even past its lease: renewing it
  -- gives no one's slot away.
  if redis.call('ZSCORE', KEYS[1], m) then
    redis.call('ZADD', KEYS[1], now + lease, m)
    renewed = true
  else
    reply[#reply + 1] = i
  end
end
if renewed then
  inflight_keep(lease, ARGV[3])
end
return reply
