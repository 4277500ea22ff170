-- redlock_acquire.lua: take one Redlock node's share of a lock.
-- KEYS: 1 the lock key
-- ARGV: 1 owner value, 2 ttl ms
-- Returns: 1 (a bare integer: the common reply, the cheapest to build and
--          read): owner holds the key now, for ttl ms (set by this call, or
--          re-armed when an earlier attempt by the same owner had set it);
--          {0, pttl, holder}: the owner value holder holds it for pttl ms
--          more (a waiter tells a holder with a quorum of the nodes from
--          contenders that split them).
--          Error DLOCK_CONFLICT (or WRONGTYPE) when the key holds something
--          that is not a lock; nothing is modified then.
-- The common case first: the key free, taken in one call (a GET before it
-- would cost the server another call on every acquire). SET NX writes
-- nothing to a key that exists, whatever it holds, so a foreign value is
-- still met, and reported, by the GET below.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
local cur = redis.call('GET', KEYS[1])
if not cur or cur == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl < 0 then
  return redis.error_reply('DLOCK_CONFLICT ' .. KEYS[1] .. ' holds a value with no expiry that no lock wrote')
end
return {0, pttl, cur}
