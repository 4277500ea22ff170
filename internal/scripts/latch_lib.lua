-- latch_lib.lua: the helper shared by the count-down latch scripts,
-- prepended to each of them.
--
-- A latch N keeps one key: its count as a decimal string, always with a PX
-- expiry, deleted when the count reaches zero. An absent (or expired) key
-- reads as zero.

-- latch_count returns the latch's count, 0 when the key is absent. It raises
-- DLOCK_CONFLICT (GET raises WRONGTYPE) when the key holds something no
-- latch wrote: a value of another type, a string that is not a positive
-- whole number, or one without an expiry.
local function latch_count(key)
  local v = redis.call('GET', key)
  if not v then
    return 0
  end
  local n = tonumber(v)
  if not n or n < 1 or n ~= math.floor(n) then
    error('DLOCK_CONFLICT ' .. key .. ' does not hold a latch count')
  end
  if redis.call('PTTL', key) == -1 then
    error('DLOCK_CONFLICT ' .. key .. ' has no expiry: no latch wrote it')
  end
  return n
end
