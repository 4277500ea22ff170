-- owned_transfer.lua: pass an owned key straight to a new owner, only while
-- the old one holds it (compare-and-set). Redlock's local hand-off on each
-- node (redlock_handoff.go): the new owner is a waiter of the holder's own
-- process, which the holder then tells itself, so nothing is published.
-- KEYS: 1 the owned key
-- ARGV: 1 holder's owner value, 2 new owner value, 3 px for the new owner
-- Returns: 1 the new owner holds the key for px ms (also when this same
--          call, sent again by the client after a lost reply, finds the key
--          already moved: the new owner value is fresh, so nothing else can
--          have set it); 0 the holder did not hold it, and nothing was
--          changed.
local cur = redis.call('GET', KEYS[1])
if cur ~= ARGV[1] then
  if cur == ARGV[2] then
    return 1
  end
  return 0
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
