-- mutex_acquire.lua: take the lock, or wait for it in its queue.
-- KEYS: 1 lock, 2 fence, 3 queue, 4 waiters (see lock_lib.lua)
-- ARGV: 1 owner value, 2 ttl ms, 3 "1" to join (or stay in) the queue when
--       not granted, "0" not to, 4 waiter lease ms, 5 grant px (the claim
--       window a hand-off gives this owner), 6 fence retention ms,
--       7 publish command, 8 channel
-- Returns: {1, fence, pttl}: owner holds the lock now (taken by this call,
--          or handed over earlier while it waited); pttl is the key's
--          remaining ms.
--          {0, pttl, position}: another owner holds it for pttl ms more;
--          position is owner's 1-based place in the queue, 0 if not queued.
--          Error DLOCK_CONFLICT (or WRONGTYPE) when the key holds something
--          that is not a lock; nothing is modified then.
local owner = ARGV[1]
local cur = redis.call('GET', KEYS[1])
if cur == owner then
  dlock_dequeue(KEYS[3], KEYS[4], owner)
  return {1, dlock_last_fence(KEYS[2]), redis.call('PTTL', KEYS[1])}
end

local pttl
if cur then
  pttl = redis.call('PTTL', KEYS[1])
  if pttl == -1 then
    return redis.error_reply('DLOCK_CONFLICT ' .. KEYS[1] .. ' holds a value with no expiry that no lock wrote')
  elseif pttl == -2 then
    cur = false -- expired since GET: only servers whose clock moves inside a script (miniredis)
  end
end

local now_us
if not cur then
  now_us = dlock_now_us()
  local head, px = dlock_live_head(KEYS[3], KEYS[4], math.floor(now_us / 1000))
  if not head or head == owner then
    local token = dlock_issue_fence(KEYS[2], now_us, ARGV[6])
    if head then
      dlock_dequeue(KEYS[3], KEYS[4], owner)
    end
    redis.call('SET', KEYS[1], owner, 'PX', ARGV[2])
    return {1, token, tonumber(ARGV[2])}
  end
  -- Free, but others queued first: the head gets it, owner keeps waiting.
  dlock_grant(KEYS[1], KEYS[2], KEYS[3], KEYS[4], head, px, now_us, ARGV[6], ARGV[7], ARGV[8])
  pttl = tonumber(px)
end

local position = 0
if ARGV[3] == '1' then
  position = dlock_enqueue(KEYS[3], KEYS[4], owner, now_us or dlock_now_us(), ARGV[4], ARGV[5])
end
return {0, pttl, position}
