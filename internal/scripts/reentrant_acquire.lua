-- reentrant_acquire.lua: take a reentrant lock, add a hold to it when the
-- owner already holds it, or wait in its queue.
-- KEYS: 1 lock (the grant: the hold id that took it, then the holder's owner
--       value; PX), 2 fence, 3 queue, 4 waiters (see lock_lib.lua), 5 holds
--       (set of the holder's hold ids, same PX; see below)
-- ARGV: 1 member: the hold id (32 hex digits) followed by the owner value,
--       2 ttl ms, 3 "1" to join (or stay in) the queue when not granted,
--       "0" not to, 4 mode and 5 timings, as mutex_acquire.lua's (the first
--       character of the mode is not read: a free reentrant lock never goes
--       past a queued waiter); the lock's channel is its key.
-- Returns: fence (a bare integer): the owner took the free lock with this
--          hold, for ARGV[2] ms (the fast path below).
--          {1, fence, pttl, holds, grant}: the owner holds the lock and this
--          hold is counted (taken now, nested, or handed over while waiting);
--          holds is the owner's hold count, grant the id of the hold that
--          took this grant of the lock.
--          {0, holder pttl, queued, fence}: another owner holds it;
--          queued is 1 when the hold is in the queue, else 0; fence is the last token issued (see mutex_acquire.lua).
-- The holds: while the holds set is absent, the owner holds the lock once,
-- with the hold that took the grant (the lock's value names it), so the
-- common single hold writes nothing but the lock. A second hold creates the
-- set with both ids; from then on the set alone counts, until its last id
-- is removed with the lock. Holds are ids, not a counter: an acquire
-- retried after a lost reply adds nothing, so it never counts twice
-- (Redisson issue #7367).
-- The key names the grant, not only the owner: a renewal or a TTL of an
-- earlier grant of the same owner (deleted by ForceUnlock, evicted, or
-- expired while its process was paused) compares the whole value, and so
-- never acts on a newer grant.

-- The common case first, before the helpers are even defined (that costs
-- more than this whole path, see mutex_acquire.lua): the lock free, nobody
-- queued and no holds set left (one would count for the new grant). The
-- fencing key is the one key read; its INCR under pcall writes nothing when
-- it fails (a foreign value, an ACL), and the lock just set is deleted
-- again within this atomic script: the full path below then reports what
-- it found.
if redis.call('EXISTS', KEYS[3], KEYS[5]) == 0 and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  --@fence(KEYS[2], string.match(ARGV[5], '(%d+)$'))
  if type(token) == 'number' then
    return token
  end
  redis.call('DEL', KEYS[1])
end
local member = ARGV[1]
local hold, owner = string.sub(member, 1, 32), string.sub(member, 33)
--@lib
local lease_ms, grant_px, retention_ms = string.match(ARGV[5], '^(%d+) (%d+) (%d+)$')
local publish = string.sub(ARGV[4], 2) == 's' and 'SPUBLISH' or 'PUBLISH'

-- hold_on counts this hold on the owner's grant, which the hold `grant`
-- took, for pttl ms: the grant's own hold needs no set while it is alone.
local function hold_on(pttl, grant)
  local holds = 1
  local counted = redis.call('EXISTS', KEYS[5]) == 1
  if counted or grant ~= hold then
    if counted then
      redis.call('SADD', KEYS[5], hold)
    else
      redis.call('SADD', KEYS[5], grant, hold) -- the grant's hold is live: the set is absent
    end
    redis.call('PEXPIRE', KEYS[5], pttl)
    holds = redis.call('SCARD', KEYS[5])
  end
  dlock_dequeue(KEYS[3], KEYS[4], member)
  return {1, dlock_last_fence(KEYS[2]), pttl, holds, grant}
end

local cur = redis.call('GET', KEYS[1])
if cur and string.sub(cur, 33) == owner then
  if redis.call('TYPE', KEYS[5]).ok ~= 'set' and redis.call('EXISTS', KEYS[5]) == 1 then
    return redis.error_reply('DLOCK_CONFLICT ' .. KEYS[5] .. ' holds something no reentrant lock wrote')
  end
  return hold_on(redis.call('PTTL', KEYS[1]), string.sub(cur, 1, 32))
end

local pttl = cur and dlock_holder_pttl(KEYS[1])
local now_us
if not pttl then
  now_us = dlock_now_us()
  local head, px = dlock_live_head(KEYS[3], KEYS[4], math.floor(now_us / 1000))
  if not head or head == member then
    reentrant_check_holds(KEYS[5])
    local token = dlock_issue_fence(KEYS[2], retention_ms)
    dlock_dequeue(KEYS[3], KEYS[4], member)
    redis.call('SET', KEYS[1], member, 'PX', ARGV[2])
    redis.call('DEL', KEYS[5]) -- a set left by an earlier grant would count for this one
    return {1, token, tonumber(ARGV[2]), 1, hold}
  end
  -- Free, but others queued first: the head gets it.
  reentrant_grant(KEYS, head, px, now_us, retention_ms, publish, KEYS[1])
  if string.sub(head, 33) == owner then
    return hold_on(tonumber(px), string.sub(head, 1, 32)) -- the head was another hold of this owner
  end
  pttl = tonumber(px)
end

local queued = 0
if ARGV[3] == '1' then
  queued = dlock_enqueue(KEYS[3], KEYS[4], member, now_us or dlock_now_us(), lease_ms, grant_px)
end
return {0, pttl, queued, dlock_last_fence(KEYS[2])}
