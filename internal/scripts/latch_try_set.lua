-- latch_try_set.lua: set a latch's count, only when it is at zero.
-- KEYS: 1 latch (see latch_lib.lua)
-- ARGV: 1 count (positive), 2 ttl ms
-- Returns: 1 when the count was set, 0 when the latch was still counting
--          down (it is left unchanged).
if latch_count(KEYS[1]) > 0 then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
