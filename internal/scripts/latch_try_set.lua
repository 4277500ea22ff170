-- latch_try_set.lua: set a latch's count, only when it is at zero.
-- KEYS: 1 latch, 2 its calls, 3 its zero mark, 4 its round (see latch_lib.lua)
-- ARGV: 1 count (positive), 2 ttl ms, 3 call id, 4 call memory ms,
--       5 round keep ms
-- Returns: 1 when the count was set (by this call, or by this same call
--          sent before), 0 when the latch was still counting down (it is
--          left unchanged).
if latch_applied(KEYS[2], ARGV[3]) then
  return 1
end
if latch_count(KEYS[1]) > 0 then
  return 0
end
-- Record how the last count ended before starting this one: its waiters
-- may not have looked yet.
local r = latch_round(KEYS[4])
if not r then
  r = latch_new_round(nil)
elseif r.open then
  if redis.call('EXISTS', KEYS[3]) == 1 then
    r.zeros = r.zeros + 1 -- an older dlock's CountDown took it to zero
  else
    r = latch_new_round(r) -- it expired
  end
end
r.open = true
latch_save_round(KEYS[4], r, ARGV[5])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
latch_remember(KEYS[2], ARGV[3], ARGV[4])
-- A new count: the last one's end is past, for the waiters of older
-- versions that read only the zero mark; the round keeps it for the others.
redis.call('DEL', KEYS[3])
return 1
