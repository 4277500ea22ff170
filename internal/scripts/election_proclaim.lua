-- Publishes a leader's value: only while the election's lock is the
-- leader's.
-- KEYS[1] the election's lock, KEYS[2] its leader record (a hash, also
-- the channel observers listen on).
-- ARGV[1] the leader's owner value, ARGV[2] the value, ARGV[3] its term
-- (the lock's fencing token), ARGV[4] PUBLISH or SPUBLISH.
-- Returns 1, or 0 when the lock is not the owner's.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[2], 'owner', ARGV[1], 'term', ARGV[3], 'value', ARGV[2])
redis.call(ARGV[4], KEYS[2], ARGV[3])
return 1
