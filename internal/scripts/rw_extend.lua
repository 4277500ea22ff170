-- rw_extend.lua: set a holder's remaining time, only while it holds.
-- It never revives a holder whose expiry has passed.
-- KEYS: 1 holders, 2 tokens (see rw_lib.lua)
-- ARGV: 1 member, 2 ttl ms
-- Returns: 1 extended, 0 not held by member (as owned_extend.lua).
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then
  return 0
end
local _, now_ms = rw_time()
if tonumber(score) <= now_ms then
  return 0
end
redis.call('ZADD', KEYS[1], string.format('%.0f', now_ms + tonumber(ARGV[2])), ARGV[1])
dlock_keep(KEYS[1], ARGV[2])
dlock_keep(KEYS[2], ARGV[2])
return 1
