-- A batch of decisions of one algorithm in one call (see
-- internal/scriptbatch). scripter.go builds it around the algorithm's
-- script: its preludes replace the line --@preludes, its own code
-- becomes the body of decide at --@body, unchanged.
--
-- KEYS     one key per entry
-- ARGV[1]  the number of entries; then, for each entry, a header and its
--          arguments: the header is '' when they are those of the entry
--          before it (and are not sent again), otherwise their number
--
-- Reply: for each entry, the number of integers of its reply followed by
-- them; or, for an entry whose script raised an error, -1 - m followed by
-- the m bytes of the message (at most 512). An entry's error leaves the
-- others as they ran.

local BATCH_KEYS, BATCH_ARGV = KEYS, ARGV
-- The algorithm's code reads KEYS and ARGV: these locals, each entry's.
local KEYS, ARGV
--@preludes

-- One TIME for the whole batch: it runs atomically, so its decisions are
-- made at one instant, in turn, as if they came at the same microsecond.
do
  local read, t = clock_us, nil
  clock_us = function(arg)
    if arg ~= '' then
      return read(arg)
    end
    if not t then
      t = read(arg)
    end
    return t
  end
end

local function decide()
--@body
end

local out, o = {}, 0
local a = 2
-- One table holds each entry's key in turn: the code only reads KEYS[1].
local key = {}
for i = 1, tonumber(BATCH_ARGV[1]) do
  key[1] = BATCH_KEYS[i]
  KEYS = key
  local h = BATCH_ARGV[a]
  a = a + 1
  if h ~= '' then
    ARGV = {}
    for j = 1, tonumber(h) do
      ARGV[j] = BATCH_ARGV[a]
      a = a + 1
    end
  end
  local ok, r = pcall(decide)
  if ok then
    out[o + 1] = #r
    for j = 1, #r do
      out[o + 1 + j] = r[j]
    end
    o = o + 1 + #r
  else
    if type(r) == 'table' then
      r = r.err
    end
    local msg = string.sub(tostring(r), 1, 512)
    out[o + 1] = -1 - #msg
    for j = 1, #msg do
      out[o + 1 + j] = string.byte(msg, j)
    end
    o = o + 1 + #msg
  end
end
return out
