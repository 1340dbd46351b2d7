-- Floodgate's adjustment: read one bucket, or change it, for an operator.
-- (Runs after bucket.lua, which reads the clock and defines the state.)
--
-- KEYS[1]  the bucket's Redis key.
-- ARGV     C K G j (the limit, as refund.lua reads it), op and n: op 0
--          reads and writes nothing (not even a change of limit); 1 adds
--          n tokens (n < 0 takes -n), 2 sets the bucket to n tokens, 3
--          makes it full (deletes the key). The Go side bounds n so that
--          n·K stays an exact integer (|n| <= 2·C: more adds nothing).
--          A quota's (j = 255, see Calendar quotas in bucket.lua) sends
--          its limit, 1, 1, 255, op and n, then its windows s0 s1 e1 e2:
--          TIME picks the window as the decision script picks it, and an
--          add of n >= 0 lowers the count by n, below zero if need be (a
--          credit beyond the limit, down to -ARGV[11]), a negative
--          add counts -n as a charge does, a set of n leaves n to take
--          (count C - n), a reset empties the window.
-- Returns  {m}: the units missing from the bucket after the operation; a
--          quota's {count, the window (0, 1, 2 as in bucket.lua), TIME in
--          microseconds}.
--
-- An add gives tokens back as a refund does, up to full; a negative add
-- takes them as a charge does, into a debt of at most one capacity (m <=
-- 2·C·K); a set of n < 0 is a debt of -n. The arithmetic is
-- limiter.Limit.Missing's.

local c, k, g, j = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local op, n = tonumber(ARGV[5]), tonumber(ARGV[6])
local key = KEYS[1]
if j == 255 then -- a quota's: bucket.lua's Q, made here as tokenbucket.lua makes it (missing_now reads it)
  local l = limit_index(c, k, g, j)
  local w = {tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])}
  Q = {w = {[l] = w}, s = {}, e = {}, i = {}, now = tonumber(t[1]) * 1000000 + us}
  local m = missing_now(key, l)
  if op == 1 and n >= 0 then
    m = m - n
    local low = -tonumber(ARGV[11])
    if m < low then m = low end
  elseif op == 1 then
    m = m - n
    if m > 2 * c then m = 2 * c end
  elseif op == 2 then
    m = c - n
  elseif op == 3 then
    m = 0
  end
  if op ~= 0 then
    store(key, m)
    flush()
  end
  return {m, Q.i[key], Q.now}
end
local m = missing_now(key, limit_index(c, k, g, j))
if op == 0 then
  return {m}
end
if op == 1 and n >= 0 then
  m = m - n * k
  if m < 0 then m = 0 end
elseif op == 1 then
  m = m - n * k
  if m > 2 * c * k then m = 2 * c * k end
elseif op == 2 then
  m = (c - n) * k
else
  m = 0
end
store(key, m)
flush()
return {m}
