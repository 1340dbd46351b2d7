-- Floodgate's token bucket: one atomic decision over one or more buckets.
--
-- KEYS[i]  the Redis key of bucket i.
-- ARGV     four integers per bucket, in KEYS order: capacity C (tokens),
--          K (units per token), G (units gained per microsecond), cost n.
-- Returns  {allowed, m_1, ..., m_n}: allowed is 1 when every bucket could pay
--          and all were charged, 0 when none was; m_i is the number of units
--          missing from bucket i after the decision (0 = full).
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

local n = #KEYS
local missing = {}
local allowed = 1
for i = 1, n do
  local a = (i - 1) * 4
  local c, k, g, cost = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  local full = c * k
  local m = 0
  local e = redis.call('PEXPIRETIME', KEYS[i])
  if e > 0 then
    local v = tonumber(redis.call('GET', KEYS[i])) or 0
    -- F − now, in ticks: (E − now_ms)·1000·G − v − sub·G
    m = (e - now_ms) * 1000 * g - v - sub * g
    if m < 0 then m = 0 elseif m > full then m = full end
  end
  missing[i] = m
  if cost > c or m + cost * k > full then allowed = 0 end
end

if allowed == 1 then
  for i = 1, n do
    local a = (i - 1) * 4
    local k, g, cost = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
    local m = missing[i] + cost * k
    local f = sub * g + m             -- F in ticks from the start of now_ms
    local step = 1000 * g             -- ticks per millisecond
    local d = floordiv(f + step - 1, step) -- whole milliseconds until full, rounded up
    redis.call('SET', KEYS[i], string.format('%d', d * step - f), 'PXAT', string.format('%d', now_ms + d))
    missing[i] = m
  end
end

local out = {allowed}
for i = 1, n do out[i + 1] = missing[i] end
return out
