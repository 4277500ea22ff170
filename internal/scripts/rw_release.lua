-- rw_release.lua: release one holder of a read-write lock, granting the
-- lock to the waiters the release unblocks; also how a waiter that gives up
-- leaves the queue (which can unblock the readers queued behind it).
-- KEYS: 1 holders, 2 fence, 3 queue, 4 waiters, 5 tokens (see rw_lib.lua)
-- ARGV: 1 member, 2 mode (as mutex_release.lua's: its second character "s"
--       when grants are announced with SPUBLISH, "p" for PUBLISH), 3 timings
--       (as rw_acquire.lua's; only the fence retention is read). The lock's
--       channel is its holders key.
-- Returns: 1 alone: the fast path below released a live holder, and
--          nobody waits.
--          {held, member, fence, px, ...}: held is 1 when member held the
--          lock and released it, 0 when it did not (its queue entry, if any,
--          is gone); then each waiter granted by this call, with its fencing
--          token and claim window.
local member = ARGV[1]

-- The common case first, before the helpers are defined: a live holder
-- releases and nobody waits. A solo holder (rw_lib.lua) is released as a
-- Mutex is: GET finds member only while its hold lives (the key expires
-- with it). A zset holder is released once its live entry is found in both
-- holders and tokens. Both only read (errors caught) until they find
-- member, so a foreign key makes them write nothing and leaves the full
-- path below to report it; an entry past its expiry is the full path's
-- too (not held).
if redis.call('EXISTS', KEYS[3]) == 0 then
  local cur = redis.pcall('GET', KEYS[1])
  if cur == member then
    redis.call('DEL', KEYS[1])
    return 1 -- bare: released, and nobody to tell
  end
  if type(cur) == 'table' then -- WRONGTYPE: the zset form, or a foreign key
    local expiry = redis.pcall('ZSCORE', KEYS[1], member)
    if type(expiry) == 'string' and type(redis.pcall('HGET', KEYS[5], member)) == 'string' then
      local t = redis.call('TIME')
      if tonumber(expiry) > tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) then
        redis.call('ZREM', KEYS[1], member)
        redis.call('HDEL', KEYS[5], member)
        return 1
      end
    end
  end
end
--@lib
dlock_dequeue(KEYS[3], KEYS[4], member)
local ok, solo, solo_pttl = pcall(rw_solo, KEYS[1])
if not ok then
  return {0} -- a foreign holders key holds nobody
end
rw_check_keys(KEYS)
if solo and solo ~= member and string.sub(solo, 1, 1) == 'W' then
  -- A waiter leaves while a writer holds alone: nobody can be granted, so
  -- the holder stays in the solo form that its own release takes at the
  -- Mutex's cost.
  return {0}
end
local now_us, now_ms = rw_time()
local reply = {0}
if solo == member then
  -- Released as on the fast path; the grants below see no holder.
  redis.call('DEL', KEYS[1])
  reply[1] = 1
elseif solo then
  rw_unsolo(KEYS, solo, solo_pttl, now_ms)
end
rw_prune(KEYS, now_ms)
if rw_drop(KEYS, member) then
  reply[1] = 1
end
if redis.call('EXISTS', KEYS[3]) == 1 then
  -- As in mutex_release.lua: a queue or waiters key that holds something
  -- no lock wrote raises in the hand-off, after this holder was dropped;
  -- say that the lock was released all the same.
  local retention_ms = string.match(ARGV[3], '(%d+)$')
  local publish = string.sub(ARGV[2], 2) == 's' and 'SPUBLISH' or 'PUBLISH'
  local granted
  ok, granted = pcall(rw_grant_heads, KEYS, now_us, now_ms, retention_ms, publish, KEYS[1])
  if not ok then
    if reply[1] ~= 1 then
      -- Nothing was released (a waiter left): the error as it is.
      return redis.error_reply(type(granted) == 'table' and tostring(granted.err) or tostring(granted))
    end
    return dlock_released_but(granted, {{KEYS[3], 'zset'}, {KEYS[4], 'hash'}})
  end
  for _, v in ipairs(granted) do
    table.insert(reply, v)
  end
end
return reply
