-- Reads a limiter's rate record (see ratechange.go): its numbers, or
-- {0} when no change was ever made.
--
-- KEYS[1]  the record: "v L P B how tc iL iP iB id" (id, the change's
--          own number, is missing from records written before it was
--          kept)

local s = redis.call('GET', KEYS[1])
if not s then
  return {0}
end
local r = {}
for x in string.gmatch(s, '%d+') do
  r[#r + 1] = tonumber(x)
end
if #r == 9 then
  r[10] = 0
end
if #r ~= 10 then
  return redis.error_reply('ERR floodgate: malformed rate record in ' .. KEYS[1])
end
return r
