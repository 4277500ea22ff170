-- sem_available.lua: how many permits a semaphore has and how many are held,
-- without changing anything.
-- KEYS: 1 holders, 2 counts, 3 limit (see sem_lib.lua)
-- ARGV: 1 permits (the limit unless SetPermits stored one)
-- Returns: {limit, used}.
sem_check(3)
local _, now_ms = sem_now()
local limit = tonumber(redis.call('GET', KEYS[3]) or ARGV[1])
local used = 0
local solo = redis.pcall('GET', KEYS[1])
if type(solo) == 'string' then
  used = sem_solo(solo) -- a solo holder (sem_lib.lua), live since GET found it
else
  for _, owner in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now_ms, '+inf')) do
    used = used + (sem_held(redis.call('HGET', KEYS[2], owner)) or 0)
  end
end
return {limit, used}
