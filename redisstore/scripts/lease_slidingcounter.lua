-- Leased sliding counter: n events now and up to k - n more for the caller
-- to grant locally, counted now in the current fixed window.
--
-- KEYS[1]  the counter and its leased units (lease_prelude_counter.lua)
-- ARGV[1]  now in microseconds, or "" to read the server's TIME
-- ARGV[2]  n, the events wanted now; 0 for a lease taken ahead of need,
--          which takes nothing when nothing fits
-- ARGV[3]  k, the events wanted in all (n <= k <= limit)
-- ARGV[4]  limit, ARGV[5] period in microseconds, ARGV[6] origin
-- ARGV[7]  the shortest expiry in milliseconds (see WithClock)
-- ARGV[8]  the window of the caller's unused tail, "" for none
-- ARGV[9]  m, the units of its unused tail to give back (n and k are 0
--          for a round trip that only gives a tail back)
-- ARGV[10], ARGV[11] the rate's version and suffix, as in
--          lease_tokenbucket.lua
-- ARGV[12] q, the room a lease leaves: units beyond the decision's own
--          are leased only from the room above q (half a lease)
--
-- A lease never takes a key's last q units (half a lease): near its
-- limit the key is decided one request at a time, so that the units an
-- instance holds unused never starve another's request that the exact
-- counter would allow. At a steady demand within the quota the room
-- after the last lease only grows as its units are spent (they were
-- counted when leased, while the previous window's weight keeps falling),
-- so no request of at most q units is denied.
--
-- The caller grants leased units only until the window they were counted
-- in ends. Every unit allowed in a window is then counted in it, and the
-- estimate a local grant would see at its own time is at most the one the
-- lease was checked against: the previous window's weight only falls as
-- the window goes on, and everything counted since was checked in turn.
-- The caller's unused tail, counted here and never granted, is given back
-- to the window it was counted in, the current one or the one before:
-- the count of a closed window is then the units allowed in it, and its
-- weight on the current window's estimate is theirs alone. An older tail
-- weighs on nothing any more.
--
-- Reply: {allowed, prev, cur, now, got, returned}: got events were counted
-- (0 when denied), returned units given back; prev, cur and now as in
-- slidingcounter.lua.

local n, k = tonumber(ARGV[2]), tonumber(ARGV[3])
local limit, period = tonumber(ARGV[4]), tonumber(ARGV[5])
local s = rate_get(3, ARGV[10], '', '')
if type(s) == 'table' then
  return s
end
local w, now, start, prev, cur, leased = lease_counter_read(s, clock_us(ARGV[1]) - tonumber(ARGV[6]), period)

local returned = 0
if ARGV[8] ~= '' and tonumber(ARGV[8]) == w then
  returned = math.min(tonumber(ARGV[9]), cur)
  cur = cur - returned
  leased = math.max(0, leased - returned)
elseif ARGV[8] ~= '' and tonumber(ARGV[8]) == w - 1 then
  returned = math.min(tonumber(ARGV[9]), prev)
  prev = prev - returned
end

local room = limit - cur - share(prev, period - (now - start), period)
local got = 0
if room >= n then
  got = n + math.max(0, math.min(k - n, room - n - tonumber(ARGV[12])))
end
local allowed = 0
if got >= n and got > 0 then
  allowed = 1
  cur = cur + got
  leased = leased + got - n
else
  got = 0
end
if allowed == 1 or returned > 0 then
  lease_counter_save(w, now, start, period, prev, cur, leased, ARGV[7], ARGV[11])
end
return {allowed, prev, cur, now, got, returned}
