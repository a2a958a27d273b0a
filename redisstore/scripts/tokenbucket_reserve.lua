-- GCRA token bucket, booking ahead (floodgate.Reserver): decides as
-- tokenbucket.lua, and books a request that does not fit now but whose
-- turn comes within maxwait: its tokens are taken, the theoretical
-- arrival time moves on as for an allowed one, and the caller waits
-- until its turn.
--
-- KEYS[1]  the bucket, as in tokenbucket.lua
-- ARGV[1]..ARGV[8] as in tokenbucket.lua
-- ARGV[9]  maxwait in microseconds (the caller bounds it by 2^50)
-- ARGV[10] the version of the rate the caller decides under, and
-- ARGV[11] what follows the numbers of a state written under it
-- ARGV[12] the state the caller converted, or "", and
-- ARGV[13] the converted state followed by the suffix of the view it was
--          converted for, as ARGV[11] and ARGV[12] of tokenbucket.lua: a
--          booking converts a bucket of an older rate in its own round
--          trip, as a decision does, never through another decision
--          under another view
--
-- Reply: {code, owed, frac, wait, wfrac} as tokenbucket.lua's, code 1
-- allowed at once, 2 booked (wait + wfrac/limit us is the wait), 0
-- denied. Or a reply of rate_get, without deciding.

local now = clock_us(ARGV[1])
local n = tonumber(ARGV[2])
local incq, incr = tonumber(ARGV[3]), tonumber(ARGV[4])
local tauq, taur = tonumber(ARGV[5]), tonumber(ARGV[6])
local limit = tonumber(ARGV[7])
local maxwait = tonumber(ARGV[9])

local tat, frac = now, 0
local s, converted = rate_get(2, ARGV[10], ARGV[12], ARGV[13], ARGV[11], nil, nil, ARGV[8])
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
if converted then
  -- Keep the conversion whatever this booking does.
  if tat > now or frac > 0 then
    redis.call('SET', KEYS[1], string.format('%d %d', tat, frac) .. ARGV[11], 'PX', expiry_ms(tat - now + 1, ARGV[8]))
  else
    rate_clear(ARGV[11], ARGV[8])
  end
end

local ntat, nfrac = tat + incq, frac + incr
if nfrac >= limit then
  ntat, nfrac = ntat + 1, nfrac - limit
end
local ahead = ntat - now
local code = 0
if ahead < tauq or (ahead == tauq and nfrac <= taur) then
  code = 1
else
  -- The wait, rounded up to the microsecond, against maxwait.
  local wait = ahead - tauq
  if nfrac > taur then
    wait = wait + 1
  end
  if wait <= maxwait then
    code = 2
  end
end
if code == 0 then
  return {0, tat - now, frac, ahead - tauq, nfrac - taur}
end
if n > 0 then
  local ttl = ntat - now
  if nfrac > 0 then
    ttl = ttl + 1
  end
  redis.call('SET', KEYS[1], string.format('%d %d', ntat, nfrac) .. ARGV[11], 'PX', expiry_ms(ttl, ARGV[8]))
end
return {code, ntat - now, nfrac, ahead - tauq, nfrac - taur}
