-- The leased sliding counter's helpers, prepended after prelude.lua and
-- prelude_counter.lua.

local B = 33554432 -- 2^25
-- mul returns a*b as (hi, lo) in base 2^25, for a < 2^25 and b < 2^50.
local function mul(a, b)
  local bl = b % B
  local p2 = a * bl
  local lo = p2 % B
  return a * ((b - bl) / B) + (p2 - lo) / B, lo
end

-- share returns ceil(prev*rest/period), the previous window's events still
-- weighing on the estimate: an estimate in doubles, corrected with exact
-- products (prev < 2^25 and rest <= period < 2^50).
local function share(prev, rest, period)
  if prev == 0 or rest == 0 then
    return 0
  end
  local ah, al = mul(prev, rest)
  local c = math.min(prev, math.ceil(prev * rest / period))
  -- the smallest c with c*period >= prev*rest
  while c < prev do
    local bh, bl = mul(c, period)
    if bh > ah or (bh == ah and bl >= al) then
      break
    end
    c = c + 1
  end
  while c > 0 do
    local bh, bl = mul(c - 1, period)
    if bh < ah or (bh == ah and bl < al) then
      break
    end
    c = c - 1
  end
  return c
end

-- lease_read returns the units leased beyond their decisions in window w,
-- from KEYS[3] ("w units"), or 0 when it is of another window.
local function lease_read(w)
  local lw, lu = counter_read(KEYS[3])
  if lw == w then
    return lu
  end
  return 0
end

-- counter_save writes the counts of window w back, as the plain scripts
-- do: the current window's count vanishes when it stops weighing on the
-- estimate, the previous one's when this window ends; while the previous
-- window still counts, the current key is kept, at zero if need be, since
-- it is what dates the previous one. It writes the leased units of w too.
local function counter_save(w, now, start, period, prev, cur, leased, floor)
  if cur > 0 then
    redis.call('SET', KEYS[1], string.format('%d %d', w, cur), 'PX', expiry_ms(start + 2 * period - now, floor))
  elseif prev > 0 then
    redis.call('SET', KEYS[1], string.format('%d 0', w), 'PX', expiry_ms(start + period - now, floor))
  else
    redis.call('DEL', KEYS[1])
  end
  if prev > 0 then
    redis.call('SET', KEYS[2], string.format('%d %d', w - 1, prev), 'PX', expiry_ms(start + period - now, floor))
  else
    redis.call('DEL', KEYS[2])
  end
  if leased > 0 then
    redis.call('SET', KEYS[3], string.format('%d %d', w, leased), 'PX', expiry_ms(start + period - now, floor))
  else
    redis.call('DEL', KEYS[3])
  end
end
