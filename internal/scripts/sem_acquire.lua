-- sem_acquire.lua: take n permits of a semaphore, or wait for them in its
-- queue.
-- KEYS: 1 holders, 2 counts, 3 limit, 4 fence, 5 queue, 6 waiters
--       (see sem_lib.lua)
-- ARGV: 1 owner value, 2 n, 3 permits (the limit unless SetPermits stored
--       one), 4 limit retention ms, 5 ttl ms, 6 "1" to join (or stay in) the
--       queue when not granted, "0" not to, 7 waiter lease ms, 8 grant px
--       (the claim window a grant to this waiter gives), 9 fence retention
--       ms, 10 publish command, 11 channel
-- Returns: fence alone: the fast path below took the permits for ttl ms.
--          {1, fence, pttl}: owner holds its permits now (taken by this
--          call, or granted earlier while it waited); pttl is their
--          remaining ms.
--          {0, pttl, position, free, fence}: not enough permits are free,
--          or others queued first; pttl is the ms until the first holder's
--          permits expire (0: no holder), position owner's 1-based place
--          in the queue (0: not queued), free the permits not held (enough
--          for owner when others queued first), fence the last token
--          issued (a grant heard later with a token no higher was made
--          before this call: see mutex_acquire.lua).
--          Error DLOCK_LIMIT <limit> when n exceeds the limit in force:
--          the request can never be served, and owner is no longer queued.
--          Error DLOCK_CONFLICT (or WRONGTYPE) when a key holds something no
--          semaphore wrote; nothing is modified then.
local owner, n = ARGV[1], tonumber(ARGV[2])

-- The common case first, before the helpers are even defined (that costs
-- more than this whole path, see mutex_acquire.lua): a semaphore nobody
-- holds or waits for, with no limit stored, and enough permits. The keys
-- that do not exist cannot be foreign; the fencing key is the one read,
-- and its INCR under pcall writes nothing when it fails (a foreign value,
-- an ACL, maxmemory): the full path below then reports what it found.
if n <= tonumber(ARGV[3]) and redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[3], KEYS[5], KEYS[6]) == 0 then
  -- A used counter's expiry stays: this path returns its token itself.
  --@fence(KEYS[4], ARGV[9])
  if type(token) == 'number' then
    local t = redis.call('TIME')
    local px = tonumber(ARGV[5])
    local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    redis.call('ZADD', KEYS[1], string.format('%.0f', now_ms + px), owner)
    redis.call('HSET', KEYS[2], owner, string.format('%.0f %.0f', n, token))
    redis.call('PEXPIRE', KEYS[1], px)
    redis.call('PEXPIRE', KEYS[2], px)
    return token -- bare: the caller knows px
  end
end
--@lib
sem_check(6)
local now_us, now_ms = sem_now()
local limit = sem_limit(ARGV[3], ARGV[4])
sem_drop_expired(now_ms)

local held = sem_holding(owner, now_ms)
if held then
  dlock_dequeue(KEYS[5], KEYS[6], owner)
  return held
end
if n > limit then
  dlock_dequeue(KEYS[5], KEYS[6], owner)
  return redis.error_reply('DLOCK_LIMIT ' .. string.format('%.0f', limit))
end

-- Serve the queue first (permits may have come back by expiry, which
-- nobody announces); owner itself may be among those served.
local used = sem_grant_queued(now_us, limit, sem_used(), ARGV[9], ARGV[10], ARGV[11], owner, ARGV[5])
held = sem_holding(owner, now_ms)
if held then
  return held
end

-- Nobody queued ahead (every waiter was served) and enough free: take them.
if redis.call('EXISTS', KEYS[5]) == 0 and used + n <= limit then
  local token = dlock_issue_fence(KEYS[4], ARGV[9])
  sem_add_holder(owner, n, token, now_ms, tonumber(ARGV[5]))
  return {1, token, tonumber(ARGV[5])}
end

local position = 0
if ARGV[6] == '1' then
  position = dlock_enqueue(KEYS[5], KEYS[6], owner, now_us, ARGV[7], ARGV[8], ARGV[2])
end
local pttl = 0
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #first == 2 then
  pttl = tonumber(first[2]) - now_ms
end
return {0, pttl, position, limit - used, dlock_last_fence(KEYS[4])}
