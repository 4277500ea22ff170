-- owned_extend.lua: set a new expiry on a key, only while owner holds it,
-- together with the keys that live and die with it.
-- It never creates a key, so a lost lock is never re-created, and unless
-- told to it never shortens one: a renewal overtaken on the wire by a later,
-- longer one (its reply lost or late) must not cut the key back under a
-- holder that counts on the longer one.
-- KEYS: 1 the owned key, 2.. companion keys re-armed with it (optional)
-- ARGV: 1 owner value, 2 ttl ms, 3 (optional) any value: set the expiry
--   even where it is shorter than the key's (an Extend to less than the
--   time left, a hold cut short by its maximum)
-- Returns: 1 extended, 0 not held by owner.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  local px = tonumber(ARGV[2])
  for i = 1, #KEYS do
    if ARGV[3] or redis.call('PTTL', KEYS[i]) < px then
      redis.call('PEXPIRE', KEYS[i], px)
    end
  end
  return 1
end
return 0
