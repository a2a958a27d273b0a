-- Writes a limiter's rate record (see ratechange.go) and replies with the
-- record as it then stands, as rate_read.lua does.
--
-- KEYS[1]  the record: "v L P B how tc iL iP iB #id" (see rate_read.lua)
-- ARGV[1]  now in microseconds, or "" to read the server's TIME
-- ARGV[2]  "bump": a new version, one above the record's, with the rate
--          ARGV[3..6] (L P B how), at now, made by the change ARGV[10]
--          (a random number of the caller's, below 2^53); the initial
--          rate ARGV[7..9] is kept only if the record has none yet. A
--          record the change ARGV[10] already made is left as it is: a
--          change sent again, because its first reply was lost, makes no
--          second version.
--          "heal": the record ARGV[3..12] (v L P B how tc iL iP iB id),
--          if the record is missing or older: an instance that knows a
--          newer version puts back a record lost (evicted, deleted).

-- parse returns a record's ten numbers, or nil.
local function parse(s)
  local r = {}
  for x in string.gmatch(s, '%d+') do
    r[#r + 1] = tonumber(x)
  end
  if #r ~= 9 then
    return nil
  end
  local id = 0
  for c in string.gmatch(string.match(s, '#(%l*)$') or '', '.') do
    id = id * 26 + string.byte(c) - 97
  end
  r[10] = id
  return r
end

-- letters returns id in base 26, in the letters a-z.
local function letters(id)
  local t = {}
  repeat
    local c = id % 26
    table.insert(t, 1, string.char(97 + c))
    id = (id - c) / 26
  until id == 0
  return table.concat(t)
end

local old = redis.call('GET', KEYS[1])
local r
if old then
  r = parse(old)
end
local rec
if ARGV[2] == 'bump' then
  if r and r[10] == tonumber(ARGV[10]) then
    return r
  end
  local v, iL, iP, iB = 1, ARGV[7], ARGV[8], ARGV[9]
  if r then
    v, iL, iP, iB = r[1] + 1, r[7], r[8], r[9]
  end
  rec = string.format('%d %s %s %s %s %d %s %s %s #%s', v, ARGV[3], ARGV[4], ARGV[5], ARGV[6], clock_us(ARGV[1]), iL, iP, iB,
    letters(tonumber(ARGV[10])))
elseif not r or r[1] < tonumber(ARGV[3]) then
  rec = table.concat(ARGV, ' ', 3, 11) .. ' #' .. letters(tonumber(ARGV[12]))
end
if rec then
  redis.call('SET', KEYS[1], rec)
  r = parse(rec)
end
return r
