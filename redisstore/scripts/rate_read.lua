-- Reads a limiter's rate record (see ratechange.go): its numbers, or
-- {0} when no change was ever made.
--
-- KEYS[1]  the record: "v L P B how tc iL iP iB #id", id the number of the
--          change that made it in base 26, in the letters a-z (no digits:
--          a release that reads nine numbers reads this record too); a
--          record without it replies id 0

local s = redis.call('GET', KEYS[1])
if not s then
  return {0}
end
local r = {}
for x in string.gmatch(s, '%d+') do
  r[#r + 1] = tonumber(x)
end
if #r ~= 9 then
  return redis.error_reply('ERR floodgate: malformed rate record in ' .. KEYS[1])
end
local id = 0
for c in string.gmatch(string.match(s, '#(%l*)$') or '', '.') do
  id = id * 26 + string.byte(c) - 97
end
r[10] = id
return r
