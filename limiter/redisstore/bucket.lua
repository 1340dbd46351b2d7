-- Floodgate's bucket state in Redis: how a bucket is read and written. Both
-- scripts (tokenbucket.lua, refund.lua) are this file followed by their own
-- body, so the encoding exists once.
--
-- Time is counted in steps of R = 10^j microseconds, j the limit's
-- resolution (0 for nearly every limit: one step a microsecond; coarser only
-- for long units with large capacities, see limiter.Limit), on the grid of
-- steps from the Unix epoch. A bucket refills G units at the start of each
-- step.
--
-- State. A bucket is full at one exact instant F, counted in "ticks" (one
-- tick = 1/G step, so one unit accrues per tick) of the limit it was last
-- written under. The key holds five doubles (struct '<ddddd', 40 bytes):
-- E = ceil(F) in milliseconds, v = E·P − F in [0, P), P the ticks in a
-- millisecond (1000·G/R), and that limit's C, K and G; with j > 0, a sixth
-- field, j itself (struct '<dddddB', 41 bytes: a value up to 44 bytes costs
-- Redis no more memory). For a step longer than a millisecond (j > 3), E
-- counts steps instead (F is a whole step: E = F/G, v = 0 < G; the far
-- future of a slow bucket with a large capacity, a billion years for 2^32
-- tokens a year, stays an exact integer in steps). The key also expires at
-- E, the moment the bucket is full (at most MAX_PXAT, some 140,000 years
-- from 1970: such a key is forgotten then, full), so an idle caller costs
-- no memory; but one GET reads the whole state. A missing key is a full bucket. A bucket in debt (a charge took it
-- below empty, see tokenbucket.lua) misses more than C·K units, at most
-- 2·C·K. Time is Redis' own (TIME), never the caller's, so replicas with
-- skewed clocks mint nothing. (A value that is a bare decimal integer is the
-- previous encoding: v alone, E the key's expiry, the limit the request's;
-- it is read once and rewritten in this one.)
--
-- A change of limit. When a decision names a bucket with a limit other than
-- the one its state was written under (a policy's numbers changed by a
-- reload), the bucket keeps the tokens it held under the old limit at this
-- instant, capped at the new capacity and rounded down to the new limit's
-- unit (a debt: capped at a new capacity, rounded up), and refills at the
-- new rate from then on; a bucket full under the old limit is full under
-- the new one, as a forgotten bucket is. The state is rewritten under the
-- new limit even when the decision charges nothing.
--
-- Arithmetic. All values are integers below 2^53 (the Go side checks C·K
-- and P, or G, against 2^50; a debt doubles C·K at most), so Lua's doubles
-- hold them exactly. Large times are never multiplied: ticks are counted
-- from the current step (from now_ms, the current millisecond, for a step
-- of a millisecond or less).
--
-- Redis Cluster. One call on a node may decide buckets of several slots
-- that node holds: its first key is declared (KEYS, for routing), the others
-- named after its arguments, which Redis allows a script without flags, so
-- decisions of many callers share a call there as on a standalone server.
-- Such a call fails whole on any error (a key the node does not hold, as
-- when a slot moves), writing nothing, and the store decides its decisions
-- again slot by slot.
--
-- Within one script call, each bucket is read at most once and written at
-- most once (flush, at the end): decisions on one bucket that share a call
-- are decided in turn on the state held here.
--
-- Calendar quotas. A limit of resolution QUOTA (255) is a quota's: C its
-- limit, K = G = 1, so that a quota's "units missing" are its count in the
-- current window and the take, charge and refund arithmetic is the
-- bucket's (a charge stops at twice the limit, as a debt stops at twice
-- the capacity). Its windows come with it (qw: the previous window's
-- start, the current one's start and end and the next one's end, in
-- microseconds since the epoch), cut by the replica from the calendar
-- around its estimate of Redis' clock, and TIME picks the one it is in:
-- time zones and calendars stay in Go, the choice of window in Redis. A
-- TIME outside all three (the estimate off by more than a window) is an
-- error (QUOTA_CLOCK), never a count in the wrong window. A quota's key
-- (named apart from any bucket's by the store) holds struct '<dd', 16
-- bytes: the start of the window it counts and the count, and expires at
-- that window's end; a count of another window is a count of zero. A
-- count below zero is a credit an operator's add gave (adjust.lua): takes
-- count up from it, and a refund leaves it as it is.

local function floordiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end

-- muldiv returns floor(a·b/c) (ceil(a·b/c) when up), or cap when that is
-- above cap, for integers 0 <= a, b < 2^51 and 0 < c < 2^51 (a·b may exceed
-- 2^53: the product is formed bit by bit, remainders kept below c). Only a
-- change of limit uses it.
local function muldiv(a, b, c, cap, up)
  if a * b < 2 ^ 53 then
    local q = floordiv(a * b, c)
    if up and q * c < a * b then q = q + 1 end
    return math.min(q, cap)
  end
  local q0 = floordiv(a, c)
  local r = a - q0 * c
  if q0 * b >= cap then return cap end
  local q, rem = 0, 0
  for i = 52, 0, -1 do
    q, rem = 2 * q, 2 * rem
    if rem >= c then q, rem = q + 1, rem - c end
    if floordiv(b, 2 ^ i) % 2 == 1 then
      rem = rem + r
      if rem >= c then q, rem = q + 1, rem - c end
    end
    if q0 * b + q >= cap then return cap end
  end
  if up and rem > 0 then q = q + 1 end
  return math.min(q0 * b + q, cap)
end

local t = redis.call('TIME')
local us = tonumber(t[2])
local now_ms = tonumber(t[1]) * 1000 + floordiv(us, 1000)
local sub = us % 1000 -- microseconds into the current millisecond

local pack, unpack = struct.pack, struct.unpack
local FORMAT, FORMAT_J = '<ddddd', '<dddddB'

-- POW10[j] is 10^j, a step of resolution j in microseconds.
local POW10 = {[0] = 1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9}

-- MAX_PXAT bounds a key's expiry (2^52 ms).
local MAX_PXAT = 2 ^ 52

-- step_now returns the current step of resolution j > 3 (a step of
-- 10^(j-3) ms, counted from the Unix epoch).
local function step_now(j)
  return floordiv(now_ms, POW10[j - 3])
end

-- steps_to returns the whole steps of resolution j > 0 from the start of
-- the current step to E (see State). (j = 0 is inlined where it is used:
-- (e - now_ms) * 1000 - sub.)
local function steps_to(e, j)
  if j <= 3 then
    local r = POW10[j]
    return (e - now_ms) * (1000 / r) - floordiv(sub, r)
  end
  return e - step_now(j)
end

-- The call's limits, by index: each script fills cap, per (K), gain (G),
-- res (j) and full (C·K) with the limits its arguments name; a limit read
-- from a bucket written under another one is added after them.
local cap, per, gain, res, full = {}, {}, {}, {}, {}

-- limit_index returns the index of limit (c, k, g, j), adding it if new.
local function limit_index(c, k, g, j)
  for l = 1, #cap do
    if cap[l] == c and per[l] == k and gain[l] == g and res[l] == j then return l end
  end
  local l = #cap + 1
  cap[l], per[l], gain[l], res[l], full[l] = c, k, g, j, c * k
  return l
end

-- The call's buckets: per key, the units missing now (0 = full), the limit
-- they are counted in, and whether the state must be written.
local M, L, dirty = {}, {}, {}

-- Q is the call's quota state (see Calendar quotas above), nil in a call
-- without a quota: tokenbucket.lua makes it when it reads the call's first
-- quota limit (a limit of resolution 255). A call of buckets alone so makes
-- no table, closure or upvalue for quotas: each is an allocation a call
-- pays for (four tables and a closure made on every call cost Redis 12% more
-- instructions a decision, docs/performance/instructions.md). Q.w[l] holds quota limit
-- l's windows {s0, s1, e1, e2}; Q.s, Q.e and Q.i hold each quota key's
-- window: its start, its end and which of the three it is (0 the previous,
-- 1 the current, 2 the next); Q.now is TIME in microseconds. missing_now
-- reads a quota's count in the window of its limit that TIME is in.
local Q

-- missing_now returns the units missing from the bucket at key now, counted
-- in limit l (0 = full; above full in debt, at most twice full); for a
-- quota, its count.
local function missing_now(key, l)
  local m = M[key]
  if m == nil then
    if res[l] == 255 then -- a quota's count, in the window TIME is in (Q)
      local w, now = Q.w[l], Q.now
      local s, e, i
      if now >= w[2] and now < w[3] then
        s, e, i = w[2], w[3], 1
      elseif now >= w[3] and now < w[4] then
        s, e, i = w[3], w[4], 2
      elseif now >= w[1] and now < w[2] then
        s, e, i = w[1], w[2], 0
      else
        error(string.format('QUOTA_CLOCK Redis clock %d us is outside the quota windows the replica sent, %d to %d', now, w[1], w[4]))
      end
      m = 0
      local v = redis.call('GET', key)
      if v then
        if #v ~= 16 then
          error('WRONGTYPE the key ' .. key .. ' holds ' .. #v .. ' bytes that are not a Floodgate quota')
        end
        local ws, n = unpack('<dd', v)
        if ws == s then m = n end
      end
      M[key], L[key], Q.s[key], Q.e[key], Q.i[key] = m, l, s, e, i
      return m
    end
    local s = redis.call('GET', key)
    if not s then
      M[key], L[key] = 0, l
      return 0
    end
    local e, v, oc, ok, og, oj
    if #s == 40 then
      e, v, oc, ok, og = unpack(FORMAT, s)
      oj = 0
    elseif #s == 41 then
      e, v, oc, ok, og, oj = unpack(FORMAT_J, s)
    else
      e, v, oc, ok, og, oj = redis.call('PEXPIRETIME', key), tonumber(s) or 0, cap[l], per[l], gain[l], res[l]
      dirty[key] = true
    end
    if not (oc >= 1 and ok >= 1 and og >= 1 and v >= 0 and e == e and POW10[oj]) then
      error('WRONGTYPE the key ' .. key .. ' holds ' .. #s .. ' bytes that are not a Floodgate bucket')
    end
    -- F − the start of the current step, in ticks: its whole steps to E
    -- times G, less v
    if oj == 0 then
      m = ((e - now_ms) * 1000 - sub) * og - v
    else
      m = steps_to(e, oj) * og - v
    end
    if m < 0 then m = 0 elseif m > 2 * oc * ok then m = 2 * oc * ok end
    M[key] = m
    if oc == cap[l] and ok == per[l] and og == gain[l] and oj == res[l] then
      L[key] = l
      return m
    end
    L[key] = limit_index(oc, ok, og, oj)
  end
  local ol = L[key]
  if ol ~= l and Q and Q.i[key] then -- a quota whose limit changed within the call: its count stands
    L[key] = l
  elseif ol ~= l then
    if m > full[ol] then -- a debt: kept, rounded up, at most a capacity
      m = full[l] + muldiv(m - full[ol], per[l], per[ol], full[l], true)
    elseif m > 0 then
      m = full[l] - muldiv(full[ol] - m, per[l], per[ol], full[l], false)
    end
    M[key], L[key], dirty[key] = m, l, true
  end
  return m
end

-- store records that the bucket at key misses m >= 0 units now (at most
-- twice its limit's full), in the limit it was last read in; flush writes it.
local function store(key, m)
  M[key], dirty[key] = m, true
end

-- flush writes every bucket this call changed, or deletes it when full.
-- Buckets of one call often share their expiry (the same millisecond): its
-- text is formatted once.
local function flush()
  local pxat = {}
  for key in pairs(dirty) do
    local m, l = M[key], L[key]
    if Q and Q.i[key] then
      if m == 0 then -- below zero: a credit an operator's adjustment gave
        redis.call('DEL', key)
      else
        redis.call('SET', key, pack('<dd', Q.s[key], m), 'PXAT', string.format('%d', math.ceil(Q.e[key] / 1000)))
      end
    elseif m <= 0 then
      redis.call('DEL', key)
    else
      local g, j = gain[l], res[l]
      local e, v
      if j <= 3 then
        local into = sub
        if j > 0 then into = floordiv(sub, POW10[j]) end
        local f = into * g + m                  -- F in ticks from the start of now_ms
        local step = 1000 / POW10[j] * g        -- ticks per millisecond
        local d = floordiv(f + step - 1, step)  -- whole milliseconds until full, rounded up
        e, v = now_ms + d, d * step - f
      else
        local d = floordiv(m + g - 1, g)        -- whole steps until full
        e, v = step_now(j) + d, d * g - m
      end
      local ms = e -- the expiry
      if j > 3 then ms = math.min(e * POW10[j - 3], MAX_PXAT) end
      local at = pxat[ms]
      if not at then
        at = string.format('%d', ms)
        pxat[ms] = at
      end
      local value
      if j == 0 then
        value = pack(FORMAT, e, v, cap[l], per[l], g)
      else
        value = pack(FORMAT_J, e, v, cap[l], per[l], g, j)
      end
      redis.call('SET', key, value, 'PXAT', at)
    end
  end
end
