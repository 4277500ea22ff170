-- Withdraws a leader's record before its lock is released, and tells the
-- observers.
-- KEYS[1] the election's lock, KEYS[2] its leader record.
-- ARGV[1] the leader's owner value, ARGV[2] PUBLISH or SPUBLISH.
-- Returns 1, or 0 when the record is not the owner's.
if redis.call('HGET', KEYS[2], 'owner') ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[2])
redis.call(ARGV[2], KEYS[2], '0')
return 1
