-- sem_transfer.lua: pass a holder's permits, all of them, straight to a
-- waiter of the holder's own process asking for as many, which the holder
-- then tells itself (the local hand-off of mutex_wait.go): no queue, no
-- publish.
-- KEYS: 1 holders, 2 counts, 3 fence (sem_lib.lua's 1, 2 and 4)
-- ARGV: 1 the holder's owner value, 2 the next owner value (fresh), 3 the
--       permits the next owner asks for, 4 px for the next owner, 5 fence
--       retention ms
-- Returns: {1, fence}: the next owner holds the permits for px ms, with
--          this fencing token (also when this same call, sent again by the
--          client after a lost reply, finds them already moved: the next
--          owner value is fresh, so nothing else can have set it).
--          {2}: the holder holds another number of permits (it gave some
--          back); nothing was changed.
--          {0}: the holder no longer holds permits (its entry is gone or
--          past its expiry); nothing was changed.
--          Error DLOCK_CONFLICT when the fencing key holds something that
--          is not a counter, or the holders key a string that is not a
--          solo holder (sem_lib.lua), WRONGTYPE for a foreign holders or counts key,
--          or the server's own error when it refused INCR (OOM at
--          maxmemory); nothing was changed either way.
-- The permits in use do not change, so no waiter in the queue can be
-- served by this call: nobody else is told.
-- A solo holder (sem_lib.lua) is read, and passed on, in that form: the
-- next owner is the only holder after it as the holder was before.
local solo = redis.pcall('GET', KEYS[1])
local held -- the permits the holder holds
if type(solo) == 'string' then
  -- The holder's own value (owner values are unique, and every solo
  -- holder is written with an expiry) needs no expiry check, as a
  -- Mutex's transfer needs none: only another value may be foreign.
  local holder, n, fence = string.match(solo, '^(.+) (%d+) (%d+)$')
  if holder == ARGV[2] then
    return {1, tonumber(fence)}
  elseif holder ~= ARGV[1] then
    if not holder or redis.call('PTTL', KEYS[1]) == -1 then
      return redis.error_reply('DLOCK_CONFLICT ' .. KEYS[1] .. ' holds a string that no semaphore wrote')
    end
    return {0}
  end
  held = n
else
  solo = nil
  local t = redis.call('TIME')
  local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
  local entry = redis.call('HGET', KEYS[2], ARGV[1])
  if not expiry or not entry or tonumber(expiry) <= now_ms then
    if redis.call('ZSCORE', KEYS[1], ARGV[2]) then
      local fence = string.match(redis.call('HGET', KEYS[2], ARGV[2]) or '', '^%d+ (%d+)$')
      return {1, tonumber(fence)}
    end
    return {0}
  end
  held = string.match(entry, '^(%d+) ')
end
if tonumber(held) ~= tonumber(ARGV[3]) then
  return {2}
end
--@fence(KEYS[3], ARGV[5])
--@fence_refused(KEYS[3])
if solo then
  redis.call('SET', KEYS[1], ARGV[2] .. ' ' .. ARGV[3] .. ' ' .. string.format('%d', token), 'PX', ARGV[4])
  return {1, token}
end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[1], string.format('%.0f', now_ms + tonumber(ARGV[4])), ARGV[2])
redis.call('HSET', KEYS[2], ARGV[2], string.format('%.0f %.0f', tonumber(ARGV[3]), token))
-- Both keys live at least as long as their latest member (sem_lib.lua).
for _, key in ipairs({KEYS[1], KEYS[2]}) do
  if redis.call('PTTL', key) < tonumber(ARGV[4]) then
    redis.call('PEXPIRE', key, ARGV[4])
  end
end
return {1, token}
