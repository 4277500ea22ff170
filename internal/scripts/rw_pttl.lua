-- rw_pttl.lua: a holder's remaining time, only while it holds.
-- KEYS: 1 holders (see rw_lib.lua)
-- ARGV: 1 member
-- Returns: the remaining ms, or -3 when member does not hold the lock.
-- A solo holder (rw_lib.lua) is read before the helpers are defined: its
-- key's expiry is its hold's.
local cur = redis.pcall('GET', KEYS[1])
if type(cur) ~= 'table' then -- not a zset: a solo holder, or nobody
  if cur ~= ARGV[1] then
    return -3
  end
  local rest = redis.call('PTTL', KEYS[1])
  if rest <= 0 then
    return -3
  end
  return rest
end
--@lib
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then
  return -3
end
local _, now_ms = rw_time()
local rest = tonumber(score) - now_ms
if rest <= 0 then
  return -3
end
return rest
