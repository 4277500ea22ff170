-- sem_set_permits.lua: change a semaphore's limit for every user of it.
-- Raising it serves waiters at once; lowering it revokes nothing (new
-- requests wait until enough permits come back) and fails the waiters that
-- ask for more than the new limit.
-- KEYS: 1 holders, 2 counts, 3 limit, 4 fence, 5 queue, 6 waiters
--       (see sem_lib.lua)
-- ARGV: 1 the new limit, 2 limit retention ms, 3 fence retention ms,
--       4 publish command, 5 channel
-- Returns: {used, fence, px, owner, ...}: the permits held afterwards, then
--          each grant this call made to a waiter.
sem_check(6)
local limit = tonumber(ARGV[1])
redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[2])
local now_us, now_ms = sem_now()
sem_drop_expired(now_ms)
if sem_drop_oversized(limit) then
  redis.call(ARGV[4], ARGV[5], 'limit')
end
local used, grants = sem_grant_queued(now_us, limit, sem_used(), ARGV[3], ARGV[4], ARGV[5])
local reply = {used}
for _, v in ipairs(grants) do
  reply[#reply + 1] = v
end
return reply
