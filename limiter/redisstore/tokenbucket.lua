-- Floodgate's token bucket: one atomic decision over one or more buckets.
-- (Runs after bucket.lua, which reads the clock and defines the state.)
--
-- KEYS[i]  the Redis key of bucket i.
-- ARGV     four integers per bucket, in KEYS order: capacity C (tokens),
--          K (units per token), G (units gained per microsecond), cost n.
-- Returns  {allowed, m_1, ..., m_n}: allowed is 1 when every bucket could pay
--          and all were charged, 0 when none was; m_i is the number of units
--          missing from bucket i after the decision (0 = full).

local n = #KEYS
local missing = {}
local allowed = 1
for i = 1, n do
  local a = (i - 1) * 4
  local c, k, g, cost = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  local m = missing_now(KEYS[i], g, c * k)
  missing[i] = m
  if cost > c or m + cost * k > c * k then allowed = 0 end
end

if allowed == 1 then
  for i = 1, n do
    local a = (i - 1) * 4
    local k, g, cost = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
    missing[i] = missing[i] + cost * k
    store(KEYS[i], missing[i], g)
  end
end

local out = {allowed}
for i = 1, n do out[i + 1] = missing[i] end
return out
