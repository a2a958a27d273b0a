-- Shared by the decision and refund scripts: scripter.go prepends it to
-- each one when it is loaded (with prelude_counter.lua or prelude_log.lua
-- for the algorithm's own helpers), so every script stays a single
-- self-contained EVAL while the helpers below are written once. Redis
-- forbids globals in scripts, hence locals; and since a script's local
-- functions are created anew on every run, each script gets only the
-- helpers it uses.

-- clock_us returns the time in integer microseconds: arg if the caller
-- passed one (a client clock), else the server's TIME, whose two strings
-- of digits the arithmetic converts exactly, with no call of tonumber.
local function clock_us(arg)
  if arg == '' then
    local t = redis.call('TIME')
    return t[1] * 1000000 + t[2]
  end
  return tonumber(arg)
end

local function floordiv(a, b)
  local r = a % b
  return (a - r) / b
end

-- expiry_ms turns a wait in microseconds into whole milliseconds for PX or
-- PEXPIRE, rounded up, and at least floor (see WithClock).
local function expiry_ms(us, floor)
  local m = floordiv(us, 1000)
  if us % 1000 > 0 then
    m = m + 1
  end
  return math.max(m, tonumber(floor))
end
