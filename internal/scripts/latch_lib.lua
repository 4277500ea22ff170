-- latch_lib.lua: the helpers shared by the count-down latch scripts,
-- prepended to each of them.
--
-- A latch N keeps its count in P{N}:latch as a decimal string, always with
-- a PX expiry, deleted when the count reaches zero. An absent (or expired)
-- key reads as zero. P{N}:latch:calls remembers recent calls (below).
-- P{N}:latch:zero marks a count that a CountDown took to zero, for the
-- latch's TTL, until TrySetCount starts a new count: a waiter that saw the
-- latch counting and finds it gone tells a count-down to zero (the mark is
-- there) from an expiry (it is not). P{N}:latch:round (below) tells the
-- same even after a TrySetCount started a new count; the zero mark stays
-- for the waiters of older dlock versions, which read only it.

-- latch_count returns the latch's count, 0 when the key is absent. It raises
-- DLOCK_CONFLICT (GET raises WRONGTYPE) when the key holds something no
-- latch wrote: a value of another type, a string that is not a positive
-- whole number, or one without an expiry.
local function latch_count(key)
  local v = redis.call('GET', key)
  if not v then
    return 0
  end
  local n = tonumber(v)
  if not n or n < 1 or n ~= math.floor(n) then
    error('DLOCK_CONFLICT ' .. key .. ' does not hold a latch count')
  end
  if redis.call('PTTL', key) == -1 then
    error('DLOCK_CONFLICT ' .. key .. ' has no expiry: no latch wrote it')
  end
  return n
end

-- A latch also remembers, for a while, the calls that changed it: the
-- sorted set P{N}:latch:calls holds each TrySetCount or CountDown call id
-- that took effect, scored by the server ms when it did. A Redis client
-- sends a command again when it lost the reply (go-redis does on a read
-- timeout or a reset connection), and without this a CountDown sent twice
-- would count twice. Entries older than the memory are dropped by the next
-- call; the key expires one memory after the last.

-- latch_applied reports whether call id already took effect. Every call
-- gives the calls key an expiry, so one without is not a latch's: it raises
-- DLOCK_CONFLICT (another type raises WRONGTYPE at ZSCORE), before any
-- write, as every caller asks this first.
local function latch_applied(calls, id)
  if redis.call('PTTL', calls) == -1 then
    error('DLOCK_CONFLICT ' .. calls .. ' has no expiry: no latch wrote it')
  end
  return redis.call('ZSCORE', calls, id) ~= false
end

-- latch_remember records that call id took effect, for memory_ms.
local function latch_remember(calls, id, memory_ms)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('ZREMRANGEBYSCORE', calls, '-inf', now - tonumber(memory_ms))
  redis.call('ZADD', calls, now, id)
  redis.call('PEXPIRE', calls, memory_ms)
end


-- P{N}:latch:round counts the latch's rounds, so that a waiter that saw a
-- count running learns how it ended even when TrySetCount has started the
-- next one before the waiter looked again. It holds
-- "<epoch> <zeros> <open> <prev epoch> <prev zeros>":
--   epoch       the server µs when this record began;
--   zeros       how many counts a CountDown took to zero since then;
--   open        1 while a count set since the last zero may be running;
--   prev epoch, prev zeros   the record that a count's expiry ended (0 0
--               when there was none).
-- Within one epoch every count ended at zero, so a waiter that saw a count
-- running at (epoch, zeros) knows it reached zero once zeros is higher in
-- that epoch, or in the prev fields of the next one; it knows it expired
-- when the next epoch's prev fields still hold its zeros. A TrySetCount
-- that finds the count gone while open starts a new epoch: the count
-- expired (or an older dlock counted it down: then the zero mark is there,
-- and it is counted as a zero instead). The record is rewritten by every
-- TrySetCount and CountDown that changes the count, with an expiry never
-- shorter than it had, of the latch's TTL plus the TTL or a minute,
-- whichever is longer (ARGV keep ms): it outlives the count, so a waiter
-- that looks when the count it saw would have expired, late by its jitter
-- or a slow network, still finds it.

-- latch_round returns the latch's round record, nil when absent. It raises
-- DLOCK_CONFLICT (GET raises WRONGTYPE) when the key holds something no
-- latch wrote.
local function latch_round(key)
  local v = redis.call('GET', key)
  if not v then
    return nil
  end
  local e, z, o, pe, pz = string.match(v, '^(%d+) (%d+) ([01]) (%d+) (%d+)$')
  if not e then
    error('DLOCK_CONFLICT ' .. key .. ' does not hold a latch round')
  end
  if redis.call('PTTL', key) == -1 then
    error('DLOCK_CONFLICT ' .. key .. ' has no expiry: no latch wrote it')
  end
  return {epoch = tonumber(e), zeros = tonumber(z), open = o == '1',
          prev_epoch = tonumber(pe), prev_zeros = tonumber(pz)}
end

-- latch_new_round returns a new epoch's record, after prev (nil: none).
local function latch_new_round(prev)
  local t = redis.call('TIME')
  local r = {epoch = tonumber(t[1]) * 1000000 + tonumber(t[2]), zeros = 0,
             open = false, prev_epoch = 0, prev_zeros = 0}
  if prev then
    r.prev_epoch, r.prev_zeros = prev.epoch, prev.zeros
  end
  return r
end

-- latch_save_round writes round record r, to expire in keep_ms or later.
local function latch_save_round(key, r, keep_ms)
  local px = math.max(redis.call('PTTL', key), tonumber(keep_ms))
  local open = 0
  if r.open then
    open = 1
  end
  redis.call('SET', key, string.format('%.0f %.0f %d %.0f %.0f',
    r.epoch, r.zeros, open, r.prev_epoch, r.prev_zeros), 'PX', px)
end
