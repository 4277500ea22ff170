-- rw_extend.lua: set a holder's remaining time, only while it holds.
-- It never revives a holder whose expiry has passed, and unless told to it
-- never shortens one (see owned_extend.lua).
-- KEYS: 1 holders, 2 tokens (see rw_lib.lua)
-- ARGV: 1 member, 2 ttl ms, 3 (optional) any value: may shorten
-- Returns: 1 extended, 0 not held by member (as owned_extend.lua).
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then
  return 0
end
local _, now_ms = rw_time()
if tonumber(score) <= now_ms then
  return 0
end
local until_ms = now_ms + tonumber(ARGV[2])
if ARGV[3] or tonumber(score) < until_ms then
  redis.call('ZADD', KEYS[1], string.format('%.0f', until_ms), ARGV[1])
end
dlock_keep(KEYS[1], ARGV[2])
dlock_keep(KEYS[2], ARGV[2])
return 1
