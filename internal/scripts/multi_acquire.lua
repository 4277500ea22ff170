-- multi_acquire.lua: take several mutexes at once, all or none.
-- KEYS: for n locks, by kind: 1..n the lock keys, n+1..2n their fencing
--       keys, 2n+1..3n their queues, 3n+1..4n their waiters (see
--       lock_lib.lua), lock i's keys at i, n+i, 2n+i and 3n+i; grouped so
--       that one command takes every lock's key of a kind. On Redis
--       Cluster all in one slot.
-- ARGV: 1 owner value, 2 ttl ms, 3 fence retention ms
-- Returns: {fence_1, ..., fence_n}: owner holds every lock for ttl ms;
--          {'busy', i, pttl}: lock i (1-based) is held by another owner for
--          pttl ms more (0: free, but others are queued for it); nothing
--          was taken. Error DLOCK_CONFLICT (or WRONGTYPE) for a foreign key.
-- A failure leaves every lock as it was: the fast path undoes its own
-- writes, and the full path checks every lock before it writes anything.
local owner = ARGV[1]
local n = #KEYS / 4

-- The common case first, before lock_lib's helpers are even defined: no
-- queue at all (one EXISTS over every queue key), and every lock free. A
-- queue that exists may hold a live waiter, which the full path must see:
-- a MultiLock never takes a lock past a queued waiter. Tokens come after
-- every lock is taken, so a busy lock costs no token, and are left to
-- expire as the Mutex's fast path leaves them (fence_lib.lua).
if redis.call('EXISTS', unpack(KEYS, 2 * n + 1, 3 * n)) == 0 then
  local taken = 0
  while taken < n and redis.call('SET', KEYS[taken + 1], owner, 'NX', 'PX', ARGV[2]) do
    taken = taken + 1
  end
  if taken == n then
    local reply = {}
    for i = 1, n do
      --@fence(KEYS[n + i], ARGV[3])
      if type(token) ~= 'number' then
        reply = nil -- a foreign fencing key, or a refused INCR: the full path says which
        break
      end
      reply[i] = token
    end
    if reply then
      return reply
    end
  end
  if taken > 0 then
    redis.call('DEL', unpack(KEYS, 1, taken)) -- undo, within this same atomic script
  end
end

--@lib
local now_ms = math.floor(dlock_now_us() / 1000)
for i = 1, n do
  local pttl = redis.call('GET', KEYS[i]) and dlock_holder_pttl(KEYS[i])
  if pttl and pttl > 0 then
    return {'busy', i, pttl}
  end
  if dlock_live_head(KEYS[2 * n + i], KEYS[3 * n + i], now_ms) then
    return {'busy', i, 0}
  end
  local conflict = dlock_fence_conflict(KEYS[n + i]) -- INCR, below, would raise
  if conflict then
    return redis.error_reply(conflict)
  end
end
-- Every token before any lock: an INCR that Redis refuses (an ACL, or
-- maxmemory) then leaves no lock taken. Tokens issued before the refusal
-- are skipped numbers, which fencing allows.
local reply = {}
for i = 1, n do
  reply[i] = dlock_issue_fence(KEYS[n + i], ARGV[3])
end
for i = 1, n do
  redis.call('SET', KEYS[i], owner, 'PX', ARGV[2])
end
return reply
