-- sem_acquire.lua: take n permits of a semaphore, or wait for them in its
-- queue.
-- KEYS: 1 holders, 2 counts, 3 limit, 4 fence, 5 queue, 6 waiters
--       (see sem_lib.lua); the holders key's name is also the channel of
--       grants
-- ARGV: 1 owner value, 2 n, 3 ttl ms, 4 "1" to join (or stay in) the queue
--       when not granted, "0" not to, then "+" when n is at most the
--       permits of ARGV[5] (the caller checks, so that the fast path parses
--       no number), 5 the semaphore's settings: "<permits>
--       <limit retention ms> <waiter lease ms> <grant px> <fence retention
--       ms> <publish command>", where permits is the limit unless SetPermits
--       stored one, and grant px the claim window a grant to a waiter gives
--       (one string: the server pays for each argument on every call, and
--       the fast path reads only the first four)
-- Returns: fence alone: the fast path below took the permits for ttl ms.
--          {1, fence, pttl}: owner holds its permits now (taken by this
--          call, or granted earlier while it waited); pttl is their
--          remaining ms.
--          {0, pttl, queued, free, fence}: not enough permits are free,
--          or others queued first; pttl is the ms until the first holder's
--          permits expire (0: no holder), queued 1 when owner is
--          in the queue (0: not queued), free the permits not held (enough
--          for owner when others queued first), fence the last token
--          issued (a grant heard later with a token no higher was made
--          before this call: see mutex_acquire.lua).
--          Error DLOCK_LIMIT <limit> when n exceeds the limit in force:
--          the request can never be served, and owner is no longer queued.
--          Error DLOCK_CONFLICT (or WRONGTYPE) when a key holds something no
--          semaphore wrote; nothing is modified then.
local owner = ARGV[1]

-- The common case first, before the helpers are even defined (that costs
-- more than this whole path, see mutex_acquire.lua): a semaphore nobody
-- holds or waits for, with no limit stored, and enough permits. Its
-- permits are taken in the solo form (sem_lib.lua), one SET as a Mutex's
-- lock is. The keys that do not exist cannot be foreign; the fencing key
-- is the one read, and its INCR under pcall writes nothing when it fails
-- (a foreign value, an ACL, maxmemory): the full path below then reports
-- what it found.
if (ARGV[4] == '1+' or ARGV[4] == '0+') and redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[3], KEYS[5], KEYS[6]) == 0 then
  -- A used counter's expiry stays: this path returns its token itself.
  --@fence(KEYS[4], string.match(ARGV[5], '(%d+) %a+$'))
  if type(token) == 'number' then
    redis.call('SET', KEYS[1], owner .. ' ' .. ARGV[2] .. ' ' .. string.format('%d', token), 'PX', ARGV[3])
    return token -- bare: the caller knows px
  end
end
--@lib
local n, join = tonumber(ARGV[2]), string.sub(ARGV[4], 1, 1) == '1'
local permits, limit_retention, lease_ms, grant_px, fence_retention, publish =
  string.match(ARGV[5], '^(%d+) (%d+) (%d+) (%d+) (%d+) (%a+)$')
local now_us, now_ms = sem_now()

-- The common waiting case, at the cost of mutex_acquire.lua's: no limit
-- stored, no holder expired, owner not among the holders, and every permit
-- held or the live waiter at the head of the queue asking for more than is
-- free. Grants go in arrival order and stop at that head, so nobody can be
-- granted and no holder needs pruning: owner only stays in the queue, as
-- the full path below would leave it, and a solo holder stays solo.
-- Anything else (a holder's entry that does not parse, a dead head with
-- permits free) goes to the full path. Every key this path reads or writes
-- is checked before HSET, its first write: holders by PTTL (no expiry: no
-- semaphore wrote it) and by GET and sem_solo, or ZRANGE; counts, in the
-- zset form, by PTTL and HGET (WRONGTYPE); the limit by EXISTS, the fencing
-- key here (a foreign one goes to the full path, which reports it), the
-- queue by ZRANGE or ZSCORE and the waiters by HGET or HSET (WRONGTYPE).
local holders_pttl = n <= tonumber(permits) and redis.call('EXISTS', KEYS[3]) == 0 and redis.call('PTTL', KEYS[1])
if holders_pttl and holders_pttl > 0 then
  local limit = tonumber(permits)
  local used, first_ms
  local solo = redis.pcall('GET', KEYS[1])
  if type(solo) == 'string' then
    local held, fence, holder = sem_solo(solo)
    if held and holder == owner then
      -- A grant from the queue owner has not heard of yet, or this same
      -- call sent again after its reply was lost: it holds alone.
      dlock_dequeue(KEYS[5], KEYS[6], owner)
      return {1, fence, holders_pttl}
    elseif held then
      used, first_ms = held, now_ms + holders_pttl
    end
  elseif redis.call('PTTL', KEYS[2]) > 0 then
    local holders = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
    if #holders > 0 and tonumber(holders[2]) > now_ms then
      used, first_ms = 0, tonumber(holders[2])
      for i = 1, #holders, 2 do
        local held = holders[i] ~= owner and sem_held(redis.call('HGET', KEYS[2], holders[i]))
        if not held then
          used = nil
          break
        end
        used = used + held
      end
    end
  end
  -- Every permit held: no request fits (each asks for one at least), and a
  -- dead or oversized head waits for the next grant to drop it, as a dead
  -- one does in the Mutex's queue. Otherwise the head decides.
  local full = used and used >= limit
  if used and not full then
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
      local queued = 0
      if join then
        queued = dlock_enqueue(KEYS[5], KEYS[6], owner, now_us, lease_ms, grant_px, ARGV[2])
      end
      return {0, first_ms - now_ms, queued, limit - used, tonumber(fence or '0')}
    end
  end
end

-- Every path below works on the zset form: a solo holder joined by a
-- waiter or a second holder is converted once, here.
sem_unsolo(now_ms, 6)
sem_check(6)
local limit = sem_limit(permits, limit_retention)
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
-- nobody announces); owner itself may be among those served. A waiter
-- left holding alone holds in the solo form: owner, or another whose
-- string the paths below must not read as a zset.
local used, _, lone, lone_token = sem_grant_queued(now_us, limit, sem_used(), fence_retention, publish, KEYS[1], owner, ARGV[3])
if lone == owner then
  return {1, lone_token, tonumber(ARGV[3])}
end
held = not lone and sem_holding(owner, now_ms)
if held then
  return held
end

-- Nobody queued ahead (every waiter was served) and enough free: take them.
if redis.call('EXISTS', KEYS[5]) == 0 and used + n <= limit then
  if lone then
    sem_unsolo(now_ms, 6) -- owner joins the waiter granted alone
  end
  local token = dlock_issue_fence(KEYS[4], fence_retention)
  sem_add_holder(owner, n, token, now_ms, tonumber(ARGV[3]))
  return {1, token, tonumber(ARGV[3])}
end

local queued = 0
if join then
  queued = dlock_enqueue(KEYS[5], KEYS[6], owner, now_us, lease_ms, grant_px, ARGV[2])
end
local pttl = 0
if lone then
  pttl = redis.call('PTTL', KEYS[1])
else
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if #first == 2 then
    pttl = tonumber(first[2]) - now_ms
  end
end
return {0, pttl, queued, limit - used, dlock_last_fence(KEYS[4])}
