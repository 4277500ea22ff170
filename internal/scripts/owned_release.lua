-- owned_release.lua: delete a key, only while owner holds it
-- (compare-and-delete). Redlock's release on each node.
-- KEYS: 1 the owned key
-- ARGV: 1 owner value
-- Returns: 1 deleted, 0 not held by owner.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
