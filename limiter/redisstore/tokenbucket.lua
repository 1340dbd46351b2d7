-- Floodgate's token bucket: atomic decisions, each over one or more buckets.
-- (Runs after bucket.lua, which reads the clock and defines the state.)
--
-- One call decides D decisions in turn, all at the same instant (one TIME):
-- a pipelined store sends the decisions that wait together as one call, so
-- Redis runs one script, not D. Each decision is all-or-nothing on its own
-- buckets; a later decision sees an earlier one's charges.
--
-- KEYS     the buckets of every decision, decision after decision.
-- ARGV[1]  D, the number of decisions; ARGV[1 + j] n_j, the buckets of
--          decision j. Then four integers per bucket, in KEYS order:
--          capacity C (tokens), K (units per token), G (units gained per
--          microsecond), cost n. Arguments after those are ignored.
-- Returns  for each decision in turn: allowed, then m_1, ..., m_nj. allowed
--          is 1 when every bucket could pay and all were charged, 0 when
--          none was; m_i is the number of units missing from bucket i after
--          the decision (0 = full).
--
-- Errors. With one decision, an error (a key of another type under the
-- prefix: WRONGTYPE) is the call's error. With several, each decision runs
-- protected: one that fails reports allowed = -1 (and zeros), charges
-- nothing (reads come before writes), and the others are decided as usual;
-- the store then runs it alone to learn its error.

-- decide takes decision j's buckets: keys kb+1..kb+n, arguments from ab+1.
local function decide(kb, n, ab)
  local missing = {}
  local allowed = 1
  for i = 1, n do
    local a = ab + (i - 1) * 4
    local c, k, g, cost = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
    local m = missing_now(KEYS[kb + i], g, c * k)
    missing[i] = m
    if cost > c or m + cost * k > c * k then allowed = 0 end
  end
  if allowed == 1 then
    for i = 1, n do
      local a = ab + (i - 1) * 4
      local k, g, cost = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
      missing[i] = missing[i] + cost * k
      store(KEYS[kb + i], missing[i], g)
    end
  end
  return allowed, missing
end

local d = tonumber(ARGV[1])
local out = {}
local kb, ab = 0, 1 + d
for j = 1, d do
  local n = tonumber(ARGV[1 + j])
  local ok, allowed, missing = true, nil, nil
  if d == 1 then
    allowed, missing = decide(kb, n, ab)
  else
    ok, allowed, missing = pcall(decide, kb, n, ab)
  end
  if ok then
    out[#out + 1] = allowed
    for i = 1, n do out[#out + 1] = missing[i] end
  else
    out[#out + 1] = -1
    for i = 1, n do out[#out + 1] = 0 end
  end
  kb, ab = kb + n, ab + 4 * n
end
return out
