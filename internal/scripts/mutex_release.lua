-- mutex_release.lua: release the lock, handing it to the next live waiter;
-- also how a waiter that gives up leaves the queue.
-- KEYS: 1 lock, 2 fence, 3 queue, 4 waiters (see lock_lib.lua)
-- ARGV: 1 owner value, 2 mode, 3 timings (as mutex_acquire.lua's 4 and 5;
--       the lock's channel is its key, and a waiter's own grant channel
--       is named by its queue entry)
-- Returns: 0: owner does not hold the lock (its queue entry, if any, is gone);
--          1: released, nobody waiting;
--          {2, fence, px, next}: handed over to the waiter `next`, with its
--          fencing token and claim window.
--          Error "... the lock was released, but ...": the owner's lock is
--          deleted all the same, and nobody is handed it: a queue, waiters
--          or fencing key holds something no lock wrote (DLOCK_CONFLICT;
--          left as it is), or the server refused the hand-off's writes
--          (lock_lib.lua's dlock_released_but).
local owner = ARGV[1]
local cur = redis.call('GET', KEYS[1])

-- The common case first, before lock_lib's helpers are defined: ours, and
-- nobody waiting.
if cur == owner and redis.call('EXISTS', KEYS[3]) == 0 then
  redis.call('DEL', KEYS[1])
  return 1
end

--@lib

if cur ~= owner then
  dlock_dequeue(KEYS[3], KEYS[4], owner)
  return 0
end
-- The hand-off runs under pcall: a queue, waiters or fencing key that holds
-- something no lock wrote raises in it (in dlock_live_head or dlock_grant,
-- before the hand-off writes anything), and must not keep the lock held
-- until its TTL although its owner released it (outside strict order the
-- acquire's fast path does not read the queue, so the holder may be the
-- first to meet such a key). The lock is deleted then, and the error
-- still reported.
local ok, reply = pcall(function()
  -- The holder is not in the queue (a grant takes it out, and so does the
  -- acquire that finds the lock free); were it there, the lock would be
  -- handed back to it. This ZREM is also the script's first write, after
  -- which Redis at maxmemory no longer refuses the grant's INCR: a holder
  -- must be able to release then.
  dlock_dequeue(KEYS[3], KEYS[4], owner)
  local now_us = dlock_now_us()
  local head, px, tag = dlock_live_head(KEYS[3], KEYS[4], math.floor(now_us / 1000))
  if not head then
    return 1
  end
  -- Anchored patterns and whole strings compared: see mutex_acquire.lua.
  local retention_ms = string.match(ARGV[3], '^.* (%d+)$')
  local publish = (ARGV[2] == '1s' or ARGV[2] == '0s') and 'SPUBLISH' or 'PUBLISH'
  local token = dlock_grant(KEYS[1], KEYS[2], KEYS[3], KEYS[4], head, px, now_us, retention_ms, publish, KEYS[1], tag)
  return {2, token, px + 0, head}
end)
if ok and reply ~= 1 then
  return reply
end
redis.call('DEL', KEYS[1])
if ok then
  return 1
end
return dlock_released_but(reply, {{KEYS[3], 'zset'}, {KEYS[4], 'hash'}})
