-- reentrant_release.lua: release one hold of a reentrant lock, passing the
-- lock to the next waiter when it was the last; also how a waiting hold
-- that gives up leaves the queue.
-- KEYS: 1 lock, 2 fence, 3 queue, 4 waiters, 5 holds (see reentrant_acquire.lua)
-- ARGV: 1 member (hold id followed by the owner value), 2 mode, 3 timings
--       (as reentrant_acquire.lua's 4 and 5; the lock's channel is its key)
-- Returns: 1 (a bare integer): released the last hold and the lock, nobody
--          queued;
--          {0}: the lock is not the owner's (the hold's queue entry is gone);
--          {4}: the owner holds the lock, but not with this hold (released before);
--          {3, holds}: released this hold; the owner still holds the lock `holds` times;
--          {1}: released the last hold and the lock; the queue had nobody live;
--          {2, fence, px, next}: released the lock and handed it to the waiter `next`.
local member = ARGV[1]
local cur = redis.call('GET', KEYS[1])

-- The common case first, before anything else is computed: the hold that
-- took the grant, with no holds set (so it is the owner's one hold, see
-- reentrant_acquire.lua), and nobody queued (so it has no queue entry
-- either).
if cur == member and redis.call('EXISTS', KEYS[3], KEYS[5]) == 0 then
  redis.call('DEL', KEYS[1])
  return 1
end
local hold, owner = string.sub(member, 1, 32), string.sub(member, 33)

-- All but the hand-off runs before the helpers are defined (defining them
-- costs more than these commands, see mutex_acquire.lua): a hold that
-- leaves the queue, or one of the owner's holds released.
-- The hold's queue entry goes first, as dlock_dequeue does it (pcall: a
-- foreign queue or waiters key cannot hold it, and is left for the
-- hand-off to report). Without a queue there is nothing to remove.
local queued = redis.call('EXISTS', KEYS[3]) == 1
if queued and redis.pcall('ZREM', KEYS[3], member) == 1 then
  redis.pcall('HDEL', KEYS[4], member)
end
if not cur or string.sub(cur, 33) ~= owner then
  return {0}
end
local holds = 0 -- the grant's own hold, alone while no set counts the holds
if redis.call('SREM', KEYS[5], hold) == 1 then
  holds = redis.call('SCARD', KEYS[5])
elseif cur ~= member or redis.call('EXISTS', KEYS[5]) == 1 then
  return {4}
end
if holds > 0 then
  return {3, holds}
end
if not queued or redis.call('EXISTS', KEYS[3]) == 0 then
  redis.call('DEL', KEYS[1])
  return 1 -- the last hold, nobody waiting
end
--@lib
do
  -- As in mutex_release.lua: a foreign queue, waiters or fencing key raises
  -- before the hand-off writes anything, and must not keep the lock held
  -- until its TTL: it is deleted, and the conflict still reported.
  local ok, reply = pcall(function()
    local now_us = dlock_now_us()
    local head, px = dlock_live_head(KEYS[3], KEYS[4], math.floor(now_us / 1000))
    if head then
      local token = reentrant_grant(KEYS, head, px, now_us, string.match(ARGV[3], '(%d+)$'),
        string.sub(ARGV[2], 2) == 's' and 'SPUBLISH' or 'PUBLISH', KEYS[1])
      return {2, token, tonumber(px), head}
    end
  end)
  if ok and reply then
    return reply
  end
  if not ok then
    redis.call('DEL', KEYS[1])
    return dlock_released_but(reply, {{KEYS[3], 'zset'}, {KEYS[4], 'hash'}})
  end
end
redis.call('DEL', KEYS[1])
return {1}
