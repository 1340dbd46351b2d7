-- Floodgate's bucket state in Redis: how a bucket is read and written. Both
-- scripts (tokenbucket.lua, refund.lua) are this file followed by their own
-- body, so the encoding exists once.
--
-- State. A bucket is full at one exact instant F, counted in "ticks" (one tick
-- = 1/G microsecond, so one unit accrues per tick) of the limit it was last
-- written under. The key holds five doubles (struct '<ddddd', 40 bytes):
-- E = ceil(F) in milliseconds, v = E·1000·G − F in [0, 1000·G), and that
-- limit's C, K and G. The key also expires at E, the moment the bucket is
-- full, so an idle caller costs no memory; but one GET reads the whole state.
-- A missing key is a full bucket. Time is Redis' own (TIME), never the
-- caller's, so replicas with skewed clocks mint nothing. (A value that is a
-- bare decimal integer is the previous encoding: v alone, E the key's expiry,
-- the limit the request's; it is read once and rewritten in this one.)
--
-- A change of limit. When a decision names a bucket with a limit other than
-- the one its state was written under (a policy's numbers changed by a
-- reload), the bucket keeps the tokens it held under the old limit at this
-- instant, capped at the new capacity and rounded down to the new limit's
-- unit, and refills at the new rate from then on; a bucket full under the old
-- limit is full under the new one, as a forgotten bucket is. The state is
-- rewritten under the new limit even when the decision charges nothing.
--
-- Arithmetic. All values are integers below 2^51 (the Go side checks C·K and
-- 1000·G against 2^50), so Lua's doubles hold them exactly. Large times are
-- never multiplied: ticks are counted from now_ms, the current millisecond.
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

local function floordiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end

-- muldiv returns floor(a·b/c), or cap when that is above cap, for integers
-- 0 <= a, b < 2^51 and 0 < c < 2^51 (a·b may exceed 2^53: the product is
-- formed bit by bit, remainders kept below c). Only a change of limit uses it.
local function muldiv(a, b, c, cap)
  if a * b < 2 ^ 53 then return math.min(floordiv(a * b, c), cap) end
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
  return q0 * b + q
end

local t = redis.call('TIME')
local us = tonumber(t[2])
local now_ms = tonumber(t[1]) * 1000 + floordiv(us, 1000)
local sub = us % 1000 -- microseconds into the current millisecond

local pack, unpack = struct.pack, struct.unpack
local FORMAT = '<ddddd'

-- The call's limits, by index: each script fills cap, per (K), gain (G)
-- and full (C·K) with the limits its arguments name; a limit read from a
-- bucket written under another one is added after them.
local cap, per, gain, full = {}, {}, {}, {}

-- limit_index returns the index of limit (c, k, g), adding it if new.
local function limit_index(c, k, g)
  for l = 1, #cap do
    if cap[l] == c and per[l] == k and gain[l] == g then return l end
  end
  local l = #cap + 1
  cap[l], per[l], gain[l], full[l] = c, k, g, c * k
  return l
end

-- The call's buckets: per key, the units missing now (0 = full), the limit
-- they are counted in, and whether the state must be written.
local M, L, dirty = {}, {}, {}

-- missing_now returns the units missing from the bucket at key now, counted
-- in limit l (0 = full, at most full).
local function missing_now(key, l)
  local m = M[key]
  if m == nil then
    local s = redis.call('GET', key)
    if not s then
      M[key], L[key] = 0, l
      return 0
    end
    local e, v, oc, ok, og
    if #s == 40 then
      e, v, oc, ok, og = unpack(FORMAT, s)
      if not (oc >= 1 and ok >= 1 and og >= 1 and v >= 0 and e == e) then
        error('WRONGTYPE the key ' .. key .. ' holds 40 bytes that are not a Floodgate bucket')
      end
    else
      e, v, oc, ok, og = redis.call('PEXPIRETIME', key), tonumber(s) or 0, cap[l], per[l], gain[l]
      dirty[key] = true
    end
    -- F − now, in ticks: (E − now_ms)·1000·G − v − sub·G
    m = (e - now_ms) * 1000 * og - v - sub * og
    if m < 0 then m = 0 elseif m > oc * ok then m = oc * ok end
    M[key] = m
    if oc == cap[l] and ok == per[l] and og == gain[l] then
      L[key] = l
      return m
    end
    L[key] = limit_index(oc, ok, og)
  end
  local ol = L[key]
  if ol ~= l then
    if m > 0 then
      m = full[l] - muldiv(full[ol] - m, per[l], per[ol], full[l])
    end
    M[key], L[key], dirty[key] = m, l, true
  end
  return m
end

-- store records that the bucket at key misses m >= 0 units now, in the
-- limit it was last read in; flush writes it.
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
    if m <= 0 then
      redis.call('DEL', key)
    else
      local g = gain[l]
      local f = sub * g + m                   -- F in ticks from the start of now_ms
      local step = 1000 * g                   -- ticks per millisecond
      local d = floordiv(f + step - 1, step)  -- whole milliseconds until full, rounded up
      local e = now_ms + d
      local at = pxat[e]
      if not at then
        at = string.format('%d', e)
        pxat[e] = at
      end
      redis.call('SET', key, pack(FORMAT, e, d * step - f, cap[l], per[l], g), 'PXAT', at)
    end
  end
end
