-- latch_lib.lua: the helpers shared by the count-down latch scripts,
-- prepended to each of them.
--
-- A latch N keeps its count in P{N}:latch as a decimal string, always with
-- a PX expiry, deleted when the count reaches zero. An absent (or expired)
-- key reads as zero. P{N}:latch:calls remembers recent calls (below).
-- P{N}:latch:zero marks a count that a CountDown took to zero, for the
-- latch's TTL, until TrySetCount starts a new count: a waiter that saw the
-- latch counting and finds it gone tells a count-down to zero (the mark is
-- there) from an expiry (it is not).

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

-- latch_applied reports whether call id already took effect.
local function latch_applied(calls, id)
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

