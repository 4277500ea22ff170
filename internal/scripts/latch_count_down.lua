-- latch_count_down.lua: decrement a latch's count; at zero, delete it and
-- wake its waiters. Counting down a latch at zero does nothing, and so does
-- a call sent again that already counted (see latch_lib.lua).
-- KEYS: 1 latch, 2 its calls, 3 its zero mark (see latch_lib.lua)
-- ARGV: 1 ttl ms, 2 publish command, 3 channel, 4 call id, 5 call memory ms
-- Returns: the count after this call.
local n = latch_count(KEYS[1])
if n == 0 or latch_applied(KEYS[2], ARGV[4]) then
  return n
end
latch_remember(KEYS[2], ARGV[4], ARGV[5])
if n == 1 then
  redis.call('DEL', KEYS[1])
  redis.call('SET', KEYS[3], '1', 'PX', ARGV[1]) -- counted down, not expired
  -- Not a grant: the notifier wakes every waiter on the channel.
  redis.call(ARGV[2], ARGV[3], 'zero')
  return 0
end
redis.call('SET', KEYS[1], string.format('%.0f', n - 1), 'PX', ARGV[1])
return n - 1
