-- sem_release.lua: give a holder's permits back, all of them or all but
-- some, and serve the waiters they make room for; also how a waiter that
-- gives up leaves the queue (which may let smaller requests behind it
-- through).
-- KEYS: 1 holders, 2 counts, 3 limit, 4 fence, 5 queue, 6 waiters
--       (see sem_lib.lua); the holders key's name is also the channel of
--       grants
-- ARGV: 1 owner value, 2 the semaphore's settings (sem_acquire.lua's
--       ARGV[5]), 3 (optional) how many permits owner keeps (ReleaseN): it
--       gives back the rest and stays a holder, with its token and expiry
-- Returns: 1 alone: the fast path below gave all of a live holder's
--          permits back, and nobody waits.
--          {held, fence, px, owner, fence, px, owner, ...}: held is 1 when
--          owner held permits (now released), 0 when it did not (its queue
--          entry, if any, is gone); with ARGV[3], the permits owner holds
--          now, or 0. Then each grant this call made to a waiter, with its
--          fencing token and claim window.
local owner = ARGV[1]

-- The common cases first, before the helpers are defined: a live holder
-- gives all its permits back and nobody waits. A solo holder (sem_lib.lua)
-- is one GET and a DEL, as a Mutex's release is. Its value starting with
-- owner is exact: every owner value starts with 128 random bits of its own
-- (ownerid), so no other owner value can start with owner; and the search
-- parses nothing and copies nothing. In
-- the zset form it only reads until it has found owner's live entry in
-- both holders and counts (errors caught), so a foreign key makes it write
-- nothing and leaves the full path below to report it; an entry past its
-- expiry is the full path's too (not held).
if not ARGV[3] and redis.call('EXISTS', KEYS[5]) == 0 then
  local v = redis.pcall('GET', KEYS[1])
  if type(v) == 'string' then
    if string.find(v, owner, 1, true) == 1 then
      redis.call('DEL', KEYS[1])
      return 1 -- bare: released, and nobody to tell
    end
  else
    local expiry = redis.pcall('ZSCORE', KEYS[1], owner)
    if type(expiry) == 'string' and type(redis.pcall('HGET', KEYS[2], owner)) == 'string' then
      local t = redis.call('TIME')
      if tonumber(expiry) > tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) then
        redis.call('ZREM', KEYS[1], owner)
        redis.call('HDEL', KEYS[2], owner)
        return 1
      end
    end
  end
end
--@lib
local permits, limit_retention, _, _, fence_retention, publish =
  string.match(ARGV[2], '^(%d+) (%d+) (%d+) (%d+) (%d+) (%a+)$')

-- The solo holder's own release with others queued, the common case of a
-- contended semaphore: no counts and no limit exist beside a solo holder,
-- so the holder goes with one DEL, as on the fast path, and the queue is
-- served with the caller's permits as the limit, without sem_check's reads
-- of every key. A foreign queue, waiters or fencing key raises in the
-- grants, after the release: the release stands, and the reply says which
-- key is foreign (dlock_released_but).
if not ARGV[3] and redis.call('EXISTS', KEYS[2], KEYS[3]) == 0 then
  local v = redis.pcall('GET', KEYS[1])
  local held, _, holder = sem_solo(type(v) == 'string' and v or '')
  if held and holder == owner then
    redis.call('DEL', KEYS[1])
    local ok, grants = pcall(function()
      dlock_dequeue(KEYS[5], KEYS[6], owner)
      local _, g = sem_grant_queued(dlock_now_us(), tonumber(permits), 0, fence_retention, publish, KEYS[1])
      return g
    end)
    if not ok then
      return dlock_released_but(grants, {{KEYS[5], 'zset'}, {KEYS[6], 'hash'}})
    end
    local reply = {1}
    for _, x in ipairs(grants) do
      reply[#reply + 1] = x
    end
    return reply
  end
end

sem_check(6)
local solo_released = false
if not ARGV[3] then
  -- A waiter leaves while another owner holds every permit in the solo
  -- form: nobody can be granted, so the holder stays solo, for its own
  -- release at the Mutex's cost. (While solo, no limit is stored:
  -- SetPermits converts first.) The solo holder's own release with others
  -- queued is a DEL, as on the fast path: the grants below see no holder.
  local v = redis.pcall('GET', KEYS[1]) -- absent, a zset (an error) or a solo holder
  local held, _, holder = sem_solo(type(v) == 'string' and v or '')
  if held and holder ~= owner and held >= tonumber(permits) then
    dlock_dequeue(KEYS[5], KEYS[6], owner)
    return {0}
  elseif held and holder == owner then
    redis.call('DEL', KEYS[1])
    solo_released = true
  end
end
local now_us, now_ms = sem_now()
sem_unsolo(now_ms, 6)
local limit = sem_limit(permits, limit_retention)
sem_drop_expired(now_ms)
dlock_dequeue(KEYS[5], KEYS[6], owner)
local reply
if ARGV[3] then
  -- The count is set to what is kept, not decreased, so the same call sent
  -- again after its reply was lost gives nothing back a second time.
  local keep = tonumber(ARGV[3])
  local n, fence = sem_held(redis.call('HGET', KEYS[2], owner))
  if n and redis.call('ZSCORE', KEYS[1], owner) then
    if n > keep then
      redis.call('HSET', KEYS[2], owner, string.format('%.0f %.0f', keep, fence))
      n = keep
    end
    reply = {n}
  else
    reply = {0}
  end
elseif solo_released then
  reply = {1}
else
  reply = {redis.call('ZREM', KEYS[1], owner)}
  redis.call('HDEL', KEYS[2], owner)
end
if redis.call('EXISTS', KEYS[5]) == 1 then
  local _, grants = sem_grant_queued(now_us, limit, sem_used(), fence_retention, publish, KEYS[1])
  for _, v in ipairs(grants) do
    reply[#reply + 1] = v
  end
end
return reply
