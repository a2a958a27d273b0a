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
-- ARGV[13] period in microseconds, ARGV[14] burst, and ARGV[15] the
--          strategy of a plan's decision ('0' KeepUsed, '1' ScaleUsed; ''
--          for any other), with which it converts a bucket of another
--          plan (plan_greedy)
--
-- ARGV[10] to ARGV[15] may be left out, and are then '' (ARGV[13] and
-- ARGV[14] unused): a plain decision under version 0 sends the first
-- nine alone, since it stamps no rate (its suffix is '') and so never
-- converts; and on the server's clock, where ARGV[8] and ARGV[9] are
-- both '0', the first seven alone. Each argument is a string the server
-- makes for the call.
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

local floor, ver, suffix = ARGV[8] or '0', ARGV[9] or '0', ARGV[10] or ''
local tat, frac, mark = now, 0, ''
local s, converted, prate, clear = redis.call('GET', KEYS[1]), false, nil, nil
if ver ~= '0' or (s and string.find(s, '|', 1, true)) then
  -- A changed rate, or a state that carries one (a plan's): rate_get
  -- checks the state's version and rate against the caller's. The rate
  -- helpers (prelude_rate.lua) go in here, made only on this path: a
  -- script's local functions are made anew on every run, and a plain
  -- decision needs none of them.
--@rate
  s, converted, prate = rate_get(2, ver, ARGV[11] or '', ARGV[12] or '', suffix, now, tonumber(ARGV[13]), floor, s)
  if type(s) == 'table' then
    return s
  end
  clear = rate_clear
elseif s == '' then
  -- Under version 0 a state without a rate is taken as it stands, as
  -- rate_get would take it, for the cost of one find; an empty one is none.
  s = nil
end
if s then
  -- A leasing limiter may have appended a lease mark (see
  -- lease_prelude_tokenbucket.lua): the end of the slots a lease may
  -- still allow units from, which a refund must not move the bucket
  -- below. A decision, which leasing instances send when they lease
  -- nothing, keeps it: dropped, a refund could free the slots of units
  -- an instance still holds. It lies at or before the arrival time, so
  -- it lasts as long as the state does.
  local a, b, m = string.match(s, '^(%d+) (%d+)(.*)$')
  a, b = tonumber(a), tonumber(b)
  if m ~= '' and string.match(m, '^ %d+ %d+$') then
    mark = m
  end
  -- A bucket whose arrival time has passed is full: start from now.
  if a >= now then
    tat, frac = a, b
  end
end
if prate then
  -- Written under another plan: converted here, as of now, by
  -- plan_greedy, made only here, where it is needed, since a script's
  -- local functions are created anew on every run. It converts a bucket
  -- whose arrival time is ahead + frac/L us after now, written under
  -- another plan's limit L and burst B of the same period P, to limit and
  -- burst B2, as strategy how says (0 KeepUsed, 1 ScaleUsed), with
  -- inherit.Greedy's arithmetic: the key has used u = (ahead*L + frac)/P
  -- tokens, and its new arrival time is how(u) times P/limit after now,
  -- rounded up to 1/limit us, held at 2^50 us. It returns that time as
  -- q + r/limit. The products pass 2^53, so they are taken on limbs of
  -- 2^24, least significant first.
  local function plan_greedy(ahead, frac, L, B, P, B2, how)
    local W = 16777216
    local function of(x)
      local t = {}
      while x > 0 do
        local l = x % W
        t[#t + 1] = l
        x = (x - l) / W
      end
      return t
    end
    -- a*m + c, for m and c at most 2^24
    local function mul(a, m, c)
      local t = {}
      for i = 1, #a do
        local p = a[i] * m + c
        t[i] = p % W
        c = (p - t[i]) / W
      end
      while c > 0 do
        t[#t + 1] = c % W
        c = (c - t[#t]) / W
      end
      return t
    end
    -- floor(a/d) and a mod d, for d at most 2^24
    local function div(a, d)
      local q, r = {}, 0
      for i = #a, 1, -1 do
        local x = r * W + a[i]
        r = x % d
        q[i] = (x - r) / d
      end
      while #q > 0 and q[#q] == 0 do
        q[#q] = nil
      end
      return q, r
    end
    local function less(a, b)
      if #a ~= #b then
        return #a < #b
      end
      for i = #a, 1, -1 do
        if a[i] ~= b[i] then
          return a[i] < b[i]
        end
      end
      return false
    end
    local x = mul(of(ahead), L, frac) -- u*P, which KeepUsed keeps
    if how == 1 then
      -- ceil(u*P*B2/B), but no more than max(u, B2)*P
      local s, r = div(mul(x, B2, 0), B)
      if r > 0 then
        s = mul(s, 1, 1)
      end
      local most = mul(of(P), B2, 0)
      if less(most, x) then
        most = x
      end
      if less(most, s) then
        s = most
      end
      x = s
    end
    local q, r = div(x, limit)
    local h = 0
    for i = #q, 1, -1 do
      h = h * W + q[i]
      if h >= 1125899906842624 then -- 2^50
        return 1125899906842624, 0
      end
    end
    return h, r
  end
  local q, r = 0, 0
  if tat > now or frac > 0 then
    q, r = plan_greedy(tat - now, frac, prate[1], prate[3], prate[2], tonumber(ARGV[14]), tonumber(ARGV[15]))
  end
  tat, frac, converted = now + q, r, true
end
if converted then
  -- Keep the conversion whatever this decision does.
  if tat > now or frac > 0 then
    redis.call('SET', KEYS[1], string.format('%d %d', tat, frac) .. suffix, 'PX', expiry_ms(tat - now + 1, floor))
  else
    clear(suffix, floor)
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
    -- equals a fresh one. expiry_ms, written out: this write is the
    -- common path of every plain decision, and on the server's clock
    -- (floor '0') the rounded-up milliseconds, at least 1, need no more.
    local ms = ttl % 1000
    ms = (ttl - ms) / 1000
    if ttl % 1000 > 0 then
      ms = ms + 1
    end
    if floor ~= '0' then
      ms = math.max(ms, tonumber(floor))
    end
    redis.call('SET', KEYS[1], string.format('%d %d', ntat, nfrac) .. mark .. suffix, 'PX', ms)
  end
  return {1, ntat - now, nfrac, 0, 0}
end
return {0, tat - now, frac, ahead - tauq, nfrac - taur}
