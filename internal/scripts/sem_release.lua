-- sem_release.lua: give a holder's permits back and serve the waiters they
-- make room for; also how a waiter that gives up leaves the queue (which may
-- let smaller requests behind it through).
-- KEYS: 1 holders, 2 counts, 3 limit, 4 fence, 5 queue, 6 waiters
--       (see sem_lib.lua)
-- ARGV: 1 owner value, 2 permits (the limit unless SetPermits stored one),
--       3 limit retention ms, 4 fence retention ms, 5 publish command,
--       6 channel
-- Returns: {held, fence, px, owner, fence, px, owner, ...}: held is 1 when
--          owner held permits (now released), 0 when it did not (its queue
--          entry, if any, is gone); then each grant this call made to a
--          waiter, with its fencing token and claim window.
local owner = ARGV[1]
sem_check(6)
local now_us, now_ms = sem_now()
local limit = sem_limit(ARGV[2], ARGV[3])
sem_drop_expired(now_ms)
dlock_dequeue(KEYS[5], KEYS[6], owner)
local reply = {redis.call('ZREM', KEYS[1], owner)}
redis.call('HDEL', KEYS[2], owner)
if redis.call('EXISTS', KEYS[5]) == 1 then
  local _, grants = sem_grant_queued(now_us, limit, sem_used(), ARGV[4], ARGV[5], ARGV[6])
  for _, v in ipairs(grants) do
    reply[#reply + 1] = v
  end
end
return reply
