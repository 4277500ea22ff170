-- multi_acquire.lua: take several mutexes at once, all or none.
-- KEYS: for each lock i (0-based), 4i+1 lock, 4i+2 fence, 4i+3 queue,
--       4i+4 waiters (see lock_lib.lua); on Redis Cluster all in one slot.
-- ARGV: 1 owner value, 2 ttl ms, 3 fence retention ms
-- Returns: {1, fence_1, ..., fence_n}: owner holds every lock for ttl ms;
--          {0, i, pttl}: lock i (1-based) is held by another owner for
--          pttl ms more (0: free, but others are queued for it); nothing
--          was taken. Error DLOCK_CONFLICT (or WRONGTYPE) for a foreign key.
-- Every lock is checked before anything is written, so a failure leaves
-- all of them as they were.
local owner = ARGV[1]
local n = #KEYS / 4
local now_us = dlock_now_us()
local now_ms = math.floor(now_us / 1000)
for i = 0, n - 1 do
  local k = 4 * i
  local cur = redis.call('GET', KEYS[k + 1])
  if cur then
    local pttl = redis.call('PTTL', KEYS[k + 1])
    if pttl == -1 then
      return redis.error_reply('DLOCK_CONFLICT ' .. KEYS[k + 1] .. ' holds a value with no expiry that no lock wrote')
    end
    if pttl > 0 then
      return {0, i + 1, pttl}
    end
  end
  if dlock_live_head(KEYS[k + 3], KEYS[k + 4], now_ms) then
    return {0, i + 1, 0}
  end
  local conflict = dlock_fence_conflict(KEYS[k + 2]) -- INCR, below, would raise
  if conflict then
    return redis.error_reply(conflict)
  end
end
-- Every token before any lock: an INCR that Redis refuses (an ACL, or
-- maxmemory) then leaves no lock taken. Tokens issued before the refusal
-- are skipped numbers, which fencing allows.
local reply = {1}
for i = 0, n - 1 do
  reply[i + 2] = dlock_issue_fence(KEYS[4 * i + 2], ARGV[3])
end
for i = 0, n - 1 do
  redis.call('SET', KEYS[4 * i + 1], owner, 'PX', ARGV[2])
end
return reply
