-- rw_acquire.lua: take a read-write lock in one mode, or wait in its queue.
-- KEYS: 1 holders, 2 fence, 3 queue, 4 waiters, 5 tokens (see rw_lib.lua)
-- ARGV: 1 member (mode "W" or "R", then the owner value), 2 ttl ms,
--       3 flags: two characters, "1" to join (or stay in) the queue when
--       not granted or "0" not to, then "s" when grants are announced with
--       SPUBLISH or "p" for PUBLISH, 4 timings: "<waiter lease ms> <grant
--       px> <fence retention ms>" (as mutex_acquire.lua's). The lock's
--       channel is its holders key. Few arguments: the server pays for each
--       on every call, and the fast path reads the first two and, for a
--       fresh fencing counter, the last.
-- Returns: fence alone: the fast path below took the free lock for ttl ms.
--          {1, fence, pttl}: member holds the lock now (taken by this call,
--          or handed over earlier while it waited); pttl is its remaining ms.
--          {0, pttl, queued, free, fence}: not granted; pttl is the
--          longest remaining time of the current holders, queued 1 when
--          member is in the queue (0 if not), free 1 when the
--          holders would let member in but others queued first (a reader
--          behind a waiting writer), else 0, fence the last token issued
--          (see mutex_acquire.lua).
--          Error DLOCK_CONFLICT (or WRONGTYPE) when the holders key is not a
--          lock's; nothing is modified then.
-- Rules: a writer is granted when nobody holds the lock and nobody live is
-- queued ahead of it; a reader when no writer holds it and nobody live is
-- queued ahead of it. Readers only ever queue behind a writer (holding or
-- waiting), so once a writer waits, new readers wait behind it.
local member = ARGV[1]

-- The common case first, before the helpers are even defined (that costs
-- more than this whole path, see mutex_acquire.lua): nobody holds the lock
-- or waits for it, so it is free for either mode, and member takes it in
-- the solo form (rw_lib.lua), as a Mutex is taken. The queue is checked
-- so that a newcomer never goes past a waiter (a reader past a queued
-- writer); a foreign queue key exists, and goes to the full path. SET NX
-- writes nothing over a key that exists, whatever it holds; the waiters
-- and tokens keys are not read here, so they cannot be foreign for it (the
-- holder's release never reads them either). A fencing key Redis will not
-- INCR (a foreign value, an ACL) undoes the SET within this same atomic
-- script, and the full path below reports what it found.
if redis.call('EXISTS', KEYS[3]) == 0 and redis.call('SET', KEYS[1], member, 'NX', 'PX', ARGV[2]) then
  -- A used counter's expiry stays: this path returns its token itself.
  --@fence(KEYS[2], string.match(ARGV[4], '(%d+)$'))
  if type(token) == 'number' then
    return token -- bare: the caller knows px
  end
  redis.call('DEL', KEYS[1])
end
--@lib
local mode = string.sub(member, 1, 1)
local join = string.sub(ARGV[3], 1, 1) == '1'
local publish = string.sub(ARGV[3], 2) == 's' and 'SPUBLISH' or 'PUBLISH'
local lease_ms, grant_px, retention_ms = string.match(ARGV[4], '^(%d+) (%d+) (%d+)$')
local solo, solo_pttl = rw_solo(KEYS[1])
local now_us, now_ms = rw_time()

-- member holds the lock alone: a grant from the queue it has not heard of
-- yet, or this same call sent again after its reply was lost. Its token is
-- the fencing key's (rw_unsolo), read as the full path would, which a
-- foreign fencing key is left to report.
if solo == member and solo_pttl > 0 then
  local fence = redis.pcall('GET', KEYS[2])
  if type(fence) == 'string' and dlock_counter(fence) then
    dlock_dequeue(KEYS[3], KEYS[4], member)
    return {1, tonumber(fence), solo_pttl}
  end
end

-- The common waiting case, at the cost of mutex_acquire.lua's: a writer
-- holds the lock and its hold has not expired. A writer holds alone, so
-- nobody can be granted and no holder needs pruning: member (not that
-- writer) only stays in the queue, as the full path below would leave it.
-- Dead waiters ahead of member stay for the release's grant to drop, as in
-- the Mutex's queue. Every key this path reads or writes is checked before
-- HSET, its first write: holders by rw_solo above and ZRANGE (WRONGTYPE),
-- the fencing key and the tokens hash here (a foreign one sends the call
-- to the full path, which reports it), the queue by ZSCORE and the waiters
-- by HSET itself (WRONGTYPE, see dlock_enqueue).
local writer, writer_pttl
if solo then
  writer, writer_pttl = solo, solo_pttl
else
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if #first == 2 then
    writer, writer_pttl = first[1], tonumber(first[2]) - now_ms
  end
end
if writer and string.sub(writer, 1, 1) == 'W' and writer ~= member and writer_pttl > 0 then
  local fence = redis.pcall('GET', KEYS[2])
  local tokens = redis.call('TYPE', KEYS[5]).ok
  if type(fence) ~= 'table' and (not fence or dlock_counter(fence)) and (tokens == 'none' or tokens == 'hash') then
    local queued = 0
    if join then
      queued = dlock_enqueue(KEYS[3], KEYS[4], member, now_us, lease_ms, grant_px)
    end
    return {0, writer_pttl, queued, 0, tonumber(fence or '0')}
  end
end

rw_check_keys(KEYS)
if solo then
  rw_unsolo(KEYS, solo, solo_pttl, now_ms)
end
rw_prune(KEYS, now_ms)

local score = redis.call('ZSCORE', KEYS[1], member)
if not score then
  -- Hand the lock to the queue's head if it is free for it now (a holder
  -- expired, a waiter left); member itself, at the head, gets its full TTL.
  -- A writer granted holds alone, in the solo form: member is either it,
  -- or waits behind it as on the waiting path above.
  local _, writer, token, px = rw_grant_heads(KEYS, now_us, now_ms, retention_ms, publish, KEYS[1], member, ARGV[2])
  if writer == member then
    return {1, token, px}
  elseif writer then
    local queued = 0
    if join then
      queued = dlock_enqueue(KEYS[3], KEYS[4], member, now_us, lease_ms, grant_px)
    end
    return {0, px, queued, 0, token}
  end
  score = redis.call('ZSCORE', KEYS[1], member)
end
if score then
  dlock_dequeue(KEYS[3], KEYS[4], member)
  return {1, rw_token(KEYS, member), tonumber(score) - now_ms}
end

-- Not queued ahead of anyone live, or the queue would have granted member.
if redis.call('EXISTS', KEYS[3]) == 0 and rw_free_for(KEYS, mode) then
  local token = rw_hold(KEYS, member, ARGV[2], now_us, now_ms, retention_ms)
  return {1, token, tonumber(ARGV[2])}
end

local queued = 0
if join then
  queued = dlock_enqueue(KEYS[3], KEYS[4], member, now_us, lease_ms, grant_px)
end
local pttl = 0
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if #last > 0 then
  pttl = tonumber(last[2]) - now_ms
end
return {0, pttl, queued, rw_free_for(KEYS, mode) and 1 or 0, dlock_last_fence(KEYS[2])}
