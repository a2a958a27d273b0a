-- The helpers of a limiter whose rate can change (see ratechange.go),
-- prepended after prelude.lua to the scripts of the token buckets and the
-- sliding counter, plain and leased.
--
-- A state written under a changed rate ends with its version and rate:
-- "<numbers>|v L P B". One without them was written before the first
-- change (version 0), except by a plan's decision (see plan.go), which
-- stamps its rate on version 0 too: "<numbers>|0 L P B". The numbers are
-- the algorithm's, and a leasing limiter's extras after them (see
-- lease_prelude_*.lua).

-- rate_versioned reports whether suffix is that of a changed rate
-- (version above 0), which an emptied key keeps.
local function rate_versioned(suffix)
  return suffix ~= nil and string.match(suffix, '^|[1-9]') ~= nil
end

-- rate_clear empties KEYS[1], written with suffix: a state of a changed
-- rate is left as its suffix alone, for floor milliseconds (see rate_get);
-- any other is deleted.
local function rate_clear(suffix, floor)
  if rate_versioned(suffix) then
    redis.call('SET', KEYS[1], suffix, 'PX', math.max(tonumber(floor), 1))
  else
    redis.call('DEL', KEYS[1])
  end
end

-- rate_get reads the state KEYS[1], of at least k numbers, for a caller
-- that decides under version ver, whose states end with suffix, at now,
-- with a period of period microseconds. It returns the numbers of the
-- state to decide on (nil: none), whether the caller's conversion
-- replaced it, and the rate {L, P, B} of a state written under this
-- version but another rate of the same period, which only a key whose
-- plan changed meets (nil otherwise): the caller converts that one itself,
-- as of now, as its plan says. Or, as its only result, a reply for the
-- caller: {-1} when the state was written under a newer version (the
-- caller reads the record again); {-2, numbers..., v, L, P, B} when under
-- an older one (the caller converts it as of the change, and sends the
-- state it saw as expect and the converted one as with); {-3, now,
-- numbers..., v, L, P, B} when under another plan's rate of another
-- period (the caller converts it as of now).
--
-- A conversion is taken only for the state it was computed from (expect)
-- and only under the view it was computed for: with ends with the suffix
-- of that view (the whole of with for a state equal to a fresh one), which
-- must be the caller's. A conversion computed under one view and sent
-- under another (its instance read a newer record meanwhile) is refused,
-- and the caller gets the state to convert again: the rate a decision
-- reads is the one its write is checked against.
--
-- suffix, now and period are nil for the callers that never convert (a
-- refund, a charge, a lease): they take a state of their version as it
-- is. s, when given, is KEYS[1]'s value as the caller read it (false for
-- none), which is then not read again.
--
-- An emptied key keeps its version: a state of a changed rate that would
-- be deleted is left as its suffix alone (rate_clear), and a decision
-- under a changed rate that meets no state, or the suffix of an older
-- version, leaves its own suffix (for floor milliseconds) before it
-- decides, so that a decision that writes nothing (a cost of 0, a
-- denial) is seen too. A key once decided under a version is so never
-- decided under an older one while an instance may still hold it: the
-- suffix lives as long as the state would, and at least floor (twice the
-- refresh interval, see rateView.minTTL).
local function rate_get(k, ver, expect, with, suffix, now, period, floor, s)
  if s == nil then
    s = redis.call('GET', KEYS[1])
  end
  ver = tonumber(ver)
  local body, rate = '', ''
  if s then
    body, rate = string.match(s, '^([^|]*)|?(.*)$')
  end
  local sv, sL, sP, sB = 0, 0, 0, 0
  if rate ~= '' then
    sv, sL, sP, sB = string.match(rate, '^(%d+) (%d+) (%d+) (%d+)$')
    if not sv then
      error('floodgate: malformed rate in state ' .. KEYS[1])
    end
    sv = tonumber(sv)
  end
  if body == '' then
    -- No state, or an emptied one: nothing to convert, under any rate.
    if sv > ver then
      return {-1}
    end
    if floor and sv < ver and rate_versioned(suffix) then
      redis.call('SET', KEYS[1], suffix, 'PX', math.max(tonumber(floor), 1))
    end
    return nil, false
  end
  local code = -2
  if sv == ver then
    -- Another rate under the same version: a plan's decision on a key
    -- last decided under another plan. A state without a rate, or a
    -- caller that stamps none (version 0 outside a plan), takes it as it
    -- is.
    if not now or rate == '' or suffix == '' or suffix == '|' .. rate then
      return body, false
    end
    if tonumber(sP) == period then
      return body, false, {tonumber(sL), tonumber(sP), tonumber(sB)}
    end
    code = -3
  end
  if expect ~= '' and s == expect then
    local wbody, wrate = string.match(with, '^([^|]*)(.*)$')
    if wrate == suffix and suffix ~= '' then
      if wbody == '' then
        return nil, true
      end
      return wbody, true
    end
  end
  if sv > ver then
    return {-1}
  end
  local reply = {code}
  if code == -3 then
    reply[2] = now
  end
  local head = #reply
  for x in string.gmatch(body, '%d+') do
    reply[#reply + 1] = tonumber(x)
  end
  if #reply < head + k then
    error('floodgate: malformed state in ' .. KEYS[1])
  end
  reply[#reply + 1] = sv
  reply[#reply + 1] = tonumber(sL)
  reply[#reply + 1] = tonumber(sP)
  reply[#reply + 1] = tonumber(sB)
  return reply
end

-- rate_units returns the units a key that used u (below 2^53) of
-- capacity c keeps under capacity c2 (both at most 2^24) when its plan
-- changes, as strategy how says: 0 KeepUsed, u; 1 ScaleUsed,
-- ceil(u*c2/c) but no more than max(u, c2) (inherit.Strategy.Units). The
-- product may pass 2^53, where doubles stop being exact, so u is split at
-- 2^24.
local function rate_units(how, u, c, c2)
  if how ~= 1 then
    return u
  end
  local W = 16777216
  local ul = u % W
  local uh = (u - ul) / W
  local hi = uh * c2 -- below 2^53
  local rh = hi % c
  local lo = rh * W + ul * c2 -- below 2^49
  local q = (hi - rh) / c * W + floordiv(lo, c)
  if lo % c > 0 then
    q = q + 1
  end
  return math.min(q, math.max(u, c2))
end
