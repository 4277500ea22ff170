-- rw_release.lua: release one holder of a read-write lock, granting the
-- lock to the waiters the release unblocks; also how a waiter that gives up
-- leaves the queue (which can unblock the readers queued behind it).
-- KEYS: 1 holders, 2 fence, 3 queue, 4 waiters, 5 tokens (see rw_lib.lua)
-- ARGV: 1 member, 2 fence retention ms, 3 publish command, 4 channel
-- Returns: {held, member, fence, px, ...}: held is 1 when member held the
--          lock and released it, 0 when it did not (its queue entry, if any,
--          is gone); then each waiter granted by this call, with its fencing
--          token and claim window.
local member = ARGV[1]
dlock_dequeue(KEYS[3], KEYS[4], member)
if rw_foreign(KEYS[1]) then
  return {0}
end
local now_us, now_ms = rw_time()
rw_check_keys(KEYS)
rw_prune(KEYS, now_ms)
local reply = {0}
if rw_drop(KEYS, member) then
  reply[1] = 1
end
if redis.call('EXISTS', KEYS[3]) == 1 then
  for _, v in ipairs(rw_grant_heads(KEYS, now_us, now_ms, ARGV[2], ARGV[3], ARGV[4])) do
    table.insert(reply, v)
  end
end
return reply
