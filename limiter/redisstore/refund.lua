-- Floodgate's refund: give back what tokenbucket.lua took from some buckets.
-- (Runs after bucket.lua, which reads the clock and defines the state.)
--
-- Used only for a decision whose buckets live in several Redis Cluster
-- slots: the token-bucket script runs once per slot, and when one slot's
-- takes deny, the slots whose takes were charged are refunded with this
-- script, so that in the end no take paid (see redisstore.go,
-- takeAcrossSlots). It undoes takes only: a decision's charges and refunds
-- (request kinds of tokenbucket.lua) stand whatever its takes decide, so
-- they are never sent here.
--
-- KEYS[i]  the Redis key of bucket i.
--          A quota's (j = 255) sends its limit, 1, the start of the window
--          its take was counted in, 255 and its cost: the count is given
--          back in that window only (a window over since has been
--          forgotten, and the next one counts from zero).
-- ARGV     five integers per bucket, in KEYS order: capacity C (tokens),
--          K (units per token), G (units gained per step), the resolution
--          j (a step is 10^j µs) and the cost n to give back.
-- Returns  {m_1, ..., m_n}: the units missing from bucket i after the refund.
--
-- The refund computes the units missing now, takes n·K off, floored at 0 (a
-- bucket cannot be fuller than full), and writes the new state, or deletes
-- the key when the bucket is full. A refund made at the instant of the
-- charge restores the key's expiry and value exactly; made later, it yields
-- what the bucket would hold had it never been charged (unless, in between,
-- the uncharged bucket would have reached full: then the floor hands back at
-- most what refilled meanwhile).

local out = {}
for i = 1, #KEYS do
  local a = (i - 1) * 5
  local c, k, g, j, cost = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])
  if j == 255 then -- a quota's (see KEYS above)
    local n = 0
    local v = redis.call('GET', KEYS[i])
    if v and #v == 16 then
      local ws, m = unpack('<dd', v)
      if ws == g then
        -- The undoing of a take counted in this window: exact within an
        -- operator's credit (a count below zero, see bucket.lua), never
        -- below zero otherwise.
        n = m - cost
        if m >= 0 and n < 0 then n = 0 end
        if n ~= 0 then
          redis.call('SET', KEYS[i], pack('<dd', ws, n), 'KEEPTTL')
        else
          redis.call('DEL', KEYS[i])
        end
      end
    end
    out[i] = n
  else
    local m = missing_now(KEYS[i], limit_index(c, k, g, j)) - cost * k
    if m < 0 then m = 0 end
    store(KEYS[i], m)
    out[i] = m
  end
end
flush()
return out
