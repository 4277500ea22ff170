-- latch_count.lua: read a latch's count.
-- KEYS: 1 latch, 2 its calls (see latch_lib.lua)
-- ARGV: none
-- Returns: {count, pttl, zeroed}: the count (0 when the key is absent), the
--          key's remaining ms (0 when absent), after which it reads as zero,
--          and, at zero, 1 when a CountDown took it there within the calls'
--          memory (0 otherwise: never set, expired, or counted down longer
--          ago).
local n = latch_count(KEYS[1])
if n == 0 then
  if redis.call('ZSCORE', KEYS[2], latch_zero) then
    return {0, 0, 1}
  end
  return {0, 0, 0}
end
return {n, redis.call('PTTL', KEYS[1]), 0}
