-- Forgets a client's state: all its keys, which share one slot. The reply
-- is an array, like every script's, so that one Scripter method reads them
-- all.
--
-- A state written under a changed rate keeps its version, until it would
-- have expired: a string state its suffix alone (see rate_get in
-- prelude_rate.lua), a sliding log its rate's member (see log_empty in
-- prelude_log.lua). A reset key is fresh under any rate, but never
-- decided again under a rate older than the one it was last decided
-- under.
local LOG_VSCORE = '-1125899906842624' -- as in prelude_log.lua
local n = 0
for _, k in ipairs(KEYS) do
  local kept = false
  local t = redis.call('TYPE', k)['ok']
  if t == 'string' then
    local v = string.match(redis.call('GET', k), '(|[1-9]%d* %d+ %d+ %d+)$')
    if v then
      redis.call('SET', k, v, 'KEEPTTL')
      kept = true
    end
  elseif t == 'zset' then
    local m = redis.call('ZRANGEBYSCORE', k, '-inf', LOG_VSCORE, 'LIMIT', 0, 1)[1]
    if m and string.match(m, '^v [1-9]') then
      redis.call('ZREMRANGEBYSCORE', k, '(' .. LOG_VSCORE, '+inf')
      kept = true
    end
  end
  if not kept then
    n = n + redis.call('DEL', k)
  end
end
return {n}
