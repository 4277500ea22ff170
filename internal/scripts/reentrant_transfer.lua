-- reentrant_transfer.lua: release one hold of a reentrant lock and, when it
-- is the owner's last, pass the lock straight to a waiting hold of the
-- holder's own process, which the holder then tells itself (the local
-- hand-off of mutex_wait.go): no queue, no publish.
-- KEYS: 1 lock, 2 fence, 3 holds (see reentrant_acquire.lua)
-- ARGV: 1 member (hold id followed by the owner value), 2 the next member
--       (a fresh hold id followed by its owner value), 3 px for the next
--       member, 4 fence retention ms
-- Returns: {1, fence}: the next member holds the lock with its one hold
--          (the grant's own, no holds set) for px ms, with this fencing
--          token (also when this same call, sent again by the client after
--          a lost reply, finds the lock already moved: the next hold id is
--          fresh, so nothing else can have set it).
--          {3, holds}: the owner holds the lock `holds` times, this hold
--          among them; nothing was changed (reentrant_release.lua releases
--          the hold).
--          {4}: the owner holds the lock, but not with this hold.
--          {0}: the lock is not the owner's; nothing was changed.
--          Error DLOCK_CONFLICT when the fencing key holds something that
--          is not a counter, or the server's own error when it refused
--          INCR (OOM at maxmemory); nothing was changed either way.
local member = ARGV[1]
local hold, owner = string.sub(member, 1, 32), string.sub(member, 33)
local cur = redis.call('GET', KEYS[1])
if not cur or string.sub(cur, 33) ~= owner then
  if cur == ARGV[2] then
    return {1, tonumber(redis.call('GET', KEYS[2]))}
  end
  return {0}
end
-- Reads first: the fencing counter's INCR is the first write, so a refusal
-- leaves the hold in place for the release through the queue. Without a
-- holds set the hold that took the grant is the owner's one hold (see
-- reentrant_acquire.lua).
local holds = redis.call('SCARD', KEYS[3])
if holds == 0 then
  if cur ~= member then
    return {4}
  end
elseif redis.call('SISMEMBER', KEYS[3], hold) == 0 then
  return {4}
elseif holds > 1 then
  return {3, holds}
end
--@fence(KEYS[2], ARGV[4])
--@fence_refused(KEYS[2])
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
if holds > 0 then
  redis.call('DEL', KEYS[3]) -- the next member's hold is the grant's own
end
return {1, token}
