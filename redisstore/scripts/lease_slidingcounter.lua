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
-- ARGV[8]  the window of the caller's previous lease, "" for none
-- ARGV[9]  m, the units of its unused tail to give back
-- ARGV[10], ARGV[11] the rate's version and suffix, as in
--          lease_tokenbucket.lua
--
-- The caller grants leased units only until the window they were counted
-- in ends. Every unit allowed in a window is then counted in it, and the
-- estimate a local grant would see at its own time is at most the one the
-- lease was checked against: the previous window's weight only falls as
-- the window goes on, and everything counted since was checked in turn.
-- The caller's unused tail, counted here and never granted, is given back
-- when it belongs to the current window.
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
end

local got = math.min(k, limit - cur - share(prev, period - (now - start), period))
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
