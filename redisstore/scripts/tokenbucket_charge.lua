-- Charges tokens beyond what the bucket holds (floodgate.Charger): the
-- theoretical arrival time moves on by n*period/limit whatever the bucket
-- holds, so the bucket may go into debt; it saturates cap us past now
-- rather than grow without bound.
--
-- KEYS[1]  the bucket, as in tokenbucket.lua
-- ARGV[1]  now in microseconds, or "" to read the server's TIME
-- ARGV[2]  incq, ARGV[3] incr: n*period/limit = incq + incr/limit us
--          (the caller caps incq at cap)
-- ARGV[4]  limit
-- ARGV[5]  cap, in microseconds: how far past now the debt may reach
-- ARGV[6]  the shortest expiry in milliseconds (see WithClock)
-- ARGV[7], ARGV[8] the rate's version and suffix (prelude_rate.lua)
-- ARGV[9]  the state the caller converted, or "", and
-- ARGV[10] the converted state followed by the suffix of the view it was
--          converted for, as ARGV[11] and ARGV[12] of tokenbucket.lua: a
--          charge converts a bucket of an older rate in its own round
--          trip, as a decision does
--
-- Every number stays below 2^53: now < 2^52, a stored arrival time at
-- most cap (2^51) past its now, plus incq <= cap.
--
-- Reply: {owed, capped}: the microseconds until the bucket is full
-- again, and 1 if the debt stopped at cap (floodgate.ErrDebtCapped). Or a
-- reply of rate_get, without charging.

local now = clock_us(ARGV[1])
local limit, cap = tonumber(ARGV[4]), tonumber(ARGV[5])
local tat, frac = now, 0
-- The charge always writes: a conversion it was sent is kept with it.
local s = rate_get(2, ARGV[7], ARGV[9], ARGV[10], ARGV[8], nil, nil, ARGV[6])
if type(s) == 'table' then
  return s
end
if s then
  local a, b = string.match(s, '^(%d+) (%d+)')
  a, b = tonumber(a), tonumber(b)
  if a >= now then
    tat, frac = a, b
  end
end
local before = tat
tat, frac = tat + tonumber(ARGV[2]), frac + tonumber(ARGV[3])
if frac >= limit then
  tat, frac = tat + 1, frac - limit
end
local capped = 0
if tat - now > cap or (tat - now == cap and frac > 0) then
  capped = 1
end
if tat - now >= cap then
  -- Saturated, never lowered: a debt beyond a cap lowered since stays.
  tat, frac = math.max(now + cap, before), 0
end
local ttl = tat - now
if frac > 0 then
  ttl = ttl + 1
end
redis.call('SET', KEYS[1], string.format('%d %d', tat, frac) .. ARGV[8], 'PX', expiry_ms(ttl, ARGV[6]))
return {ttl, capped}
