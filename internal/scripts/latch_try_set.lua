-- latch_try_set.lua: set a latch's count, only when it is at zero.
-- KEYS: 1 latch, 2 its calls, 3 its zero mark (see latch_lib.lua)
-- ARGV: 1 count (positive), 2 ttl ms, 3 call id, 4 call memory ms
-- Returns: 1 when the count was set (by this call, or by this same call
--          sent before), 0 when the latch was still counting down (it is
--          left unchanged).
if latch_applied(KEYS[2], ARGV[3]) then
  return 1
end
if latch_count(KEYS[1]) > 0 then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
latch_remember(KEYS[2], ARGV[3], ARGV[4])
redis.call('DEL', KEYS[3]) -- a new count: the last one's end is past
return 1
