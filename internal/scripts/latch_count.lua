-- latch_count.lua: read a latch's count.
-- KEYS: 1 latch, 2 its zero mark (see latch_lib.lua)
-- ARGV: none
-- Returns: {count, pttl, zeroed}: the count (0 when the key is absent), the
--          key's remaining ms (0 when absent), after which it reads as zero,
--          and, at zero, 1 when a CountDown took it there (0 otherwise:
--          never set, or expired).
local n = latch_count(KEYS[1])
if n == 0 then
  return {0, 0, redis.call('EXISTS', KEYS[2])}
end
return {n, redis.call('PTTL', KEYS[1]), 0}
