-- mutex_acquire.lua: take the lock, or wait for it in its queue.
-- KEYS: 1 lock, 2 fence, 3 queue, 4 waiters (see lock_lib.lua)
-- ARGV: 1 owner value, 2 ttl ms, 3 "1" to join (or stay in) the queue when
--       not granted, "n" to join it with an owner value never queued before
--       (a Lock's first attempt: no queue entry to remove when granted),
--       "0" not to join, 4 mode: two characters, "1" for strict arrival
--       order (a FairMutex: a free lock never goes past a queued waiter) or
--       "0", then "s" when grants are announced with SPUBLISH (sharded
--       pub/sub on a Cluster) or "p" for PUBLISH, 5 timings: "[g<hex tag> ]<waiter
--       lease ms> <grant px> <fence retention ms>", the tag of the waiter's
--       grant channel if it has one (lock_lib.lua), the waiter's lease in the
--       queue, the claim window of a hand-off to it, and how long the
--       fencing counter outlives its last grant. The lock's channel is its
--       key. Few arguments, because the server pays for each one on every
--       call (about 1,000 instructions), and the common case reads only
--       the first four.
-- Returns: fence (a bare integer): owner took the free lock, for ARGV[2] ms;
--          the common case, in the reply that costs least to build and read.
--          {1, fence, pttl}: owner holds the lock now (taken by this call,
--          or handed over earlier while it waited); pttl is the key's
--          remaining ms.
--          {0, pttl, queued, fence}: another owner holds it for pttl ms
--          more; queued is 1 when owner is in the queue, 0 if not; fence is the last token issued, so that the waiter can
--          tell a grant made after this call (a higher token) from one made
--          before it and heard late.
--          Error DLOCK_CONFLICT (or WRONGTYPE) when a key holds something
--          no lock wrote: the lock key, or the queue, waiters or fencing
--          key on a path that reads it. Nothing is granted or queued then
--          and the foreign key is left as it is (lock_lib.lua). Outside
--          strict order the free-lock path never reads the queue keys, so
--          it grants the lock past a foreign value there: the holder's
--          release reports it (mutex_release.lua).
local owner = ARGV[1]

-- The common case first, before lock_lib's helpers are even defined (that
-- costs more than this whole path): the lock free. While anyone waits a
-- release hands the lock over instead of freeing it, so a free lock with
-- waiters queued only happens after a holder died; outside strict order, a
-- newcomer may take it then rather than pay a queue check on every acquire.
local strict = ARGV[4] == '1p' or ARGV[4] == '1s'
if (not strict or redis.call('EXISTS', KEYS[3]) == 0) and redis.call('SET', KEYS[1], owner, 'NX', 'PX', ARGV[2]) then
  --@fence(KEYS[2], string.match(ARGV[5], '(%d+)$'))
  if type(token) ~= 'number' then
    redis.call('DEL', KEYS[1]) -- undo, within this same atomic script
  end
  --@fence_refused(KEYS[2])
  -- A queued waiter whose poll finds the lock free takes it here: its place
  -- must go, or a release would hand the lock to it again, and nobody
  -- would claim that grant (the lock would sit idle for a claim window).
  -- pcall: a foreign value under a queue key is the slow path's to report,
  -- and must not fail a grant already written.
  if ARGV[3] == '1' and redis.pcall('ZREM', KEYS[3], owner) == 1 then
    redis.pcall('HDEL', KEYS[4], owner)
  end
  return token
end

local cur = redis.call('GET', KEYS[1])
--@lib
-- Patterns anchored at both ends, and a byte or a whole string compared
-- rather than cut out: Lua's unanchored matching, tries from every offset,
-- costs the server more than a Redis command.
local tag, lease_ms, grant_px, retention_ms
if string.byte(ARGV[5]) == 103 then -- 'g': the waiter's grant channel's tag
  tag, lease_ms, grant_px, retention_ms = string.match(ARGV[5], '^(g%x+) (%d+) (%d+) (%d+)$')
else
  lease_ms, grant_px, retention_ms = string.match(ARGV[5], '^(%d+) (%d+) (%d+)$')
end
local publish = (ARGV[4] == '1s' or ARGV[4] == '0s') and 'SPUBLISH' or 'PUBLISH'

if cur == owner then
  dlock_dequeue(KEYS[3], KEYS[4], owner)
  return {1, dlock_last_fence(KEYS[2]), redis.call('PTTL', KEYS[1])}
end

local pttl = cur and dlock_holder_pttl(KEYS[1])
local now_us
if not pttl then
  now_us = dlock_now_us()
  local head, px, head_tag = dlock_live_head(KEYS[3], KEYS[4], math.floor(now_us / 1000))
  if not head or head == owner then
    local token = dlock_issue_fence(KEYS[2], retention_ms)
    if head then
      dlock_dequeue(KEYS[3], KEYS[4], owner)
    end
    redis.call('SET', KEYS[1], owner, 'PX', ARGV[2])
    return {1, token, tonumber(ARGV[2])}
  end
  -- Free, but others queued first: the head gets it, owner keeps waiting.
  dlock_grant(KEYS[1], KEYS[2], KEYS[3], KEYS[4], head, px, now_us, retention_ms, publish, KEYS[1], head_tag)
  pttl = tonumber(px)
end

local queued = 0
if ARGV[3] ~= '0' then
  queued = dlock_enqueue(KEYS[3], KEYS[4], owner, now_us or dlock_now_us(), lease_ms, grant_px, tag, ARGV[3] == 'n')
end
return {0, pttl, queued, dlock_last_fence(KEYS[2])}
