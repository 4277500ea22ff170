-- Reads an election's leader: the record of the owner that holds its lock.
-- KEYS[1] the election's lock, KEYS[2] its leader record.
-- Returns {owner, term, value}, or 0 when nobody leads: the lock is free,
-- or its holder has not published its value yet. A record left by a
-- leader whose lock expired is deleted.
local holder = redis.call('GET', KEYS[1])
local rec = redis.call('HMGET', KEYS[2], 'owner', 'term', 'value')
if not holder then
  if rec[1] then
    redis.call('DEL', KEYS[2])
  end
  return 0
end
if rec[1] ~= holder then
  return 0
end
return {rec[1], tonumber(rec[2]), rec[3]}
