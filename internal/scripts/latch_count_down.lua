-- latch_count_down.lua: decrement a latch's count; at zero, delete it and
-- wake its waiters. Counting down a latch at zero does nothing.
-- KEYS: 1 latch (see latch_lib.lua)
-- ARGV: 1 ttl ms, 2 publish command, 3 channel
-- Returns: the count after this call.
local n = latch_count(KEYS[1])
if n == 0 then
  return 0
end
if n == 1 then
  redis.call('DEL', KEYS[1])
  -- Not a grant: the notifier wakes every waiter on the channel.
  redis.call(ARGV[2], ARGV[3], 'zero')
  return 0
end
redis.call('SET', KEYS[1], string.format('%.0f', n - 1), 'PX', ARGV[1])
return n - 1
