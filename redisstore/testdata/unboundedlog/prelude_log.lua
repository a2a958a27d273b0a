-- The weighted sliding log's helpers, prepended after prelude.lua.

-- log_entry splits a weighted sliding log member "seq:w".
local function log_entry(m)
  local s, w = string.match(m, '^(%d+):(%d+)$')
  if not s then
    error('floodgate: malformed sliding log entry in ' .. KEYS[1])
  end
  return s, tonumber(w)
end

-- log_state drops the entries of the log KEYS[1] at or before cutoff and
-- returns the units the rest hold and the next entry's seq, from the state
-- KEYS[2]. A state lost while the log was kept (an eviction under
-- maxmemory) is rebuilt from the log, so the total never undercounts.
local function log_state(cutoff)
  local used, seq = 0, 0
  local s = redis.call('GET', KEYS[2])
  if s then
    local u, q = string.match(s, '^(%d+) (%d+)$')
    if not u then
      error('floodgate: malformed sliding log state in ' .. KEYS[2])
    end
    used, seq = tonumber(u), tonumber(q)
  else
    for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
      local q, w = log_entry(m)
      used, seq = used + w, math.max(seq, tonumber(q) + 1)
    end
  end
  if used > 0 then
    local old = redis.call('ZRANGE', KEYS[1], '-inf', cutoff, 'BYSCORE')
    if #old > 0 then
      for _, m in ipairs(old) do
        local _, w = log_entry(m)
        used = used - w
      end
      redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', cutoff)
    end
  end
  return used, seq
end

-- log_take_oldest stops counting the k oldest units of the log, dropping
-- the entries they empty and lightening the one they end in.
local function log_take_oldest(k)
  while k > 0 do
    local es = redis.call('ZRANGE', KEYS[1], 0, 63, 'WITHSCORES')
    if #es == 0 then
      break
    end
    for i = 1, #es, 2 do
      local s, w = log_entry(es[i])
      redis.call('ZREM', KEYS[1], es[i])
      if w > k then
        redis.call('ZADD', KEYS[1], es[i + 1], s .. ':' .. (w - k))
        k = 0
        break
      end
      k = k - w
      if k == 0 then
        break
      end
    end
  end
end

-- log_save writes the state back, and sets both keys to vanish when the
-- newest entry leaves the window. It returns that wait in microseconds (0
-- for an empty log, whose keys it deletes).
local function log_save(used, seq, now, period, floor)
  local newest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if #newest == 0 then
    redis.call('DEL', KEYS[1], KEYS[2])
    return 0
  end
  local reset = tonumber(newest[2]) + period - now
  local ms = expiry_ms(reset, floor)
  redis.call('SET', KEYS[2], string.format('%d %d', used, seq), 'PX', ms)
  redis.call('PEXPIRE', KEYS[1], ms)
  return reset
end
