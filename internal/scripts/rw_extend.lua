-- rw_extend.lua: set a holder's remaining time, only while it holds.
-- It never revives a holder whose expiry has passed, and unless told to it
-- never shortens one (see owned_extend.lua).
-- KEYS: 1 holders, 2 tokens (see rw_lib.lua)
-- ARGV: 1 member, 2 ttl ms, 3 (optional) any value: may shorten
-- Returns: 1 extended, 0 not held by member (as owned_extend.lua).
-- A solo holder (rw_lib.lua) is renewed here, before the helpers are
-- defined, as owned_extend.lua renews a Mutex: its key expires with its
-- hold, so GET finds member only while it holds. PEXPIRE grows nothing, so
-- Redis allows it at maxmemory.
local cur = redis.pcall('GET', KEYS[1])
if type(cur) ~= 'table' then -- not a zset: a solo holder, or nobody
  if cur ~= ARGV[1] then
    return 0
  end
  if ARGV[3] or redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  return 1
end
--@lib
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then
  return 0
end
local _, now_ms = rw_time()
if tonumber(score) <= now_ms then
  return 0
end
local until_ms = now_ms + tonumber(ARGV[2])
-- At maxmemory with a policy that evicts nothing, Redis refuses a script
-- whose first write may grow memory, and ZADD is such a command, although
-- replacing a member's score grows nothing: renewals failed there, and
-- every read-write lock and semaphore lease was lost one TTL later while
-- Mutexes renewed on. A ZREM of a member that never exists (members are
-- never empty) writes nothing but counts as the script's first write, after
-- which Redis lets the script finish: it may not stop one half-way.
redis.call('ZREM', KEYS[1], '')
if ARGV[3] or tonumber(score) < until_ms then
  redis.call('ZADD', KEYS[1], string.format('%.0f', until_ms), ARGV[1])
end
dlock_keep(KEYS[1], ARGV[2])
dlock_keep(KEYS[2], ARGV[2])
return 1
