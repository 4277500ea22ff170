-- queue_keep.lua: renew the leases of several waiters of one queued lock,
-- those still in its queue: one call per Client and lock per refresh,
-- instead of one poll per waiter (see places.go).
-- KEYS: 1 queue, 2 waiters (see lock_lib.lua)
-- ARGV: 1 waiter lease ms, 2... the waiters' queue members
-- Returns: an array with, for each member in ARGV's order, 1 when its
--          lease was renewed, 0 when it is no longer queued (granted, or
--          dropped after its lease lapsed): that waiter asks for itself.
-- It never queues anyone: a member that left the queue (a waiter that gave
-- up, a grant) stays out. The entry's grant px and extra field are kept.
local t = redis.call('TIME')
local expiry = string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1]))
local kept = {}
local any = false
for i = 2, #ARGV do
  kept[i - 1] = 0
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    local rest = string.match(redis.call('HGET', KEYS[2], ARGV[i]) or '', '^%d+ (.+)$')
    if rest then
      redis.call('HSET', KEYS[2], ARGV[i], expiry .. ' ' .. rest)
      kept[i - 1] = 1
      any = true
    end
  end
end
if any then
  dlock_keep(KEYS[1], ARGV[1])
  dlock_keep(KEYS[2], ARGV[1])
end
return kept
