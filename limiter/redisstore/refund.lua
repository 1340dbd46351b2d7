-- Floodgate's refund: give back what tokenbucket.lua took from some buckets.
--
-- Used only for a decision whose buckets live in several Redis Cluster
-- slots: the token-bucket script runs once per slot, and when one slot's
-- buckets deny, the slots that were charged are refunded with this script,
-- so that in the end no bucket paid (see redisstore.go, takeAcrossSlots).
--
-- KEYS[i]  the Redis key of bucket i.
-- ARGV     the same four integers per bucket as tokenbucket.lua, in KEYS
--          order: capacity C (tokens), K (units per token), G (units gained
--          per microsecond), cost n: the cost to give back.
-- Returns  {m_1, ..., m_n}: the units missing from bucket i after the refund.
--
-- State is read and written exactly as tokenbucket.lua does (see its header):
-- the bucket is full at instant F, the key expires at E = ceil(F) ms and
-- holds v = E·1000·G − F. The refund computes the units missing now, takes
-- n·K off, floored at 0 (a bucket cannot be fuller than full), and writes the
-- new F, or deletes the key when the bucket is full. A refund made at the
-- instant of the charge restores the key's expiry and value exactly; made
-- later, it yields what the bucket would hold had it never been charged
-- (unless, in between, the uncharged bucket would have reached full: then
-- the floor hands back at most what refilled meanwhile).

local function floordiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end

local t = redis.call('TIME')
local us = tonumber(t[2])
local now_ms = tonumber(t[1]) * 1000 + floordiv(us, 1000)
local sub = us % 1000 -- microseconds into the current millisecond

local out = {}
for i = 1, #KEYS do
  local a = (i - 1) * 4
  local c, k, g, cost = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  local full = c * k
  local m = 0
  local e = redis.call('PEXPIRETIME', KEYS[i])
  if e > 0 then
    local v = tonumber(redis.call('GET', KEYS[i])) or 0
    m = (e - now_ms) * 1000 * g - v - sub * g
    if m < 0 then m = 0 elseif m > full then m = full end
  end
  m = m - cost * k
  if m <= 0 then
    m = 0
    if e > 0 then redis.call('DEL', KEYS[i]) end
  else
    local f = sub * g + m
    local step = 1000 * g
    local d = floordiv(f + step - 1, step)
    redis.call('SET', KEYS[i], string.format('%d', d * step - f), 'PXAT', string.format('%d', now_ms + d))
  end
  out[i] = m
end
return out
