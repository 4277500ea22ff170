-- queue_keep.lua: renew the leases of several waiters of one queued lock,
-- those still in its queue: one call per Client and lock per refresh,
-- instead of one poll per waiter (see places.go).
-- KEYS: 1 queue, 2 waiters (see lock_lib.lua), 3 (optional) the lock key,
--       for a lock whose key exists exactly while someone holds it (a
--       FairMutex's, a MultiLock name's)
-- ARGV: 1 waiter lease ms, 2... the waiters' queue members
-- Returns: an array with, for each member in ARGV's order, 1 when its
--          lease was renewed, 0 when it is no longer queued (granted, or
--          dropped after its lease lapsed): that waiter asks for itself;
--          then, with KEYS[3], that key's PTTL: the leader of the waiters
--          asks again at once when it is not positive (nobody holds the
--          lock, and a grant may be due), else when it runs out.
-- It never queues anyone: a member that left the queue (a waiter that gave
-- up, a grant) stays out. The entry's grant px and extra field are kept.
-- A fixed number of commands, whatever the number of members: each member
-- costs the server a little work inside them, not a command of its own.
local t = redis.call('TIME')
local expiry = string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1]))
local scores = redis.pcall('ZMSCORE', KEYS[1], unpack(ARGV, 2))
if type(scores) ~= 'table' or scores.err then
  -- Redis before 6.2 has no ZMSCORE: one ZSCORE per member (these raise
  -- WRONGTYPE on a foreign queue key, as ZMSCORE does).
  scores = {}
  for i = 2, #ARGV do
    scores[i - 1] = redis.call('ZSCORE', KEYS[1], ARGV[i])
  end
end
local entries = redis.call('HMGET', KEYS[2], unpack(ARGV, 2))
local kept, renewed = {}, {}
for i = 2, #ARGV do
  kept[i - 1] = 0
  local rest = scores[i - 1] and entries[i - 1] and string.match(entries[i - 1], '^%d+ (.+)$')
  if rest then
    renewed[#renewed + 1] = ARGV[i]
    renewed[#renewed + 1] = expiry .. ' ' .. rest
    kept[i - 1] = 1
  end
end
if #renewed > 0 then
  redis.call('HSET', KEYS[2], unpack(renewed))
  dlock_keep_queue(KEYS[1], ARGV[1])
  dlock_keep_queue(KEYS[2], ARGV[1])
end
if KEYS[3] then
  kept[#kept + 1] = redis.call('PTTL', KEYS[3])
end
return kept
