-- rw_downgrade.lua: turn a writer into a reader atomically, so no other
-- writer can get in between, and grant the readers queued at the head.
-- KEYS: 1 holders, 2 fence, 3 queue, 4 waiters, 5 tokens (see rw_lib.lua)
-- ARGV: 1 writer member, 2 reader member (a new owner value), 3 the reader's
--       ttl ms, 4 fence retention ms, 5 publish command, 6 channel
-- Returns: {0}: the writer does not hold the lock; nothing changed.
--          {1, fence, member, fence, px, ...}: the reader holds the lock for
--          ttl ms with a new fencing token; then each waiter granted, with
--          its fencing token and claim window. Also {1, fence} alone when
--          this same call, sent again by the client after a lost reply,
--          finds the downgrade done: the reader member is new, so only this
--          call can have made it a holder (its grants were published then).
local ok, solo, solo_pttl = pcall(rw_solo, KEYS[1])
if not ok then
  return {0} -- a foreign holders key holds nobody
end
local now_us, now_ms = rw_time()
rw_check_keys(KEYS)
if solo then
  -- A DEL first: Redis allows it at maxmemory (see rw_unsolo).
  rw_unsolo(KEYS, solo, solo_pttl, now_ms)
end
rw_prune(KEYS, now_ms)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  if redis.call('ZSCORE', KEYS[1], ARGV[2]) then
    return {1, rw_token(KEYS, ARGV[2])}
  end
  return {0}
end
-- The reader's token before the writer goes: an ACL may refuse its INCR,
-- and the writer must then still hold the lock. At maxmemory Redis refuses
-- a script whose first write may grow memory, as INCR may: a ZREM of a
-- member that never exists writes nothing but is the first write, so a
-- downgrade runs there as a release does (see rw_extend.lua).
redis.call('ZREM', KEYS[1], '')
local token = dlock_issue_fence(KEYS[2], ARGV[4])
rw_drop(KEYS, ARGV[1])
rw_set_holder(KEYS, ARGV[2], ARGV[3], now_ms, token)
local reply = {1, token}
if redis.call('EXISTS', KEYS[3]) == 1 then
  for _, v in ipairs(rw_grant_heads(KEYS, now_us, now_ms, ARGV[4], ARGV[5], ARGV[6])) do
    table.insert(reply, v)
  end
end
return reply
