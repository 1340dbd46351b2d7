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
--          G (units gained per step) as doubles and its resolution j (a
--          step is 10^j µs) as a uint8 ('<dddB'), and for a quota's
--          limit (j = 255, see bucket.lua) its windows s0, s1, e1, e2
--          ('<dddd', microseconds since the epoch); then, decision after
--          decision, its number of buckets n_j (uint16) followed by a
--          triple per bucket, in KEYS order: the bucket's limit (1..L,
--          uint16), its kind (uint8: 0 take, 1 charge, 2 refund) and its
--          cost (double); last, the call's deadline (double): microseconds
--          since the Unix epoch by Redis' clock (TIME), 0 for none, -1
--          for none and Redis' clock appended to the reply (seconds, then
--          microseconds). A call over a quota always appends the clock.
--          Arguments after ARGV[1] are ignored.
-- Returns  for each decision in turn: allowed, then m_1, ..., m_nj. allowed
--          is 1 when every take could pay and all were charged, 0 when
--          none was; m_i is the number of units missing from bucket i after
--          the decision (0 = full; above C·K in debt); for a quota, its
--          count times 4 plus the window TIME chose (0 the previous, 1
--          the current, 2 the next). A call that starts
--          after its deadline decides nothing: every allowed is -2, every
--          m_i 0, and no bucket is read or written (the caller has already
--          answered that the store failed; see docs/failure-modes.md).
--
-- Kinds. A take of n tokens is all-or-nothing with the decision's other
-- takes: it pays if every take's bucket holds its cost (a take of 0, a
-- look, needs one whole token and takes nothing), and a denied take pays
-- nothing. A charge takes n tokens whatever the bucket holds, down to a
-- debt of one capacity at most (2·C·K missing: what it would take beyond
-- is forgotten); a refund gives n back, up to full. Both apply whatever
-- the takes decide. A bucket in debt denies every take until repaid.
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
-- others are decided as usual; the store reports ErrKeyType for it, or, for
-- a quota's clock (QUOTA_CLOCK in bucket.lua), allowed = -3 and
-- ErrQuotaClock.

local args = ARGV[1]

-- key returns the key of bucket i of the call (see KEYS above).
local function key(i) return KEYS[i] or ARGV[i] end

local d, nl, pos = unpack('<HH', args)

-- Past the deadline, nothing is decided (see Returns). A deadline of -1
-- asks for the clock instead: the reply ends with TIME's seconds and
-- microseconds, which the store reads to turn its deadlines into Redis'.
local deadline = unpack('<d', args, #args - 7)
local anyq = false -- a quota among the limits: its values carry their window, the reply the clock
if deadline > 0 and tonumber(t[1]) * 1000000 + us > deadline then
  for l = 1, nl do -- '<dddB' each, and a quota's windows
    if unpack('B', args, pos + 24) == 255 then pos, anyq = pos + 32, true end
    pos = pos + 25
  end
  local out, o = {}, 0
  for j = 1, d do
    local nb = unpack('<H', args, pos)
    pos = pos + 2 + 11 * nb -- '<HBd' a bucket
    out[o + 1] = -2
    for i = 1, nb do out[o + 1 + i] = 0 end
    o = o + 1 + nb
  end
  if anyq then out[o + 1], out[o + 2] = tonumber(t[1]), us end
  return out
end
for l = 1, nl do -- the limits cap, per, gain, res, full of bucket.lua, in order
  local c, k, g, j
  c, k, g, j, pos = unpack('<dddB', args, pos)
  cap[l], per[l], gain[l], res[l], full[l] = c, k, g, j, c * k
  if j == 255 then -- a quota's limit: its windows follow (bucket.lua's Q)
    local s0, s1, e1, e2
    s0, s1, e1, e2, pos = unpack('<dddd', args, pos)
    if not Q then
      Q = {w = {}, s = {}, e = {}, i = {}, now = tonumber(t[1]) * 1000000 + us}
    end
    Q.w[l], anyq = {s0, s1, e1, e2}, true
  end
end

-- apply returns the units missing once a charge (kind 1) or a refund
-- (kind 2) of n tokens is applied to a bucket missing m units of limit l.
-- n·K may be above 2^53 (a charge of 2^63): then it is far beyond either
-- bound, which the comparison still sees.
local function apply(m, l, kind, n)
  if kind == 1 then
    m = m + n * per[l]
    if m > 2 * full[l] then m = 2 * full[l] end
    return m
  end
  if m <= 0 then return m end -- full, or a quota's credit (bucket.lua): a refund adds nothing
  m = m - n * per[l]
  if m < 0 then m = 0 end
  return m
end

-- decide1 takes a decision of one bucket: key, of limit l, kind and cost
-- n. (Most decisions have one bucket; this path builds no table.)
local function decide1(key, l, kind, n)
  local m = missing_now(key, l)
  if kind ~= 0 then
    m = apply(m, l, kind, n)
    store(key, m)
    return 1, m
  end
  local need = n -- what the bucket must hold: a look (n = 0) needs one token
  if need < 1 then need = 1 end
  if need > cap[l] or m + need * per[l] > full[l] then return 0, m end
  if n > 0 then
    m = m + n * per[l]
    store(key, m)
  end
  return 1, m
end

-- decide takes a decision of nb buckets: keys kb+1..kb+nb, of limits ls,
-- kinds ks and costs ns.
local function decide(kb, nb, ls, ks, ns)
  local missing, allowed = {}, 1
  for i = 1, nb do
    local l, need = ls[i], ns[i]
    local m = missing_now(key(kb + i), l)
    missing[i] = m
    if need < 1 then need = 1 end
    if ks[i] == 0 and (need > cap[l] or m + need * per[l] > full[l]) then allowed = 0 end
  end
  for i = 1, nb do
    local kind, n = ks[i], ns[i]
    if kind ~= 0 then
      missing[i] = apply(missing[i], ls[i], kind, n)
      store(key(kb + i), missing[i])
    elseif allowed == 1 and n > 0 then
      missing[i] = missing[i] + n * per[ls[i]]
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
  local nb, l, kind, n
  nb, l, kind, n, pos = unpack('<HHBd', args, pos)
  local ok, allowed, m
  if nb == 1 then
    ok, allowed, m = protected(decide1, key(kb + 1), l, kind, n)
    if ok then out[o + 1], out[o + 2] = allowed, m end
  else
    local ls, ks, ns = {l}, {kind}, {n}
    for i = 2, nb do
      ls[i], ks[i], ns[i], pos = unpack('<HBd', args, pos)
    end
    ok, allowed, m = protected(decide, kb, nb, ls, ks, ns)
    if ok then
      out[o + 1] = allowed
      for i = 1, nb do out[o + 1 + i] = m[i] end
    end
  end
  if not ok then
    out[o + 1] = -1
    if type(allowed) == 'string' and string.find(allowed, 'QUOTA_CLOCK', 1, true) then out[o + 1] = -3 end
    for i = 1, nb do out[o + 1 + i] = 0 end
  elseif anyq then
    for i = 1, nb do
      local q = Q.i[key(kb + i)]
      if q then out[o + 1 + i] = out[o + 1 + i] * 4 + q end
    end
  end
  o, kb = o + 1 + nb, kb + nb
end
if deadline == -1 or anyq then out[o + 1], out[o + 2] = tonumber(t[1]), us end
flush()
return out
