-- rw_release.lua: release one holder of a read-write lock, granting the
-- lock to the waiters the release unblocks; also how a waiter that gives up
-- leaves the queue (which can unblock the readers queued behind it).
-- KEYS: 1 holders, 2 fence, 3 queue, 4 waiters, 5 tokens (see rw_lib.lua)
-- ARGV: 1 member, 2 fence retention ms, 3 publish command, 4 channel
-- Returns: 1 alone: the fast path below released a live holder, and
--          nobody waits.
--          {held, member, fence, px, ...}: held is 1 when member held the
--          lock and released it, 0 when it did not (its queue entry, if any,
--          is gone); then each waiter granted by this call, with its fencing
--          token and claim window.
local member = ARGV[1]

-- The common case first, before the helpers are defined: a live holder
-- releases and nobody waits. It only reads until it has found member's
-- live entry in both holders and tokens (errors caught), so a foreign key
-- makes it write nothing and leaves the full path below to report it; an
-- entry past its expiry is the full path's too (not held).
if redis.call('EXISTS', KEYS[3]) == 0 then
  local expiry = redis.pcall('ZSCORE', KEYS[1], member)
  if type(expiry) == 'string' and type(redis.pcall('HGET', KEYS[5], member)) == 'string' then
    local t = redis.call('TIME')
    if tonumber(expiry) > tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) then
      redis.call('ZREM', KEYS[1], member)
      redis.call('HDEL', KEYS[5], member)
      return 1 -- bare: released, and nobody to tell
    end
  end
end
--@lib
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
  -- As in mutex_release.lua: a queue or waiters key that holds something
  -- no lock wrote raises in the hand-off, after this holder was dropped;
  -- say that the lock was released all the same.
  local ok, granted = pcall(rw_grant_heads, KEYS, now_us, now_ms, ARGV[2], ARGV[3], ARGV[4])
  if not ok then
    local msg = type(granted) == 'table' and tostring(granted.err) or tostring(granted)
    if reply[1] ~= 1 then
      return redis.error_reply(msg)
    end
    local at = string.find(msg, 'DLOCK_CONFLICT ', 1, true)
    if at then
      msg = string.sub(msg, at + 15)
    else
      msg = KEYS[3] .. ' or ' .. KEYS[4] .. ' holds something no lock wrote'
    end
    return redis.error_reply('DLOCK_CONFLICT the lock was released, but ' .. msg)
  end
  for _, v in ipairs(granted) do
    table.insert(reply, v)
  end
end
return reply
