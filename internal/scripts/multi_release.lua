-- multi_release.lua: release several mutexes of one owner at once, each
-- that nobody waits for; the others are left to mutex_release.lua.
-- KEYS: for n locks, 1..n the lock keys, n+1..2n their queues (lock i's
--       queue at n+i); on Redis Cluster all in one slot.
-- ARGV: 1 owner value
-- Returns: 1: every lock was owner's, nobody waited, and all are released
--          (the common case, in the reply that costs least);
--          {r_1, ..., r_n} otherwise: r_i is 1 when lock i was released, 0
--          when it was left as it was, because it is not owner's or its
--          queue key exists (waiters to hand it to, or a foreign value
--          there): the caller releases it with mutex_release.lua, which
--          hands it over, reports it not held, or reports the conflict.
-- It reads no waiter, grants nothing and issues no token: everything but
-- the plain release is mutex_release.lua's, so the Mutex's release logic
-- lives in one place. MGET and EXISTS never raise: a lock key of another
-- type reads as not owner's and is left to mutex_release.lua to report.
local owner = ARGV[1]
local n = #KEYS / 2
local cur = redis.call('MGET', unpack(KEYS, 1, n))
local all = true
for i = 1, n do
  if cur[i] ~= owner then
    all = false
    break
  end
end
if all and redis.call('EXISTS', unpack(KEYS, n + 1, 2 * n)) == 0 then
  redis.call('DEL', unpack(KEYS, 1, n))
  return 1
end
local reply = {}
for i = 1, n do
  reply[i] = 0
  if cur[i] == owner and redis.call('EXISTS', KEYS[n + i]) == 0 then
    redis.call('DEL', KEYS[i])
    reply[i] = 1
  end
end
return reply
