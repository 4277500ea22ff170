-- sem_pttl.lua: the remaining time of a holder's permits.
-- KEYS: 1 holders, 2 counts (see sem_lib.lua)
-- ARGV: 1 owner value
-- Returns: the remaining ms, or -3 when owner holds no permits.
local solo = redis.pcall('GET', KEYS[1])
if type(solo) == 'string' then -- a solo holder (sem_lib.lua)
  local _, _, holder = sem_solo(solo)
  local pttl = redis.call('PTTL', KEYS[1])
  if holder ~= ARGV[1] or pttl <= 0 then
    return -3
  end
  return pttl
end
local _, now_ms = sem_now()
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not expiry or tonumber(expiry) <= now_ms or redis.call('HEXISTS', KEYS[2], ARGV[1]) == 0 then
  return -3
end
return tonumber(expiry) - now_ms
