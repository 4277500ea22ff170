-- sem_extend.lua: renew a holder's permits, only while they are its. It
-- never re-creates expired permits, and unless told to it never shortens
-- them (see owned_extend.lua).
-- KEYS: 1 holders, 2 counts, 3 limit (see sem_lib.lua)
-- ARGV: 1 owner value, 2 ttl ms, 3 limit retention ms, 4 (optional) any
--   value: may shorten
-- Returns: 1 extended, 0 not held by owner.
local owner, px = ARGV[1], tonumber(ARGV[2])
local _, now_ms = sem_now()
local expiry = redis.call('ZSCORE', KEYS[1], owner)
if not expiry or tonumber(expiry) <= now_ms or redis.call('HEXISTS', KEYS[2], owner) == 0 then
  return 0
end
if ARGV[4] or tonumber(expiry) < now_ms + px then
  redis.call('ZADD', KEYS[1], string.format('%.0f', now_ms + px), owner)
end
dlock_keep(KEYS[1], px)
dlock_keep(KEYS[2], px)
-- A semaphore in use keeps its limit, however long its permits are held.
if redis.call('EXISTS', KEYS[3]) == 1 then
  redis.call('PEXPIRE', KEYS[3], ARGV[3])
end
return 1
