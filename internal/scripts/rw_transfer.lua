-- rw_transfer.lua: pass a read-write lock held by a writer straight to
-- another writer of the holder's own process, which the holder then tells
-- itself (the local hand-off of mutex_wait.go): no queue, no publish.
-- KEYS: 1 holders, 2 fence, 3 tokens (rw_lib.lua's 1, 2 and 5)
-- ARGV: 1 member ("W" then the holder's owner value), 2 the next member
--       ("W" then a fresh owner value), 3 px for the next member, 4 fence
--       retention ms
-- Returns: {1, fence}: the next member holds the lock for px ms, with this
--          fencing token (also when this same call, sent again by the
--          client after a lost reply, finds the lock already moved: the
--          next owner value is fresh, so nothing else can have set it).
--          {0}: the writer no longer holds the lock (its entry is gone or
--          past its expiry); nothing was changed.
--          Error DLOCK_CONFLICT when the fencing key holds something that
--          is not a counter, WRONGTYPE for a foreign holders or tokens key,
--          or the server's own error when it refused INCR (OOM at
--          maxmemory); nothing was changed either way.
-- A writer never shares the lock, so the member is its only live holder,
-- and the next writer is too. A solo writer (rw_lib.lua) passes the lock
-- on as a Mutex does (mutex_transfer.lua), and the next writer holds it
-- solo, its token the fencing key's; a writer in the zset form passes it
-- on in that form.
local cur = redis.pcall('GET', KEYS[1])
local solo = type(cur) ~= 'table' -- a string, or nobody
local expiry
if solo then
  if cur ~= ARGV[1] then
    if cur == ARGV[2] then
      return {1, tonumber(redis.call('GET', KEYS[2]))}
    end
    return {0}
  end
else
  local t = redis.call('TIME')
  local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
  redis.call('HGET', KEYS[3], ARGV[1]) -- a foreign tokens key raises before any write
  if not expiry or tonumber(expiry) <= now_ms then
    if redis.call('ZSCORE', KEYS[1], ARGV[2]) then
      return {1, tonumber(redis.call('HGET', KEYS[3], ARGV[2]))}
    end
    return {0}
  end
  expiry = now_ms + tonumber(ARGV[3])
end
--@fence(KEYS[2], ARGV[4])
--@fence_refused(KEYS[2])
if solo then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return {1, token}
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('ZADD', KEYS[1], string.format('%.0f', expiry), ARGV[2])
redis.call('HSET', KEYS[3], ARGV[2], string.format('%.0f', token))
-- Both keys live at least as long as their latest member (rw_lib.lua).
for _, key in ipairs({KEYS[1], KEYS[3]}) do
  if redis.call('PTTL', key) < tonumber(ARGV[3]) then
    redis.call('PEXPIRE', key, ARGV[3])
  end
end
return {1, token}
