-- mutex_transfer.lua: pass a held lock straight to a new owner, a waiter of
-- the holder's own process that the holder then tells itself (the local
-- hand-off of contend.go): no queue, no publish.
-- KEYS: 1 lock, 2 fence (see lock_lib.lua)
-- ARGV: 1 holder's owner value, 2 new owner value, 3 px for the new owner,
--       4 fence retention ms
-- Returns: {1, fence}: the new owner holds the lock for px ms, with this
--          fencing token (also when this same call, sent again by the
--          client after a lost reply, finds the lock already moved: the
--          new owner value is fresh, so nothing else can have set it).
--          {0}: the holder no longer holds the lock; nothing was changed.
--          Error DLOCK_CONFLICT when the fencing key holds something that
--          is not a counter, or the server's own error when it refused
--          INCR (OOM at maxmemory); nothing was changed either way.
local cur = redis.call('GET', KEYS[1])
if cur ~= ARGV[1] then
  if cur == ARGV[2] then
    return {1, tonumber(redis.call('GET', KEYS[2]))}
  end
  return {0}
end
--@fence(KEYS[2], ARGV[4])
--@fence_refused(KEYS[2])
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return {1, token}
