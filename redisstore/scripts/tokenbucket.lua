-- GCRA token bucket: one decision, atomically.
--
-- KEYS[1]  the bucket: "tat frac", the theoretical arrival time as integer
--          microseconds plus frac/limit of a microsecond (0 <= frac < limit)
-- ARGV[1]  now in microseconds, or "" to read the server's TIME
-- ARGV[2]  n, the cost (0 reports without consuming)
-- ARGV[3]  incq, ARGV[4] incr: n*period/limit = incq + incr/limit us
-- ARGV[5]  tauq, ARGV[6] taur: burst*period/limit = tauq + taur/limit us
-- ARGV[7]  limit
-- ARGV[8]  the shortest expiry in milliseconds (see WithClock)
-- ARGV[9]  the version of the rate the caller decides under, and
-- ARGV[10] what follows the numbers of a state written under it
-- ARGV[11] the state the caller converted, or "", and
-- ARGV[12] the converted state followed by the suffix of the view it was
--          converted for (the suffix alone: a full bucket), taken only
--          if that is ARGV[10] (prelude_rate.lua)
--
-- Every number stays an integer below 2^53 (checked by the caller's bounds),
-- so Lua's doubles hold it exactly; the caller does every multiplication
-- and division, the script only adds and compares.
--
-- Reply: {allowed, owed, frac, wait, wfrac}: after the decision the bucket
-- is full again in owed + frac/limit us; when denied the request fits in
-- wait + wfrac/limit us (wfrac may be negative: the caller borrows). Or
-- a reply of rate_get, without deciding.

local now = clock_us(ARGV[1])
local n = tonumber(ARGV[2])
local incq, incr = tonumber(ARGV[3]), tonumber(ARGV[4])
local tauq, taur = tonumber(ARGV[5]), tonumber(ARGV[6])
local limit = tonumber(ARGV[7])

local tat, frac = now, 0
local s, converted = rate_get(2, ARGV[9], ARGV[11], ARGV[12], ARGV[10], now)
if type(s) == 'table' then
  return s
end
if s then
  -- A leasing limiter may have appended a lease mark (see
  -- lease_tokenbucket.lua); this script keeps only "tat frac".
  local a, b = string.match(s, '^(%d+) (%d+)')
  a, b = tonumber(a), tonumber(b)
  -- A bucket whose arrival time has passed is full: start from now.
  if a >= now then
    tat, frac = a, b
  end
end
if converted then
  -- Keep the conversion whatever this decision does.
  if tat > now or frac > 0 then
    redis.call('SET', KEYS[1], string.format('%d %d', tat, frac) .. ARGV[10], 'PX', expiry_ms(tat - now + 1, ARGV[8]))
  else
    redis.call('DEL', KEYS[1])
  end
end

local ntat, nfrac = tat + incq, frac + incr
if nfrac >= limit then
  ntat, nfrac = ntat + 1, nfrac - limit
end
local ahead = ntat - now
-- A report is allowed even above a downgraded burst (see SetRate).
if n == 0 or ahead < tauq or (ahead == tauq and nfrac <= taur) then
  if n > 0 then
    local ttl = ntat - now
    if nfrac > 0 then
      ttl = ttl + 1
    end
    -- The key vanishes when the bucket is full again: its state then
    -- equals a fresh one.
    redis.call('SET', KEYS[1], string.format('%d %d', ntat, nfrac) .. ARGV[10], 'PX', expiry_ms(ttl, ARGV[8]))
  end
  return {1, ntat - now, nfrac, 0, 0}
end
return {0, tat - now, frac, ahead - tauq, nfrac - taur}
