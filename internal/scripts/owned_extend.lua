-- owned_extend.lua: set a new expiry on a key, only while owner holds it.
-- It never creates the key, so a lost lock is never re-created.
-- KEYS: 1 the owned key
-- ARGV: 1 owner value, 2 ttl ms
-- Returns: 1 extended, 0 not held by owner.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
