-- Charges events beyond what the estimate has room for (floodgate.Charger),
-- as floodgate.SlidingCounter.ChargeN does: the current window counts up
-- to the limit (or what it held, after a downgrade), the rest is carried
-- into the windows after it, the limit to each. The state then names the
-- debt's last window, its count, and the window before, full; the
-- counter's decision holds its time there (counter_windows) and counts
-- every window until then as full.
--
-- KEYS[1]  the counter, as in slidingcounter.lua
-- ARGV[1]  now in microseconds, or "" to read the server's TIME
-- ARGV[2]  n
-- ARGV[3]  period in microseconds
-- ARGV[4]  origin of the fixed windows in microseconds
-- ARGV[5]  maxcount: the most a window counts (2^30)
-- ARGV[6]  the shortest expiry in milliseconds (see WithClock)
-- ARGV[7], ARGV[8] the rate's version and suffix (prelude_rate.lua)
-- ARGV[9]  limit
-- ARGV[10] the most windows a debt reaches past now's (WithMaxDebt)
-- ARGV[11] the state the caller converted, or "", and
-- ARGV[12] the converted state followed by the suffix of the view it was
--          converted for, as ARGV[9] and ARGV[10] of slidingcounter.lua:
--          a charge converts counts of an older rate in its own round
--          trip, as a decision does
--
-- Reply: {cur, capped}: capped is 1 if the debt stopped at its bound
-- (floodgate.ErrDebtCapped). Or a reply of rate_get, without charging.

local period = tonumber(ARGV[3])
local limit, periods = tonumber(ARGV[9]), tonumber(ARGV[10])
-- The charge always writes: a conversion it was sent is kept with it.
local s = rate_get(3, ARGV[7], ARGV[11], ARGV[12], ARGV[8], nil, nil, ARGV[6])
if type(s) == 'table' then
  return s
end
local real = clock_us(ARGV[1]) - tonumber(ARGV[4])
local w, now, start, prev, cur = counter_windows(s, real, period)
local rw = floordiv(real, period) -- now's window; w is later for a debt carried ahead
local total = cur + tonumber(ARGV[2])
local full = math.max(limit, cur)
local capped = 0
if total <= full then
  cur = math.min(total, tonumber(ARGV[5]))
else
  local over = total - full
  local k = floordiv(over + limit - 1, limit) -- windows more, at least one
  local most = math.max(rw + periods - w, 0)
  local rem = over - (k - 1) * limit
  if k > most then
    k, rem, capped = most, limit, 1
  end
  if k == 0 then
    cur = full
  elseif k == 1 then
    w, prev, cur = w + 1, full, rem
  else
    w, prev, cur = w + k, limit, rem
  end
end
counter_save(w, real, w * period, period, prev, cur, ARGV[6], ARGV[8])
return {cur, capped}
