-- latch_count_down.lua: decrement a latch's count; at zero, delete it, count
-- the round as ended at zero and wake its waiters. Counting down a latch at
-- zero does nothing, and so does a call sent again that already counted
-- (see latch_lib.lua).
-- KEYS: 1 latch, 2 its calls, 3 its zero mark, 4 its round (see latch_lib.lua)
-- ARGV: 1 ttl ms, 2 publish command, 3 channel, 4 call id, 5 call memory ms,
--       6 round keep ms
-- Returns: the count after this call.
local n = latch_count(KEYS[1])
if n == 0 or latch_applied(KEYS[2], ARGV[4]) then
  return n
end
-- None when an older dlock set the count, or the record lapsed: begin one.
-- Read before the call is remembered: a foreign key there raises, and the
-- call must not count as done without the decrement.
local r = latch_round(KEYS[4]) or latch_new_round(nil)
latch_remember(KEYS[2], ARGV[4], ARGV[5])
if n == 1 then
  redis.call('DEL', KEYS[1])
  redis.call('SET', KEYS[3], '1', 'PX', ARGV[1]) -- counted down, not expired
  r.zeros = r.zeros + 1
  r.open = false
  latch_save_round(KEYS[4], r, ARGV[6])
  -- Not a grant: the notifier wakes every waiter on the channel.
  -- pcall: a wake-up only (waiters poll too), which an ACL may refuse
  -- after the writes above (see dlock_grant in lock_lib.lua).
  redis.pcall(ARGV[2], ARGV[3], 'zero')
  return 0
end
r.open = true
latch_save_round(KEYS[4], r, ARGV[6]) -- so it outlives the count
redis.call('SET', KEYS[1], string.format('%.0f', n - 1), 'PX', ARGV[1])
return n - 1
