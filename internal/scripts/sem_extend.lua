-- sem_extend.lua: renew a holder's permits, only while they are its. It
-- never re-creates expired permits, and unless told to it never shortens
-- them (see owned_extend.lua).
-- KEYS: 1 holders, 2 counts, 3 limit (see sem_lib.lua)
-- ARGV: 1 owner value, 2 ttl ms, 3 limit retention ms, 4 (optional) any
--   value: may shorten
-- Returns: 1 extended, 0 not held by owner.
local owner, px = ARGV[1], tonumber(ARGV[2])
-- A solo holder (sem_lib.lua) is renewed in place, as a Mutex is: the
-- string expires with the permits. PEXPIRE grows no memory, so maxmemory
-- never refuses it.
local solo = redis.pcall('GET', KEYS[1])
if type(solo) == 'string' then
  local _, _, holder = sem_solo(solo)
  local pttl = redis.call('PTTL', KEYS[1])
  if holder ~= owner or pttl <= 0 then
    return 0
  end
  if ARGV[4] or pttl < px then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  if redis.call('EXISTS', KEYS[3]) == 1 then
    redis.call('PEXPIRE', KEYS[3], ARGV[3])
  end
  return 1
end
local _, now_ms = sem_now()
local expiry = redis.call('ZSCORE', KEYS[1], owner)
if not expiry or tonumber(expiry) <= now_ms or redis.call('HEXISTS', KEYS[2], owner) == 0 then
  return 0
end
-- At maxmemory with a policy that evicts nothing, Redis refuses a script
-- whose first write may grow memory, and ZADD is such a command, although
-- replacing a member's score grows nothing: renewals failed there, and
-- every read-write lock and semaphore lease was lost one TTL later while
-- Mutexes renewed on. A ZREM of a member that never exists (members are
-- never empty) writes nothing but counts as the script's first write, after
-- which Redis lets the script finish: it may not stop one half-way.
redis.call('ZREM', KEYS[1], '')
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
