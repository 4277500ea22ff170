-- rw_acquire.lua: take a read-write lock in one mode, or wait in its queue.
-- KEYS: 1 holders, 2 fence, 3 queue, 4 waiters, 5 tokens (see rw_lib.lua)
-- ARGV: 1 member (mode "W" or "R", then the owner value), 2 ttl ms,
--       3 "1" to join (or stay in) the queue when not granted, "0" not to,
--       4 waiter lease ms, 5 grant px (the claim window a hand-off gives
--       this member), 6 fence retention ms, 7 publish command, 8 channel
-- Returns: fence alone: the fast path below took the free lock for ttl ms.
--          {1, fence, pttl}: member holds the lock now (taken by this call,
--          or handed over earlier while it waited); pttl is its remaining ms.
--          {0, pttl, position, free, fence}: not granted; pttl is the
--          longest remaining time of the current holders, position member's
--          1-based place in the queue (0 if not queued), free 1 when the
--          holders would let member in but others queued first (a reader
--          behind a waiting writer), else 0, fence the last token issued
--          (see mutex_acquire.lua).
--          Error DLOCK_CONFLICT (or WRONGTYPE) when the holders key is not a
--          lock's; nothing is modified then.
-- Rules: a writer is granted when nobody holds the lock and nobody live is
-- queued ahead of it; a reader when no writer holds it and nobody live is
-- queued ahead of it. Readers only ever queue behind a writer (holding or
-- waiting), so once a writer waits, new readers wait behind it.
local member = ARGV[1]

-- The common case first, before the helpers are even defined (that costs
-- more than this whole path, see mutex_acquire.lua): nobody holds the lock
-- or waits for it, so it is free for either mode. The keys that do not
-- exist cannot be foreign; the fencing key is the one read, and its INCR
-- under pcall writes nothing when it fails (a foreign value, an ACL,
-- maxmemory): the full path below then reports what it found.
if redis.call('EXISTS', KEYS[1], KEYS[3], KEYS[4], KEYS[5]) == 0 then
  -- A used counter's expiry stays: this path returns its token itself.
  --@fence(KEYS[2], ARGV[6])
  if type(token) == 'number' then
    local t = redis.call('TIME')
    local px = tonumber(ARGV[2])
    local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    redis.call('ZADD', KEYS[1], string.format('%.0f', now_ms + px), member)
    redis.call('HSET', KEYS[5], member, string.format('%.0f', token))
    redis.call('PEXPIRE', KEYS[1], px)
    redis.call('PEXPIRE', KEYS[5], px)
    return token -- bare: the caller knows px
  end
end
--@lib
local mode = string.sub(member, 1, 1)
if rw_foreign(KEYS[1]) then
  return redis.error_reply('DLOCK_CONFLICT ' .. KEYS[1] .. ' holds a value with no expiry that no lock wrote')
end
local now_us, now_ms = rw_time()

-- The common waiting case, at the cost of mutex_acquire.lua's: a writer
-- holds the lock and its hold has not expired. A writer holds alone, so
-- nobody can be granted and no holder needs pruning: member (not that
-- writer) only stays in the queue, as the full path below would leave it.
-- Dead waiters ahead of member stay for the release's grant to drop, as in
-- the Mutex's queue. Every key this path reads or writes is checked before
-- HSET, its first write: holders by rw_foreign above and ZRANGE (WRONGTYPE),
-- the fencing key and the tokens hash here (a foreign one sends the call
-- to the full path, which reports it), the queue by ZSCORE and the waiters
-- by HSET itself (WRONGTYPE, see dlock_enqueue).
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #first == 2 and string.sub(first[1], 1, 1) == 'W' and first[1] ~= member and tonumber(first[2]) > now_ms then
  local fence = redis.pcall('GET', KEYS[2])
  local tokens = redis.call('TYPE', KEYS[5]).ok
  if type(fence) ~= 'table' and (not fence or dlock_counter(fence)) and (tokens == 'none' or tokens == 'hash') then
    local position = 0
    if ARGV[3] == '1' then
      position = dlock_enqueue(KEYS[3], KEYS[4], member, now_us, ARGV[4], ARGV[5])
    end
    return {0, tonumber(first[2]) - now_ms, position, 0, tonumber(fence or '0')}
  end
end

rw_check_keys(KEYS)
rw_prune(KEYS, now_ms)

local score = redis.call('ZSCORE', KEYS[1], member)
if not score then
  -- Hand the lock to the queue's head if it is free for it now (a holder
  -- expired, a waiter left); member itself, at the head, gets its full TTL.
  rw_grant_heads(KEYS, now_us, now_ms, ARGV[6], ARGV[7], ARGV[8], member, ARGV[2])
  score = redis.call('ZSCORE', KEYS[1], member)
end
if score then
  dlock_dequeue(KEYS[3], KEYS[4], member)
  return {1, rw_token(KEYS, member), tonumber(score) - now_ms}
end

-- Not queued ahead of anyone live, or the queue would have granted member.
if redis.call('EXISTS', KEYS[3]) == 0 and rw_free_for(KEYS, mode) then
  local token = rw_hold(KEYS, member, ARGV[2], now_us, now_ms, ARGV[6])
  return {1, token, tonumber(ARGV[2])}
end

local position = 0
if ARGV[3] == '1' then
  position = dlock_enqueue(KEYS[3], KEYS[4], member, now_us, ARGV[4], ARGV[5])
end
local pttl = 0
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if #last > 0 then
  pttl = tonumber(last[2]) - now_ms
end
return {0, pttl, position, rw_free_for(KEYS, mode) and 1 or 0, dlock_last_fence(KEYS[2])}
