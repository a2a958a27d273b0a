-- Leased token bucket: n units now and up to k - n more for the caller to
-- grant locally, in one atomic step.
--
-- KEYS[1]  the bucket "tat frac", shared with the plain script, and the
--          lease mark (lease_prelude_tokenbucket.lua)
-- ARGV[1]  now in microseconds, or "" to read the server's TIME
-- ARGV[2]  n, the units wanted now; 0 for a lease taken ahead of need,
--          which takes nothing when nothing fits
-- ARGV[3]  k, the units wanted in all (n <= k <= burst)
-- ARGV[4]  tq, ARGV[5] tr: the emission interval T = tq + tr/limit us
-- ARGV[6]  tauq, ARGV[7] taur: burst*T
-- ARGV[8]  limit
-- ARGV[9]  the shortest expiry in milliseconds (see WithClock)
-- ARGV[10] hold: place the lease's slots at least this many us ahead
-- ARGV[11], ARGV[12]  the end of the caller's previous lease, "" for none
-- ARGV[13], ARGV[14]  m*T, the slots of its unused tail to give back
-- ARGV[15] the version of the rate, ARGV[16] what follows the numbers of
--          a state written under it (prelude_rate.lua); a state of
--          another version gets rate_get's reply, and nothing is leased
--
-- GCRA gives every unit a slot of length T on one timeline, after the
-- slots already given. The caller may grant leased unit j only up to the
-- start of its slot (it learns where they start), so that every unit ever
-- allowed, here or by any instance, starts its slot no earlier than it was
-- allowed and ends it no later than tau after: any interval of length d
-- then holds at most burst + d/T allowed units, the exact bucket's bound.
--
-- The tail is given back only while the bucket's arrival time is still
-- that lease's end: then no slot was handed out after it, and the tail's
-- slots, never granted, are the last ones.
--
-- Reply: {allowed, got, owedq, owedr, waitq, waitr, firstq, firstr,
-- endq, endr, returned, aheadq, aheadr}: got units were taken (n of them
-- for now); the bucket is full again in owed us; when denied the request
-- fits in wait us (waitr may be negative: the caller borrows); the slots
-- of the units taken start first us from now, one every T; end is the new arrival
-- time, absolute; the lease was placed ahead us later than it could have
-- been (hold), a span no unit will use.

local now = clock_us(ARGV[1])
local n, k = tonumber(ARGV[2]), tonumber(ARGV[3])
local tq, tr = tonumber(ARGV[4]), tonumber(ARGV[5])
local tauq, taur = tonumber(ARGV[6]), tonumber(ARGV[7])
local limit = tonumber(ARGV[8])
local hold = tonumber(ARGV[10])

local s = rate_get(2, ARGV[15], '', '')
if type(s) == 'table' then
  return s
end
local bq, br = now, 0
local sq, sr, wq, wr = tb_read(s)
if sq and sq >= now then
  bq, br = sq, sr
end

local returned = 0
if ARGV[11] ~= '' and sq and sq == tonumber(ARGV[11]) and sr == tonumber(ARGV[12]) then
  bq, br = p_sub(sq, sr, tonumber(ARGV[13]), tonumber(ARGV[14]), limit)
  if bq < now then
    bq, br = now, 0
  end
  returned = 1
  if wq and wq == sq and wr == sr then
    wq, wr = bq, br
  end
end

-- fit returns the largest j <= k with s + j*T - now <= tau: an estimate in
-- doubles, then corrected with exact pairs.
local lq, lr = p_add(now, 0, tauq, taur, limit)
local function fit(s_q, s_r)
  if not p_le(s_q, s_r, lq, lr) then
    return 0
  end
  local aq, ar = p_sub(lq, lr, s_q, s_r, limit)
  local j = math.floor((aq + ar / limit) / (tq + tr / limit))
  j = math.max(0, math.min(j, k))
  while j > 0 do
    local xq, xr = p_mul(j, tq, tr, limit)
    if p_le(xq, xr, aq, ar) then
      break
    end
    j = j - 1
  end
  while j < k do
    local xq, xr = p_mul(j + 1, tq, tr, limit)
    if not p_le(xq, xr, aq, ar) then
      break
    end
    j = j + 1
  end
  return j
end

local startq, startr = bq, br
if hold > 0 and bq < now + hold then
  startq, startr = now + hold, 0
end
local got = fit(startq, startr)
if got < n and startq ~= bq then
  startq, startr = bq, br
  got = fit(bq, br)
end

if got < n or got == 0 then
  if returned == 1 then
    tb_write(bq, br, wq, wr, now, tq, tr, limit, ARGV[9], ARGV[16])
  end
  local nq, nr = p_mul(n, tq, tr, limit)
  local aq, ar = p_add(bq, br, nq, nr, limit)
  return {0, 0, bq - now, br, aq - now - tauq, ar - taur, 0, 0, 0, 0, returned, 0, 0}
end

local kq, kr = p_mul(got, tq, tr, limit)
local eq, er = p_add(startq, startr, kq, kr, limit)
if got > n then
  wq, wr = eq, er
end
tb_write(eq, er, wq, wr, now, tq, tr, limit, ARGV[9], ARGV[16])
local gq, gr = p_sub(startq, startr, bq, br, limit)
return {1, got, eq - now, er, 0, 0, startq - now, startr, eq, er, returned, gq, gr}
