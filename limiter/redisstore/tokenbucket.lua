-- Floodgate's token bucket: atomic decisions, each over one or more buckets.
-- (Runs after bucket.lua, which reads the clock and defines the state.)
--
-- One call decides D decisions in turn, all at the same instant (one TIME):
-- a pipelined store sends the decisions that wait together as one call, so
-- Redis runs one script, not D. Each decision is all-or-nothing on its own
-- buckets; a later decision sees an earlier one's charges.
--
-- KEYS     the buckets of every decision, decision after decision.
-- ARGV     integers: D, the number of decisions; L, the number of distinct
--          limits; then each limit's capacity C (tokens), K (units per
--          token) and G (units gained per microsecond); then, decision
--          after decision, its number of buckets n_j followed by a pair per
--          bucket, in KEYS order: the bucket's limit (1..L) and its cost.
--          Arguments after those are ignored.
-- Returns  for each decision in turn: allowed, then m_1, ..., m_nj. allowed
--          is 1 when every bucket could pay and all were charged, 0 when
--          none was; m_i is the number of units missing from bucket i after
--          the decision (0 = full).
--
-- Limits are sent once per call, not once per bucket: the decisions that
-- share a call mostly share their limits, and every argument costs Redis a
-- string to build and the script a number to parse.
--
-- Decisions on one bucket read it once and write it once (bucket.lua keeps
-- the call's buckets and writes them all at the end), so a hot caller whose
-- decisions share a call costs one GET and one SET, however many.
--
-- Errors. With one decision, an error (a key of another type under the
-- prefix: WRONGTYPE) is the call's error. With several, each decision runs
-- protected: one that fails reports allowed = -1 (and zeros), charges
-- nothing (reads come before writes, and writes wait for the end), and the
-- others are decided as usual; the store reports ErrKeyType for it.

local d, nl = tonumber(ARGV[1]), tonumber(ARGV[2])
local cap, per, gain, full = {}, {}, {}, {}
for l = 1, nl do
  local a = 3 * l
  local c, k = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  cap[l], per[l], gain[l], full[l] = c, k, tonumber(ARGV[a + 2]), c * k
end

-- decide1 takes a decision of one bucket: key, of limit l, cost n. (Most
-- decisions have one bucket; this path builds no table.)
local function decide1(key, l, n)
  local m = missing_now(key, cap[l], per[l], gain[l])
  if n > cap[l] or m + n * per[l] > full[l] then return 0, m end
  m = m + n * per[l]
  store(key, m)
  return 1, m
end

-- decide takes a decision of nb buckets: keys kb+1..kb+nb, their (limit,
-- cost) pairs from ARGV[a + 1].
local function decide(kb, nb, a)
  local missing, allowed = {}, 1
  for i = 1, nb do
    local l, n = tonumber(ARGV[a + 2 * i - 1]), tonumber(ARGV[a + 2 * i])
    local m = missing_now(KEYS[kb + i], cap[l], per[l], gain[l])
    missing[i] = m
    if n > cap[l] or m + n * per[l] > full[l] then allowed = 0 end
  end
  if allowed == 1 then
    for i = 1, nb do
      local l, n = tonumber(ARGV[a + 2 * i - 1]), tonumber(ARGV[a + 2 * i])
      missing[i] = missing[i] + n * per[l]
      store(KEYS[kb + i], missing[i])
    end
  end
  return allowed, missing
end

-- protected runs f: as it is when the call holds one decision, under pcall
-- when it holds several (see Errors above). Returns ok, then f's results.
local function protected(f, ...)
  if d == 1 then return true, f(...) end
  return pcall(f, ...)
end

local out, o = {}, 0
local kb, a = 0, 3 + 3 * nl -- decision j's bucket count is ARGV[a]
for j = 1, d do
  local nb = tonumber(ARGV[a])
  local ok, allowed, m
  if nb == 1 then
    ok, allowed, m = protected(decide1, KEYS[kb + 1], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]))
    if ok then out[o + 1], out[o + 2] = allowed, m end
  else
    ok, allowed, m = protected(decide, kb, nb, a)
    if ok then
      out[o + 1] = allowed
      for i = 1, nb do out[o + 1 + i] = m[i] end
    end
  end
  if not ok then
    out[o + 1] = -1
    for i = 1, nb do out[o + 1 + i] = 0 end
  end
  o, kb, a = o + 1 + nb, kb + nb, a + 1 + 2 * nb
end
flush()
return out
