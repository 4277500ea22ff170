-- lock_lib.lua: helpers shared by the queued-lock scripts. It is prepended
-- to each script that needs it (see scripts.go), so every script stays one
-- self-contained EVAL body.
--
-- A lock N keeps these keys, all under one hash tag:
--   lock    string   the holder's owner value, always with a PX expiry
--   fence   string   the last fencing token issued for N, with a long expiry
--                    (fence_lib.lua, prepended to this file, issues them)
--   queue   zset     waiting owners, scored by arrival time (server µs)
--   waiters hash     owner -> "<lease expiry, server ms> <grant px>[ <extra>]"
-- The optional extra field is the primitive's own (a permit count, a hold
-- id): the helpers carry it through without reading it. In a Mutex's queue
-- it names the waiter's grant channel, if it has one: "g<hex tag>", and the
-- channel is the lock key, ":" and that (a FairMutex's, so that a grant
-- wakes only the Client it is for; it reads as no number, so Inspect counts
-- no permits for it).
-- Numbers that can exceed 14 digits are formatted with %d (below 2^53, where
-- every integer is exact) or %.0f: Lua's default number formatting would
-- print them in exponent notation, and %d costs the server a fraction of
-- %.0f. Numbers passed to redis.call are strings where they are constants
-- ('0'): Redis formats a Lua number argument the same slow way.
--
-- A key of N that holds something no lock wrote (a string under queue, say)
-- must be reported (WRONGTYPE, or DLOCK_CONFLICT) before a script queues or
-- grants anything: a script's writes are not rolled back by a later error,
-- and a caller that gets an error reply cleans nothing up (wait.go's
-- abandon). So each helper below raises, if it does, before its own first
-- write (dlock_live_head may have dropped expired waiters, which leaves
-- nothing to clean up), and a script calls the ones that may raise before
-- writes of its own.
-- A holder's release is the one exception: it frees the lock first and then
-- reports the conflict (dlock_released_but).

-- dlock_now_us returns the server's clock in microseconds.
local function dlock_now_us()
  local t = redis.call('TIME')
  return t[1] * 1000000 + t[2] -- coerced, at half the cost of tonumber
end

-- dlock_holder_pttl returns the PTTL of a lock key that GET found set, or
-- false when it has expired since (only on servers whose clock moves
-- inside a script: miniredis). A value with no expiry is no lock's: it
-- raises DLOCK_CONFLICT, which its caller meets before any write.
local function dlock_holder_pttl(key)
  local pttl = redis.call('PTTL', key)
  if pttl == -1 then
    error('DLOCK_CONFLICT ' .. key .. ' holds a value with no expiry that no lock wrote')
  end
  return pttl ~= -2 and pttl
end

-- dlock_dequeue removes owner from the wait queue, if it is there. It
-- never raises (pcall, at no extra cost): a foreign queue or waiters key
-- cannot hold owner's entry, so there is nothing to remove from it, and it
-- is left as it is for a path that reads the queue to report. Scripts may
-- so call it after writes of their own (reentrant_acquire.lua's hold_on,
-- the releases that begin with it).
local function dlock_dequeue(queue_key, waiters_key, owner)
  if redis.pcall('ZREM', queue_key, owner) == 1 then
    redis.pcall('HDEL', waiters_key, owner)
  end
end

-- dlock_waiter reads a waiter's entry: whether its lease is live at now_ms,
-- its grant px and its extra field (or nil).
local function dlock_waiter(waiters_key, owner, now_ms)
  local entry = redis.call('HGET', waiters_key, owner)
  if not entry then
    return false
  end
  local expiry, px, extra = string.match(entry, '^(%d+) (%d+) ?(.*)$')
  if not expiry or expiry + 0 <= now_ms then
    return false
  end
  if extra == '' then
    extra = nil
  end
  return true, px, extra
end

-- dlock_live_head returns the first waiter whose lease has not expired, the
-- px it asked to be granted with and its extra field (or nil), dropping
-- expired waiters on the way; nil when nobody waits.
local function dlock_live_head(queue_key, waiters_key, now_ms)
  while true do
    local head = redis.call('ZRANGE', queue_key, '0', '0')
    if #head == 0 then
      return nil
    end
    local live, px, extra = dlock_waiter(waiters_key, head[1], now_ms)
    if live then
      return head[1], px, extra
    end
    redis.call('ZREM', queue_key, head[1])
    redis.call('HDEL', waiters_key, head[1])
  end
end

-- dlock_grant_message is what a grant publishes on the lock's channel:
-- "<fence> <px> <granted at, server µs> <owner>". The owner comes last, as
-- it may contain spaces; the time lets the waiter measure the hand-off.
local function dlock_grant_message(token, px, now_us, owner)
  -- %d past 2^53 could print a token that is not the counter's value.
  local form = token < 9007199254740992 and '%d %s %d ' or '%.0f %s %.0f '
  return string.format(form, token, px, now_us) .. owner
end

-- dlock_grant hands the lock to a waiter: the waiter leaves the queue, owns
-- the key for px ms (its claim window, extended by the waiter once it hears
-- of the grant) and is told on the lock's channel as "<fence> <px> <granted at µs> <owner>",
-- or on its own grant channel when its entry's extra field, tag, names one.
-- owner comes from dlock_live_head, which has read both queue keys, so only
-- the fencing key can still raise, and it does before anything is written.
-- Every publish of dlock's scripts goes through redis.pcall: it is only a
-- wake-up (waiters also poll), and a server that refuses it, as an ACL
-- without PUBLISH or without the channel does (Redis 7 gives new users no
-- channels unless acl-pubsub-default says so), must not fail the grant after
-- its writes: the release would have handed the lock over and still report
-- failure, and its lease would be reported lost.
local function dlock_grant(lock_key, fence_key, queue_key, waiters_key, owner, px, now_us, retention_ms, publish, channel, tag)
  local token = dlock_issue_fence(fence_key, retention_ms)
  if tag and string.byte(tag) == 103 then -- 'g': a grant channel's tag
    channel = channel .. ':' .. tag
  end
  redis.call('ZREM', queue_key, owner)
  redis.call('HDEL', waiters_key, owner)
  redis.call('SET', lock_key, owner, 'PX', px)
  redis.pcall(publish, channel, dlock_grant_message(token, px, now_us, owner))
  return token
end

-- dlock_keep makes key live at least px ms more; it never shortens its life.
local function dlock_keep(key, px)
  if redis.call('PTTL', key) < tonumber(px) then
    redis.call('PEXPIRE', key, px)
  end
end

-- dlock_keep_queue makes a wait queue's key live at least px ms more, and
-- never shortens its life. That expiry only collects what crashed waiters
-- leave, so a key it extends lives twice px: the enqueues and renewals of
-- the next px ms then cost a PTTL each.
local function dlock_keep_queue(key, px)
  px = px + 0 -- digits or a number: coerced, at half the cost of tonumber
  if redis.call('PTTL', key) < px then
    redis.call('PEXPIRE', key, px + px)
  end
end

-- dlock_enqueue adds owner to the wait queue, or renews its lease there,
-- and returns 1 (queued). extra (may be nil) is stored with it. It does not
-- compute owner's place: no caller reads it, and a ZRANK on a short queue
-- costs more than any other command here (Inspect reports places).
-- fresh says that owner was never queued (a Lock's first attempt), so that
-- no read is needed to tell whether it is.
-- A foreign queue or waiters key raises WRONGTYPE, and leaves nothing
-- written: ZSCORE reads the queue's type before HSET, the first write, or,
-- for a fresh owner, ZADD is the first write and a HSET that fails after
-- it is undone (a queue without an expiry must not stay behind).
local function dlock_enqueue(queue_key, waiters_key, owner, now_us, lease_ms, grant_px, extra, fresh)
  local queued = not fresh and redis.call('ZSCORE', queue_key, owner)
  lease_ms = lease_ms + 0
  local expiry = math.floor(now_us / 1000) + lease_ms
  local entry = string.format('%d ', expiry) .. grant_px
  if extra then
    entry = entry .. ' ' .. extra
  end
  if fresh then
    -- NX: a call sent again after a lost reply keeps the place it took.
    redis.call('ZADD', queue_key, 'NX', string.format('%d', now_us), owner)
    if type(redis.pcall('HSET', waiters_key, owner, entry)) == 'table' then
      redis.call('ZREM', queue_key, owner)
      redis.call('HSET', waiters_key, owner, entry) -- raises the same error
    end
  else
    redis.call('HSET', waiters_key, owner, entry)
    if not queued then
      redis.call('ZADD', queue_key, string.format('%d', now_us), owner)
    end
  end
  -- The queue keys live as long as the longest lease in them may. Each is
  -- checked on its own: one deleted by hand comes back from HSET or ZADD
  -- without an expiry, while the other still has its own.
  dlock_keep_queue(queue_key, lease_ms)
  dlock_keep_queue(waiters_key, lease_ms)
  return 1
end

-- dlock_released_but is a release's reply when its hand-off raised err
-- after the holder's own hold was deleted: the release stands, and the
-- reply says why nobody was handed the lock, always in the words "the lock
-- was released, but ..." (the client ends the lease on them,
-- errs.ReleasedAnyway). A DLOCK_CONFLICT keeps its detail; any other error
-- names the first of keys ({key, the type a lock writes there} pairs) that
-- holds another type, or, when none does, is the server's own refusal (an
-- ACL changed under the holder; not OOM, which Redis checks only up to a
-- script's first write command, and every release has run one by then)
-- and is passed on in its words. The waiters the hand-off missed take the
-- free lock on their next poll.
local function dlock_released_but(err, keys)
  local msg = type(err) == 'table' and tostring(err.err) or tostring(err)
  local at = string.find(msg, 'DLOCK_CONFLICT ', 1, true)
  if at then
    return redis.error_reply('DLOCK_CONFLICT the lock was released, but ' .. string.sub(msg, at + 15))
  end
  for _, k in ipairs(keys) do
    local t = redis.call('TYPE', k[1])
    t = type(t) == 'table' and t.ok or t
    if t ~= k[2] and t ~= 'none' then
      return redis.error_reply('DLOCK_CONFLICT the lock was released, but ' .. k[1] .. ' holds a ' .. t .. ' that no lock wrote')
    end
  end
  return redis.error_reply('ERR the lock was released, but its hand-off failed: ' .. msg)
end
