-- Writes a limiter's rate record (see ratechange.go) and replies with the
-- record as it then stands.
--
-- KEYS[1]  the record: "v L P B how tc iL iP iB id"
-- ARGV[1]  now in microseconds, or "" to read the server's TIME
-- ARGV[2]  "bump": a new version, one above the record's, with the rate
--          ARGV[3..6] (L P B how), at now, made by the change ARGV[10]
--          (a random number of the caller's); the initial rate ARGV[7..9]
--          is kept only if the record has none yet. A record the change
--          ARGV[10] already made is left as it is: a change sent again,
--          because its first reply was lost, makes no second version.
--          "heal": the record ARGV[3..12] (v L P B how tc iL iP iB id),
--          if the record is missing or older: an instance that knows a
--          newer version puts back a record lost (evicted, deleted).

local old = redis.call('GET', KEYS[1])
local r = {}
if old then
  for x in string.gmatch(old, '%d+') do
    r[#r + 1] = tonumber(x)
  end
  if #r == 9 then
    r[10] = 0 -- written before changes had their number
  end
end
local rec
if ARGV[2] == 'bump' then
  if #r == 10 and r[10] == tonumber(ARGV[10]) then
    return r
  end
  local v, iL, iP, iB = 1, ARGV[7], ARGV[8], ARGV[9]
  if #r == 10 then
    v, iL, iP, iB = r[1] + 1, r[7], r[8], r[9]
  end
  rec = string.format('%d %s %s %s %s %d %s %s %s %s', v, ARGV[3], ARGV[4], ARGV[5], ARGV[6], clock_us(ARGV[1]), iL, iP, iB, ARGV[10])
elseif #r ~= 10 or r[1] < tonumber(ARGV[3]) then
  rec = table.concat(ARGV, ' ', 3, 12)
end
if rec then
  redis.call('SET', KEYS[1], rec)
  r = {}
  for x in string.gmatch(rec, '%d+') do
    r[#r + 1] = tonumber(x)
  end
end
return r
