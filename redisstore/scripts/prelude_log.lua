-- The weighted sliding log's helpers, prepended after prelude.lua.
--
-- A client's log is one sorted set, KEYS[1], so that it is evicted,
-- migrated between Cluster nodes and expired as a whole:
--
--   one member per recorded decision, scored by its time in integer
--   microseconds and named by the running total of the units recorded up
--   to and including it (modulo 2^48, in decimal). Times strictly increase
--   with totals: a decision at the time of the newest entry is merged into
--   it, and a clock that steps back is held at the newest entry's time.
--
--   the member 'low', scored -1 - low: low is the running total just
--   before the oldest unit the log still counts. Its negative score keeps
--   it out of every time range and first by rank.
--
--   once the rate has changed (see ratechange.go), or when a plan's
--   decision wrote it (AllowPlanN), the member 'v <version> <limit>
--   <period>', scored LOG_VSCORE, below 'low': the rate the log was
--   written under. A log without it was written before the first change,
--   outside a plan.
--
--   a debt carried into the coming windows (ChargeN, as
--   floodgate.SlidingLog keeps it): the newest member, scored LOG_DEBT,
--   after every time, and named by the running total like an entry. Its
--   units are dated a window at a time after the entry before it, the
--   anchor: the first limit units one period after it, the next limit a
--   period later, and so on. Once the anchor has aged out, log_open
--   settles the debt: the window now falls in becomes a real entry, the
--   new anchor, and the windows before it are gone.
--
-- An entry counts the units between its predecessor's total (or low) and
-- its own. It is dead once its total is at or below low: low moves up to
-- the total of the newest entry that aged out (time <= now - period), and
-- by the units WithCountDenied drops. The log counts top - low units, top
-- being the newest total, so no decision sums entries: finding where the
-- aged entries end is one ZCOUNT, and the entry at which a denied request
-- fits a binary search over ranks. Dead entries are removed at most
-- LOG_SWEEP at a time, by the calls that record, and a log whose entries
-- are all dead is unlinked (freed off the main thread). Every call thus
-- runs O(log^2 N + LOG_SWEEP) work for the N <= limit + 1 entries of its
-- key, whatever the cost n.

local LOG_MOD = 281474976710656 -- 2^48
local LOG_SWEEP = 16
local LOG_VSCORE = -1125899906842624 -- -2^50, below every score of 'low'
-- LOG_MAX bounds the units a log's entries count: the largest limit a log
-- takes, which a log may count after its limit was lowered (see
-- SetRate); LOG_DEBT_MAX the units it carries ahead (2^30, as in memory).
local LOG_MAX = 65536
local LOG_DEBT_MAX = 1073741824
local LOG_DEBT = 9007199254740991 -- 2^53 - 1: a debt's score, after every time

-- log_diff returns a - b modulo 2^48 as a signed number: totals a log
-- holds at once span far less than 2^47.
local function log_diff(a, b)
  local d = (a - b) % LOG_MOD
  if d > LOG_MOD / 2 then
    d = d - LOG_MOD
  end
  return d
end

-- log_at returns the total and the time of the entry at rank r.
local function log_at(r)
  local e = redis.call('ZRANGE', KEYS[1], r, r, 'WITHSCORES')
  local total = tonumber(e[1])
  if not total then
    error('floodgate: malformed sliding log entry in ' .. KEYS[1])
  end
  return total, tonumber(e[2])
end

-- log_tail reads the newest member into L: top and last (its total and
-- time), and if it is a debt carried ahead, debt (its units), anchor and
-- atotal (the entry before it: its time and total), last being then the
-- anchor's time.
local function log_tail(L)
  L.top, L.last = log_at(-1)
  L.debt = 0
  if L.last == LOG_DEBT then
    L.atotal, L.anchor = log_at(-2)
    L.debt, L.last = log_diff(L.top, L.atotal), L.anchor
  end
end

-- log_versioned reports whether vname names a changed rate (version
-- above 0), whose member an emptied log keeps.
local function log_versioned(vname)
  return vname ~= nil and string.match(vname, '^v [1-9]') ~= nil
end

-- log_empty empties the log (UNLINK frees a large set off the main
-- thread) but for the member vname of a changed rate, kept for ms
-- milliseconds, so that the key is never decided again under an older
-- version while an instance may hold one (see rate_get in
-- prelude_rate.lua). It returns the members left (0 or 1).
local function log_empty(vname, ms)
  redis.call('UNLINK', KEYS[1])
  if not log_versioned(vname) or ms <= 0 then
    return 0
  end
  redis.call('ZADD', KEYS[1], LOG_VSCORE, vname)
  redis.call('PEXPIRE', KEYS[1], ms)
  return 1
end

-- log_settle brings a debt carried ahead up to now, once its anchor has
-- aged out: the windows dated at or before now - period are gone, the one
-- now falls in becomes a real entry (the new anchor), and the rest stays
-- ahead of it. Every entry before is then dead: low moves past them, and
-- the log must be saved (L.dirty) even by a call that records nothing.
local function log_settle(L, now, period, limit)
  local m = floordiv(now - L.anchor, period)
  if m > floordiv(L.debt + limit - 1, limit) then
    -- Every window has aged out.
    local m = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', LOG_VSCORE, 'LIMIT', 0, 1)[1]
    local keep = log_empty(m, redis.call('PTTL', KEYS[1]))
    L.off, L.count, L.low, L.top, L.last, L.debt = keep, 0, 0, 0, 0, 0
    return
  end
  local gone = (m - 1) * limit
  local cur = math.min(L.debt - gone, limit)
  local rest = L.debt - gone - cur
  local at = L.anchor + m * period
  L.low = (L.top - rest - cur) % LOG_MOD
  local total = (L.low + cur) % LOG_MOD
  redis.call('ZADD', KEYS[1], at, string.format('%d', total)) -- the debt's own member, when nothing is left ahead
  L.count = redis.call('ZCARD', KEYS[1]) - L.off
  L.last, L.debt, L.dirty = at, rest, true
  if rest > 0 then
    L.anchor, L.atotal = at, total
  end
end

-- log_open reads the log at now and returns its state: off (1 if 'low' is
-- there, the rank of the oldest entry), count (entries, dead or not), low,
-- top and last (the newest entry's total and time), a debt carried ahead
-- (see log_tail), settled (log_settle), aged (the entries aged out), used
-- (units counted) and now (held at last if the clock stepped back). A log
-- without its 'low' member (nothing but a hand edit removes it alone)
-- counts as full: an upper bound of what it held.
local function log_open(now, period, limit)
  local L = {off = 0, count = 0, low = 0, top = 0, last = 0, aged = 0, used = 0, now = now, debt = 0}
  if redis.call('ZCOUNT', KEYS[1], '-inf', LOG_VSCORE) > 0 then
    L.off = 1
  end
  local m = redis.call('ZSCORE', KEYS[1], 'low')
  if m then
    L.off, L.low = L.off + 1, -1 - tonumber(m)
  end
  L.count = redis.call('ZCARD', KEYS[1]) - L.off
  if L.count <= 0 then
    L.count, L.top = 0, L.low
    return L
  end
  log_tail(L)
  if not m then
    L.low = (L.top - limit) % LOG_MOD
  end
  L.now = math.max(now, L.last)
  if L.debt > 0 and L.anchor <= L.now - period then
    log_settle(L, L.now, period, limit)
    if L.count <= 0 then
      L.count, L.top = 0, L.low
      return L
    end
  end
  L.aged = redis.call('ZCOUNT', KEYS[1], 0, L.now - period)
  if L.aged > 0 then
    local t = log_at(L.off + L.aged - 1)
    if log_diff(t, L.low) > 0 then
      L.low = t
    end
  end
  -- A log's entries count at most limit units, or up to LOG_MAX after its
  -- limit was lowered (see SetRate), and it carries at most LOG_DEBT_MAX
  -- ahead.
  L.used = math.min(math.max(log_diff(L.top, L.low), 0), LOG_MAX + LOG_DEBT_MAX)
  return L
end

-- log_end returns when the newest unit L counts ages out: its newest
-- entry's time, or a debt's last window's, plus period.
local function log_end(L, period, limit)
  if L.debt > 0 then
    return L.anchor + floordiv(L.debt + limit - 1, limit) * period + period
  end
  return L.last + period
end

-- log_clear empties a log whose entries are all dead, before a record:
-- UNLINK frees a large set off the main thread.
local function log_clear(L)
  if L.count > 0 and L.used == 0 then
    redis.call('UNLINK', KEYS[1])
    L.off, L.count, L.low, L.top, L.aged, L.debt = 0, 0, 0, 0, 0, 0
  end
end

-- log_record records w units at L.now, merged into the newest entry if it
-- has that time.
local function log_record(L, w)
  local total = (L.top + w) % LOG_MOD
  if L.count > 0 and L.last == L.now then
    redis.call('ZREM', KEYS[1], string.format('%d', L.top))
  else
    L.count = L.count + 1
  end
  redis.call('ZADD', KEYS[1], L.now, string.format('%d', total))
  L.top, L.last, L.used = total, L.now, L.used + w
end

-- log_reaching returns the rank of the oldest entry with which the log
-- counts at least need units (need <= used), by binary search over the
-- entries that have not aged out.
local function log_reaching(L, need)
  local lo, hi = L.off + L.aged, L.off + L.count - 1
  while lo < hi do
    local mid = floordiv(lo + hi, 2)
    if log_diff(log_at(mid), L.low) >= need then
      hi = mid
    else
      lo = mid + 1
    end
  end
  return lo
end

-- log_expiry returns when the need-th oldest unit the log counts ages out
-- (need in 1..used): the expiry of the first entry whose running total
-- reaches it, or, for a unit of a debt carried ahead, of its window.
local function log_expiry(L, need, period, limit)
  local _, at = log_at(log_reaching(L, need))
  if at == LOG_DEBT then
    local before = log_diff(L.atotal, L.low)
    at = L.anchor + floordiv(need - before + limit - 1, limit) * period
  end
  return at + period
end

-- log_debt_add adds w units to the debt carried ahead.
local function log_debt_add(L, w)
  redis.call('ZREM', KEYS[1], string.format('%d', L.top))
  L.top = (L.top + w) % LOG_MOD
  redis.call('ZADD', KEYS[1], LOG_DEBT, string.format('%d', L.top))
  L.debt, L.used = L.debt + w, L.used + w
end

-- log_save writes the log back after a call that recorded or refunded:
-- it removes up to LOG_SWEEP dead entries from the front, stores low and
-- the rate's member vname ('' before any change), and sets the key to
-- vanish when the newest entry leaves the window. It returns that wait in
-- microseconds (0 for an empty log, unlinked but for the member of a
-- changed rate, kept for floor: see log_empty).
local function log_save(L, period, floor, vname, limit)
  if L.used <= 0 then
    log_empty(vname, expiry_ms(0, floor))
    return 0
  end
  local es = redis.call('ZRANGE', KEYS[1], L.off, L.off + LOG_SWEEP - 1)
  local dead = 0
  while dead < #es and log_diff(tonumber(es[dead + 1]), L.low) <= 0 do
    dead = dead + 1
  end
  if dead > 0 then
    redis.call('ZREMRANGEBYRANK', KEYS[1], L.off, L.off + dead - 1)
  end
  redis.call('ZADD', KEYS[1], -1 - L.low, 'low')
  if vname ~= '' and redis.call('ZSCORE', KEYS[1], vname) == false then
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', LOG_VSCORE)
    redis.call('ZADD', KEYS[1], LOG_VSCORE, vname)
  end
  local reset = log_end(L, period, limit) - L.now
  redis.call('PEXPIRE', KEYS[1], expiry_ms(reset, floor))
  return reset
end

-- log_units returns the units a log that counted u of limit c keeps under
-- limit c2, as strategy how says (floodgate.Inherit; inherit.Units).
local function log_units(how, u, c, c2)
  if how == 0 then
    return u
  elseif how == 1 then
    return math.min(floordiv(u * c2 + c - 1, c), math.max(u, c2))
  elseif how == 2 then
    if c2 >= c then
      return u
    end
    return u - math.min(u, c - c2)
  end
  return 0
end

-- log_gain returns what the newest units of a log that counted used of
-- limit c, cur of them newest, gain under c2: the most any count from cur
-- to used would (inherit.Strategy.Gain), which keeps the order of logs
-- (see floodgate.SlidingLog's convertUnits).
local function log_gain(how, used, cur, c, c2)
  local function gain(t)
    local v = log_units(how, t, c, c2)
    return v - math.min(t, v)
  end
  return math.max(gain(used), gain(math.min(used, math.max(cur, c))))
end

-- log_fold folds the real entries of L, a log carrying a debt ahead, into
-- one at L.now (the change's time, or its newest entry's if that is
-- later), the debt's anchor from then on, as floodgate.SlidingLog's
-- reanchor does under a new Limit or Period: the debt's windows of the
-- new rate are dated from the change, not from the log's past. Cut from
-- an older anchor, a debt that counted more would end sooner than one
-- that counted less. Every unit is dated no earlier than it was. It runs
-- only for a log in debt meeting a change of Limit or Period: O(N) for
-- its N <= limit + 2 entries.
local function log_fold(L)
  redis.call('ZREMRANGEBYRANK', KEYS[1], L.off, L.off + L.count - 1)
  redis.call('ZADD', KEYS[1], L.now, string.format('%d', L.atotal))
  redis.call('ZADD', KEYS[1], LOG_DEBT, string.format('%d', L.top))
  L.count, L.aged, L.anchor, L.last = 2, 0, L.now, L.now
end

-- log_rate brings the log to the rate version ver (see ratechange.go):
-- it returns {-1} for the caller when the log was written under a newer
-- version, and otherwise converts a log written under an older one, as
-- of the change's time tc, from the rate its member names (the initial
-- rate iL, iP before the first change) to limit, period, as how says:
-- the events still counted at tc keep counting until their time plus the
-- new period; units are taken from the oldest events, or added to the
-- newest, at least what any count from its units to the whole would gain
-- (log_gain), taken back from the oldest if the whole gains less, as in
-- memory (see floodgate.SlidingLog.SetRate). A log carrying a debt ahead
-- keeps every unit; under a new limit or period it is first folded at tc
-- (log_fold), and under a new period its debt then ends no sooner than it
-- did. StartFresh forgets the log, debt and all. A plan's decision (phow
-- the strategy of its plan changes, '0' KeepUsed or '1' ScaleUsed; nil
-- otherwise) also converts a log of its version written under another
-- rate, another plan's, the same way as of now.
local function log_rate(ver, vname, tc, how, iL, iP, limit, period, floor, phow, now)
  ver = tonumber(ver)
  local m = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', LOG_VSCORE, 'LIMIT', 0, 1)
  local sv, sL, sP = 0, tonumber(iL), tonumber(iP)
  if m[1] then
    sv, sL, sP = string.match(m[1], '^v (%d+) (%d+) (%d+)$')
    if not sv then
      error('floodgate: malformed sliding log rate in ' .. KEYS[1])
    end
    sv, sL, sP = tonumber(sv), tonumber(sL), tonumber(sP)
  end
  local plan = sv == ver and phow and phow ~= '' and (sL ~= limit or sP ~= period)
  if sv == ver and not plan then
    return nil
  end
  if redis.call('EXISTS', KEYS[1]) == 0 then
    -- A call under a changed rate leaves its version on a key it finds
    -- empty, even if it writes nothing (see log_empty).
    if log_versioned(vname) then
      log_empty(vname, expiry_ms(0, floor))
    end
    return nil
  end
  if plan then
    tc, how = now, phow
  elseif sv > ver then
    return {-1}
  end
  local L = log_open(tonumber(tc), sP, sL)
  how = tonumber(how)
  if how == 3 then
    -- StartFresh forgets the log, a debt carried ahead too, as in memory.
    L.used = 0
    log_save(L, period, floor, vname, limit)
    return nil
  end
  local fin = 0 -- when a debt carried ahead ends under the old rate
  if L.debt > 0 then
    fin = log_end(L, sP, sL)
    if limit ~= sL or period ~= sP then
      log_fold(L)
    end
  end
  if period < sP and L.count > 0 then
    -- Events that age out under the new period are gone at once; a debt
    -- carried ahead keeps its anchor.
    local aged = redis.call('ZCOUNT', KEYS[1], 0, L.now - period)
    if L.debt > 0 then
      aged = math.min(aged, L.count - 2)
    end
    if aged > L.aged then
      L.low = log_at(L.off + aged - 1)
      L.aged, L.used = aged, math.max(log_diff(L.top, L.low), 0)
    end
  end
  local u = log_units(how, L.used, sL, limit)
  if u < L.used and L.debt > 0 then
    -- A log carrying a debt ahead keeps every unit, as in memory.
  elseif u < L.used then
    L.low = (L.low + L.used - u) % LOG_MOD
    L.used = u
  elseif L.debt > 0 then
    -- It gains as its last window's units are the newest.
    local last = L.debt - floordiv(L.debt - 1, sL) * sL
    local add = log_gain(how, L.used, last, sL, limit)
    if add > 0 then
      log_debt_add(L, add)
    end
  else
    -- The newest entry gains what any count from its units to the
    -- whole would, taken back from the oldest if the whole gains less.
    local cur = L.used
    if L.count - L.aged >= 2 then
      cur = math.min(cur, log_diff(L.top, log_at(L.off + L.count - 2)))
    end
    local add = math.min(log_gain(how, L.used, cur, sL, limit), u - cur)
    if add > 0 then
      local total = (L.top + add) % LOG_MOD
      redis.call('ZREM', KEYS[1], string.format('%d', L.top))
      redis.call('ZADD', KEYS[1], L.last, string.format('%d', total))
      L.top = total
    end
    L.low = (L.low + L.used + add - u) % LOG_MOD
    L.used = u
  end
  if L.debt > 0 and period ~= sP then
    -- Cut into windows of the new period from the anchor, it ends no
    -- sooner than it did: filled up to then (see floodgate's keepEnd).
    local windows = math.max(floordiv(fin - period - L.anchor + period - 1, period), 1)
    local full = math.min(windows * limit, LOG_DEBT_MAX)
    if L.debt < full then
      log_debt_add(L, full - L.debt)
    end
  end
  log_save(L, period, floor, vname, limit)
  return nil

end

-- log_charge records w units at L.now beyond the limit if need be
-- (ChargeN), as floodgate.SlidingLog does in memory: what the window has
-- room for at L.now, the rest carried ahead (see the layout above), up to
-- most units ahead in all. A debt's member needs room: a log that holds
-- max(limit, 2) live entries is folded first into one entry at its newest
-- entry's time (its older units then count a little longer, never
-- shorter). It returns 1 if most stopped it (floodgate.ErrDebtCapped).
local function log_charge(L, w, limit, most)
  log_clear(L)
  if L.debt == 0 and L.used < limit then
    local fill = math.min(w, limit - L.used)
    log_record(L, fill)
    w = w - fill
  end
  if w == 0 then
    return 0
  end
  if L.debt >= most then
    return 1
  end
  local add = math.min(w, most - L.debt)
  if L.debt > 0 then
    log_debt_add(L, add)
  else
    -- The live entries: neither aged out nor emptied by a drop
    -- (WithCountDenied).
    if L.off + L.count - log_reaching(L, 1) >= math.max(limit, 2) then
      redis.call('UNLINK', KEYS[1])
      redis.call('ZADD', KEYS[1], L.last, string.format('%d', L.top))
      L.off, L.count, L.aged = 0, 1, 0
    end
    L.atotal, L.anchor = L.top, L.last
    L.top = (L.top + add) % LOG_MOD
    redis.call('ZADD', KEYS[1], LOG_DEBT, string.format('%d', L.top))
    L.count, L.debt, L.used = L.count + 1, add, L.used + add
  end
  if add < w then
    return 1
  end
  return 0
end
