-- The helpers of a limiter whose rate can change (see ratechange.go),
-- prepended after prelude.lua to the scripts of the token buckets and the
-- sliding counter.
--
-- A state written under a changed rate carries its version and rate after
-- its own numbers: "<numbers> v L P B". One without them was written
-- before the first change (version 0).

-- rate_get reads the state KEYS[1], made of k numbers, for a caller that
-- decides under version ver. It returns the state string to decide on
-- (nil: none) and whether the caller's conversion replaced it; or, as its
-- only result, a reply for the caller: {-1} when the state was written
-- under a newer version (the caller reads the record again), {-2,
-- numbers..., v, L, P, B} when under an older one (the caller converts
-- it, and sends the state it saw as expect and the converted one as
-- with, '' for a state equal to a fresh one).
local function rate_get(k, ver, expect, with)
  local s = redis.call('GET', KEYS[1])
  if not s then
    return nil, false
  end
  local nums = {}
  for x in string.gmatch(s, '%d+') do
    nums[#nums + 1] = tonumber(x)
  end
  local sv = 0
  if #nums == k + 4 then
    sv = nums[k + 1]
  elseif #nums ~= k then
    error('floodgate: malformed state in ' .. KEYS[1])
  end
  ver = tonumber(ver)
  if sv == ver then
    return s, false
  end
  if expect ~= '' and s == expect then
    if with == '' then
      return nil, true
    end
    return with, true
  end
  if sv > ver then
    return {-1}
  end
  local reply = {-2}
  for i = 1, k do
    reply[i + 1] = nums[i]
  end
  for i = k + 1, k + 4 do
    reply[i + 1] = nums[i] or 0
  end
  return reply
end
