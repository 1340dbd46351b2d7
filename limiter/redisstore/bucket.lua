-- Floodgate's bucket state in Redis: how a bucket is read and written. Both
-- scripts (tokenbucket.lua, refund.lua) are this file followed by their own
-- body, so the encoding exists once.
--
-- State. A bucket is full at one exact instant F, counted in "ticks" (one tick
-- = 1/G microsecond, so one unit accrues per tick). F is split between the
-- key's expiry and its value: the key expires at E = ceil(F) milliseconds (the
-- moment the bucket is full, so an idle caller costs no memory) and holds the
-- integer v = E·1000·G − F in [0, 1000·G), the part of a millisecond the
-- expiry rounded up. A missing key is a full bucket. Time is Redis' own
-- (TIME), never the caller's, so replicas with skewed clocks mint nothing.
--
-- Arithmetic. All values are integers below 2^51 (the Go side checks C·K and
-- 1000·G against 2^50), so Lua's doubles hold them exactly. Large times are
-- never multiplied: ticks are counted from now_ms, the current millisecond.

local function floordiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end

local t = redis.call('TIME')
local us = tonumber(t[2])
local now_ms = tonumber(t[1]) * 1000 + floordiv(us, 1000)
local sub = us % 1000 -- microseconds into the current millisecond

-- missing_now returns the units missing from the bucket at key now (0 =
-- full, at most full) and whether the key exists.
local function missing_now(key, g, full)
  local e = redis.call('PEXPIRETIME', key)
  if e <= 0 then return 0, false end
  local v = tonumber(redis.call('GET', key)) or 0
  -- F − now, in ticks: (E − now_ms)·1000·G − v − sub·G
  local m = (e - now_ms) * 1000 * g - v - sub * g
  if m < 0 then m = 0 elseif m > full then m = full end
  return m, true
end

-- store records that the bucket at key misses m > 0 units now.
local function store(key, m, g)
  local f = sub * g + m                   -- F in ticks from the start of now_ms
  local step = 1000 * g                   -- ticks per millisecond
  local d = floordiv(f + step - 1, step)  -- whole milliseconds until full, rounded up
  redis.call('SET', key, string.format('%d', d * step - f), 'PXAT', string.format('%d', now_ms + d))
end
