-- Floodgate's token bucket: atomic decisions, each over one or more buckets.
-- (Runs after bucket.lua, which reads the clock and defines the state.)
--
-- One call decides D decisions in turn, all at the same instant (one TIME):
-- a pipelined store sends the decisions that wait together as one call, so
-- Redis runs one script, not D. Each decision is all-or-nothing on its own
-- buckets; a later decision sees an earlier one's charges.
--
-- KEYS     the buckets of every decision, decision after decision. On a
--          Redis Cluster, a call whose decisions span several slots of one
--          node declares only its first key: key i > 1 is then ARGV[i]
--          (see bucket.lua).
-- ARGV[1]  one binary string (struct formats, little-endian): D and L as
--          uint16 ('<HH'), the number of decisions and of distinct limits;
--          then each limit's capacity C (tokens), K (units per token) and
--          G (units gained per microsecond) as doubles ('<ddd'); then,
--          decision after decision, its number of buckets n_j (uint16)
--          followed by a pair per bucket, in KEYS order: the bucket's limit
--          (1..L, uint16) and its cost (double). Arguments after ARGV[1]
--          are ignored.
-- Returns  for each decision in turn: allowed, then m_1, ..., m_nj. allowed
--          is 1 when every bucket could pay and all were charged, 0 when
--          none was; m_i is the number of units missing from bucket i after
--          the decision (0 = full).
--
-- Limits are sent once per call, not once per bucket, and all numbers in one
-- string: every argument costs Redis an object to build and Lua a string to
-- intern and a number to parse, where one struct.unpack reads a decision.
--
-- Decisions on one bucket read it once and write it once (bucket.lua keeps
-- the call's buckets and writes them all at the end), so a hot caller whose
-- decisions share a call costs one GET and one SET, however many.
--
-- Errors. With one decision, or decisions across slots (see KEYS), an error
-- (a key of another type under the prefix: WRONGTYPE) is the call's error
-- (nothing was written: writes wait for the end). With several of one
-- slot, each runs
-- protected: one that fails reports allowed = -1 (and zeros), charges
-- nothing (reads come before writes, and writes wait for the end), and the
-- others are decided as usual; the store reports ErrKeyType for it.

local args = ARGV[1]

-- key returns the key of bucket i of the call (see KEYS above).
local function key(i) return KEYS[i] or ARGV[i] end

local d, nl, pos = unpack('<HH', args)
for l = 1, nl do -- the limits cap, per, gain, full of bucket.lua, in order
  local c, k, g
  c, k, g, pos = unpack('<ddd', args, pos)
  cap[l], per[l], gain[l], full[l] = c, k, g, c * k
end

-- decide1 takes a decision of one bucket: key, of limit l, cost n. (Most
-- decisions have one bucket; this path builds no table.)
local function decide1(key, l, n)
  local m = missing_now(key, l)
  if n > cap[l] or m + n * per[l] > full[l] then return 0, m end
  m = m + n * per[l]
  store(key, m)
  return 1, m
end

-- decide takes a decision of nb buckets: keys kb+1..kb+nb, of limits ls
-- and costs ns.
local function decide(kb, nb, ls, ns)
  local missing, allowed = {}, 1
  for i = 1, nb do
    local l, n = ls[i], ns[i]
    local m = missing_now(key(kb + i), l)
    missing[i] = m
    if n > cap[l] or m + n * per[l] > full[l] then allowed = 0 end
  end
  if allowed == 1 then
    for i = 1, nb do
      missing[i] = missing[i] + ns[i] * per[ls[i]]
      store(key(kb + i), missing[i])
    end
  end
  return allowed, missing
end

-- protected runs f: as it is when the call holds one decision or decisions
-- across slots (one declared key), under pcall when it holds several of one
-- slot (see Errors above). Returns ok, then f's results.
local shared = d > 1 and KEYS[2] ~= nil
local function protected(f, ...)
  if not shared then return true, f(...) end
  return pcall(f, ...)
end

local out, o, kb = {}, 0, 0
for j = 1, d do
  local nb, l, n
  nb, l, n, pos = unpack('<HHd', args, pos)
  local ok, allowed, m
  if nb == 1 then
    ok, allowed, m = protected(decide1, key(kb + 1), l, n)
    if ok then out[o + 1], out[o + 2] = allowed, m end
  else
    local ls, ns = {l}, {n}
    for i = 2, nb do
      ls[i], ns[i], pos = unpack('<Hd', args, pos)
    end
    ok, allowed, m = protected(decide, kb, nb, ls, ns)
    if ok then
      out[o + 1] = allowed
      for i = 1, nb do out[o + 1 + i] = m[i] end
    end
  end
  if not ok then
    out[o + 1] = -1
    for i = 1, nb do out[o + 1 + i] = 0 end
  end
  o, kb = o + 1 + nb, kb + nb
end
flush()
return out
