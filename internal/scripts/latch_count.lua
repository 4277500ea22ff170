-- latch_count.lua: read a latch's count.
-- KEYS: 1 latch (see latch_lib.lua)
-- ARGV: none
-- Returns: {count, pttl}: the count (0 when the key is absent) and the key's
--          remaining ms (0 when absent), after which it reads as zero.
local n = latch_count(KEYS[1])
if n == 0 then
  return {0, 0}
end
return {n, redis.call('PTTL', KEYS[1])}
