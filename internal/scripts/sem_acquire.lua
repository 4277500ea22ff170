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
local now_us, now_ms = sem_now()

-- The common waiting case, at the cost of mutex_acquire.lua's: no limit
-- stored, no holder expired, owner not among the holders, and every permit
-- held or the live waiter at the head of the queue asking for more than is
-- free. Grants go in arrival order and stop at that head, so nobody can be
-- granted and no holder needs pruning: owner only stays in the queue, as
-- the full path below would leave it. Anything else (a holder's entry that
-- does not parse, a dead head with permits free) goes to the full path.
-- Every key this path reads or writes is checked before HSET, its first
-- write: holders and counts by PTTL (no expiry: no semaphore wrote them)
-- and by ZRANGE and HGET (WRONGTYPE), the limit by EXISTS, the fencing key
-- here (a foreign one goes to the full path, which reports it), the queue
-- by ZRANGE or ZSCORE and the waiters by HGET or HSET (WRONGTYPE).
if n <= tonumber(ARGV[3]) and redis.call('EXISTS', KEYS[3]) == 0
    and redis.call('PTTL', KEYS[1]) > 0 and redis.call('PTTL', KEYS[2]) > 0 then
  local limit = tonumber(ARGV[3])
  local holders = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
  local used = 0
  local waiting = #holders > 0 and tonumber(holders[2]) > now_ms
  for i = 1, #holders, 2 do
    local held = waiting and holders[i] ~= owner and sem_held(redis.call('HGET', KEYS[2], holders[i]))
    if not held then
      waiting = false
      break
    end
    used = used + held
  end
  -- Every permit held: no request fits (each asks for one at least), and a
  -- dead or oversized head waits for the next grant to drop it, as a dead
  -- one does in the Mutex's queue. Otherwise the head decides.
  local full = waiting and used >= limit
  if waiting and not full then
    local head = redis.call('ZRANGE', KEYS[5], 0, 0)
    local live, _, extra = false, nil, nil
    if #head == 1 then
      live, _, extra = dlock_waiter(KEYS[6], head[1], now_ms)
    end
    local ask = live and tonumber(extra)
    full = ask and ask <= limit and used + ask > limit
  end
  if full then
    local fence = redis.pcall('GET', KEYS[4])
    if type(fence) ~= 'table' and (not fence or tonumber(fence)) then
      local position = 0
      if ARGV[6] == '1' then
        position = dlock_enqueue(KEYS[5], KEYS[6], owner, now_us, ARGV[7], ARGV[8], ARGV[2])
      end
      return {0, tonumber(holders[2]) - now_ms, position, limit - used, tonumber(fence or '0')}
    end
  end
end

sem_check(6)
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
