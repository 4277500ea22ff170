-- sem_lib.lua: helpers shared by the semaphore scripts. It is prepended
-- after lock_lib.lua (whose queue helpers it uses), so every script stays
-- one self-contained EVAL body.
--
-- Every semaphore script takes these KEYS, or the first few of them, all
-- under one hash tag:
--   1 holders  zset    owner -> expiry of its permits (server ms); or the
--                      solo form, a string "<owner> <permits> <fencing
--                      token>" expiring with them (see sem_unsolo)
--   2 counts   hash    owner -> "<permits held> <fencing token>"
--   3 limit    string  the limit set by SetPermits, if any
--   4 fence    string  the last fencing token issued
--   5 queue    zset    waiting owners, scored by arrival (lock_lib.lua)
--   6 waiters  hash    owner -> "<lease expiry ms> <grant px> <permits asked>"
-- holders and counts name the same owners and expire together, no earlier
-- than the latest holder's expiry; both vanish with their last member.
--
-- The solo form is how sem_acquire.lua's fast path grants a semaphore
-- nobody holds: one SET, as a Mutex is taken, rather than a zset and a
-- hash entry with their expiries; a grant from the queue that leaves its
-- waiter the only holder writes it too (sem_grant_queued). Its release
-- (sem_release.lua) is a GET and a DEL; renewals and reads (sem_extend,
-- sem_pttl, sem_available, sem_transfer, inspect.lua), a waiter's attempt
-- that cannot be granted or finds itself granted, a waiter leaving while
-- it holds every permit and its own release with others queued read it as
-- it is; every other path converts it to the zset form first (sem_unsolo).
-- A string under holders that does not parse, or has no expiry and does
-- not name the caller, is foreign: a holder's own value is its own, as a
-- Mutex holder's is. It is never written while a limit is stored: the paths that
-- read it in place take the caller's permits as the limit.

-- sem_solo reads a solo holder's value: its permits, token and owner, or
-- nil when v is not one.
local function sem_solo(v)
  local owner, n, token = string.match(v, '^(.+) (%d+) (%d+)$')
  return tonumber(n), tonumber(token), owner
end

-- sem_check raises DLOCK_CONFLICT before any write when one of the first
-- nkeys KEYS holds something no semaphore wrote: a value of another type, a
-- limit or fence that is not a number, or a key without an expiry.
local function sem_check(nkeys)
  local types = {'zset', 'hash', 'string', 'string', 'zset', 'hash'}
  for i = 1, nkeys do
    local t = redis.call('TYPE', KEYS[i])
    if type(t) == 'table' then
      t = t['ok']
    end
    if t ~= 'none' then
      local solo = i == 1 and t == 'string' and sem_solo(redis.call('GET', KEYS[1]))
      if t ~= types[i] and not solo then
        error('DLOCK_CONFLICT ' .. KEYS[i] .. ' holds a ' .. t .. ' that no semaphore wrote')
      end
      if types[i] == 'string' and not tonumber(redis.call('GET', KEYS[i])) then
        error('DLOCK_CONFLICT ' .. KEYS[i] .. ' does not hold a number')
      end
      if i <= 3 and redis.call('PTTL', KEYS[i]) == -1 then
        error('DLOCK_CONFLICT ' .. KEYS[i] .. ' has no expiry: no semaphore wrote it')
      end
    end
  end
end

-- sem_now returns the server clock in µs and in ms.
local function sem_now()
  local now_us = dlock_now_us()
  return now_us, math.floor(now_us / 1000)
end

-- sem_limit returns the limit in force: the one SetPermits stored, which
-- this use keeps for another retention_ms, or else the caller's permits.
local function sem_limit(permits, retention_ms)
  local v = redis.call('GET', KEYS[3])
  if not v then
    return tonumber(permits)
  end
  redis.call('PEXPIRE', KEYS[3], retention_ms)
  return tonumber(v)
end

-- sem_held reads a counts entry: the permits held and their fencing token.
local function sem_held(entry)
  if not entry then
    return nil
  end
  local n, fence = string.match(entry, '^(%d+) (%d+)$')
  return tonumber(n), tonumber(fence)
end

-- sem_drop_expired removes the holders whose permits expired, which is how
-- a crashed holder's permits come back: within its TTL.
local function sem_drop_expired(now_ms)
  local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms)
  for _, owner in ipairs(gone) do
    redis.call('ZREM', KEYS[1], owner)
    redis.call('HDEL', KEYS[2], owner)
  end
end

-- sem_used returns the permits held by the holders left in the zset.
local function sem_used()
  local used = 0
  for _, owner in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    used = used + (sem_held(redis.call('HGET', KEYS[2], owner)) or 0)
  end
  return used
end

-- sem_holding returns {1, fence, remaining ms} when owner holds permits
-- (live holders only: call sem_drop_expired first), else nil.
local function sem_holding(owner, now_ms)
  local expiry = redis.call('ZSCORE', KEYS[1], owner)
  if not expiry then
    return nil
  end
  local _, fence = sem_held(redis.call('HGET', KEYS[2], owner))
  if not fence then
    redis.call('ZREM', KEYS[1], owner) -- its count was deleted by hand
    return nil
  end
  return {1, fence, tonumber(expiry) - now_ms}
end

-- sem_add_holder records that owner holds n permits for px ms with token.
-- Call dlock_issue_fence first: it is the write that may raise.
local function sem_add_holder(owner, n, token, now_ms, px)
  redis.call('ZADD', KEYS[1], string.format('%.0f', now_ms + px), owner)
  redis.call('HSET', KEYS[2], owner, string.format('%.0f %.0f', n, token))
  dlock_keep(KEYS[1], px)
  dlock_keep(KEYS[2], px)
end

-- sem_unsolo turns a solo holder into the zset form that every path but
-- the fast ones works on: the same owner, permits, token and expiry (server
-- now + its PTTL). It does nothing when holders is not a string, and
-- raises DLOCK_CONFLICT, having written nothing, when one of the first
-- nkeys KEYS holds something no semaphore wrote (sem_check).
-- A solo holder is always the semaphore's only holder: the fast path
-- grants it only when holders, counts, the limit, the queue and the
-- waiters are all absent, and sem_grant_queued only when no holder is left
-- and no grant follows it; every other grant (to a second holder, by a
-- limit change) runs after this conversion, on a full path that calls it
-- first; and sem_transfer.lua replaces the solo holder by its successor,
-- still alone. So nothing but the value itself is needed to
-- rebuild the holder: it carries the permits and the token (the fencing
-- key cannot stand in for the token: nothing on the fast path keeps it
-- alive, and it may expire while a renewed holder holds on).
local function sem_unsolo(now_ms, nkeys)
  if type(redis.pcall('GET', KEYS[1])) ~= 'string' then
    return -- absent, or a zset (WRONGTYPE)
  end
  sem_check(nkeys)
  local pttl = redis.call('PTTL', KEYS[1])
  local n, token, owner = sem_solo(redis.call('GET', KEYS[1]))
  redis.call('DEL', KEYS[1]) -- first write: never refused at maxmemory
  if pttl > 0 then
    sem_add_holder(owner, n, token, now_ms, pttl)
  end
end

-- sem_drop_oversized removes every waiter asking for more than limit: it
-- could never be served. Each one's next attempt reports why. Returns
-- whether any was removed.
local function sem_drop_oversized(limit)
  local dropped = false
  for _, owner in ipairs(redis.call('ZRANGE', KEYS[5], 0, -1)) do
    local entry = redis.call('HGET', KEYS[6], owner)
    local n = entry and tonumber(string.match(entry, '^%d+ %d+ (%d+)$'))
    if not n or n > limit then
      dlock_dequeue(KEYS[5], KEYS[6], owner)
      dropped = true
    end
  end
  return dropped
end

-- sem_grant_queued grants permits to the waiters in arrival order while the
-- first one's request fits in what is free, and stops at the first that does
-- not fit: a large request is never overtaken by smaller ones behind it. A
-- waiter asking for more than the limit (it was lowered) is dropped instead.
-- Each grant issues a fencing token, makes the waiter a holder for its claim
-- window (its grant px; it renews at once when it hears) and is published as
-- "<fence> <px> <granted at µs> <owner>"; the waiter self (may be nil), which is running
-- this script, is granted self_px instead and not told. When waiters were
-- dropped the channel hears "limit", so they ask again and learn why.
-- A waiter that will hold alone is granted in the solo form, as the fast
-- path takes a free semaphore, so that its polls, renewals, release and
-- local hand-off cost what a Mutex's do: when nobody held permits and no
-- limit is stored (solo_ok, read at the first grant), and the next live
-- waiter is none or asks for more than is left, so the loop stops there.
-- Holders is absent then, so SET replaces nothing.
-- Returns the permits used afterwards, the grants as a flat list of fence,
-- px, owner, and the owner granted solo (or nil) with its token: the
-- caller must read holders as a string after that.
local function sem_grant_queued(now_us, limit, used, fence_retention_ms, publish, channel, self, self_px)
  local now_ms = math.floor(now_us / 1000)
  local grants = {}
  local dropped, solo_ok, lone, lone_token = false, nil, nil, nil
  local head, px, extra = dlock_live_head(KEYS[5], KEYS[6], now_ms)
  while head do
    local n = tonumber(extra)
    if not n or n > limit then
      dlock_dequeue(KEYS[5], KEYS[6], head)
      dropped = true
      head, px, extra = dlock_live_head(KEYS[5], KEYS[6], now_ms)
    elseif used + n > limit then
      break
    else
      local token = dlock_issue_fence(KEYS[4], fence_retention_ms)
      dlock_dequeue(KEYS[5], KEYS[6], head)
      if head == self then
        px = self_px
      end
      local next_head, next_px, next_extra = dlock_live_head(KEYS[5], KEYS[6], now_ms)
      if solo_ok == nil then -- the first grant: the holders before any of them
        solo_ok = redis.call('EXISTS', KEYS[1], KEYS[3]) == 0
      end
      local next_n = tonumber(next_extra)
      if solo_ok and (not next_head or (next_n and next_n <= limit and n + next_n > limit)) then
        redis.call('SET', KEYS[1], head .. ' ' .. string.format('%d %d', n, token), 'PX', px)
        lone, lone_token = head, token
      else
        sem_add_holder(head, n, token, now_ms, tonumber(px))
        solo_ok = false
      end
      if head ~= self then
        redis.pcall(publish, channel, dlock_grant_message(token, px, now_us, head)) -- see dlock_grant
        grants[#grants + 1] = token
        grants[#grants + 1] = tonumber(px)
        grants[#grants + 1] = head
      end
      used = used + n
      if lone then
        break
      end
      head, px, extra = next_head, next_px, next_extra
    end
  end
  if dropped then
    redis.pcall(publish, channel, 'limit')
  end
  return used, grants, lone, lone_token
end
