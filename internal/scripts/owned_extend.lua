-- owned_extend.lua: set a new expiry on a key, only while owner holds it,
-- together with the keys that live and die with it.
-- It never creates a key, so a lost lock is never re-created.
-- KEYS: 1 the owned key, 2.. companion keys re-armed with it (optional)
-- ARGV: 1 owner value, 2 ttl ms
-- Returns: 1 extended, 0 not held by owner.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  for i = 1, #KEYS do
    redis.call('PEXPIRE', KEYS[i], ARGV[2])
  end
  return 1
end
return 0
