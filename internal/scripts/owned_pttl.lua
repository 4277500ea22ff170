-- owned_pttl.lua: the remaining time of a key, only while owner holds it.
-- KEYS: 1 the owned key
-- ARGV: 1 owner value
-- Returns: the remaining ms, or -3 when owner does not hold the key.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PTTL', KEYS[1])
end
return -3
