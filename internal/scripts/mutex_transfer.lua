-- mutex_transfer.lua: pass a held lock straight to a new owner, a waiter of
-- the holder's own process that the holder then tells itself (the local
-- hand-off of contend.go): no queue, no publish.
-- KEYS: 1 lock, 2 fence (see lock_lib.lua)
-- ARGV: 1 holder's owner value, 2 new owner value, 3 px for the new owner,
--       4 fence retention ms
-- Returns: {1, fence}: the new owner holds the lock for px ms, with this
--          fencing token (also when this same call, sent again by the
--          client after a lost reply, finds the lock already moved: the
--          new owner value is fresh, so nothing else can have set it).
--          {0}: the holder no longer holds the lock; nothing was changed.
--          Error DLOCK_CONFLICT when the fencing key holds something that
--          is not a counter, or the server's own error when it refused
--          INCR (OOM at maxmemory); nothing was changed either way.
local cur = redis.call('GET', KEYS[1])
if cur ~= ARGV[1] then
  if cur == ARGV[2] then
    return {1, tonumber(redis.call('GET', KEYS[2]))}
  end
  return {0}
end
local token = redis.pcall('INCR', KEYS[2])
if type(token) ~= 'number' then
  -- A counter (or none) under the fencing key: the server refused INCR
  -- itself (OOM at maxmemory, an ACL), and its error goes back as it is
  -- (see dlock_fence_refused in lock_lib.lua). GET raises WRONGTYPE.
  local function fence_counter(v) -- dlock_counter of lock_lib.lua, which this script does not load
    if v == '0' then return true end
    local sign, digits = string.match(v, '^(%-?)([1-9]%d*)$')
    if not digits or #digits ~= 19 then return digits ~= nil and #digits < 19 end
    return digits < (sign == '-' and '9223372036854775809' or '9223372036854775807')
  end
  local v = redis.call('GET', KEYS[2])
  if not v or fence_counter(v) then
    return token
  end
  return redis.error_reply('DLOCK_CONFLICT the fencing key ' .. KEYS[2] .. ' does not hold a number')
end
if token == 1 then -- a fresh counter starts at the clock (see dlock_issue_fence)
  local t = redis.call('TIME')
  local digits = t[1] .. string.sub('00000' .. t[2], -6)
  redis.call('SET', KEYS[2], digits, 'PX', ARGV[4])
  token = tonumber(digits)
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return {1, token}
