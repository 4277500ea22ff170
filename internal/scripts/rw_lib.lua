-- rw_lib.lua: helpers shared by the read-write lock scripts. It is prepended
-- after lock_lib.lua (see scripts.go), whose queue, waiter and fencing
-- helpers it builds on.
--
-- A read-write lock N keeps these keys, all under one hash tag, and every rw
-- script takes them as KEYS in this order:
--   1 holders  zset    holder member -> its expiry (server ms); or, for a
--                      solo holder, a string (below); also the channel
--   2 fence    string  the last fencing token issued, for both modes
--   3 queue    zset    waiting members, scored by arrival (server µs)
--   4 waiters  hash    member -> "<lease expiry, server ms> <grant px>"
--   5 tokens   hash    holder member -> its fencing token
-- A member is the mode, "W" (writer) or "R" (reader), followed by the owner
-- value. holders and tokens are kept alive at least as long as their latest
-- member, so they vanish by themselves. Every script that grants or releases
-- first drops the holders whose expiry has passed (by the server clock), so
-- a crashed holder's share frees itself then; extend and pttl treat such a
-- holder as gone and never revive it.
--
-- The solo form: the acquire's fast path takes a lock nobody holds or waits
-- for as a Mutex does, with SET holders <member> NX PX <ttl>, and no tokens
-- entry (the token is the fencing key's, see rw_unsolo). Its release is a
-- DEL, its renewal a PEXPIRE, its hand-off within the process
-- (rw_transfer.lua) a SET. A grant from the queue to a writer writes the
-- same form (rw_grant_heads): a writer is granted only when nobody holds
-- the lock, so it holds alone. A waiter queueing behind a solo writer, or
-- leaving while it holds, reads it as it is: nobody can be granted then.
-- Every other path first turns it into the zset form with rw_unsolo. A
-- string under holders without an expiry, or whose value is not a member,
-- is foreign.

-- rw_time returns the server clock in µs and in ms.
local function rw_time()
  local now_us = dlock_now_us()
  return now_us, math.floor(now_us / 1000)
end

-- rw_check_keys raises DLOCK_CONFLICT when the fencing counter or the
-- tokens hash holds something no rw script wrote. Scripts call it before
-- their first write: a script's writes are not rolled back by a later error,
-- and a foreign key must be left exactly as it was.
local function rw_check_keys(keys)
  local fence = redis.call('TYPE', keys[2]).ok
  if fence ~= 'none' and (fence ~= 'string' or not dlock_counter(redis.call('GET', keys[2]))) then
    error('DLOCK_CONFLICT the fencing key ' .. keys[2] .. ' does not hold a number')
  end
  local tokens = redis.call('TYPE', keys[5]).ok
  if tokens ~= 'none' and tokens ~= 'hash' then
    error('DLOCK_CONFLICT ' .. keys[5] .. ' holds a ' .. tokens .. ' that no read-write lock wrote')
  end
end

-- rw_solo returns the member of a solo holder and its remaining ms, or nil
-- when holders is absent or a zset. It raises DLOCK_CONFLICT, writing
-- nothing, when holders has no expiry or holds a string that is not a
-- member: no rw script writes either.
local function rw_solo(holders_key)
  local pttl = redis.call('PTTL', holders_key)
  if pttl == -1 then
    error('DLOCK_CONFLICT ' .. holders_key .. ' holds a value with no expiry that no lock wrote')
  end
  local member = redis.pcall('GET', holders_key) -- a zset raises: not solo
  if type(member) ~= 'string' then
    return nil
  end
  local mode = string.sub(member, 1, 1)
  if mode ~= 'W' and mode ~= 'R' then
    error('DLOCK_CONFLICT ' .. holders_key .. ' holds a string that no read-write lock wrote')
  end
  if pttl < 0 then
    return nil -- expired since PTTL: only servers whose clock moves inside a script
  end
  return member, pttl
end

-- rw_unsolo turns a solo holder into the zset form, with the same member
-- and expiry, so that the zset paths see every holder; it changes nothing
-- else. Call it after rw_check_keys (its HSET must not meet a foreign
-- tokens key) and rw_solo (which raises for a foreign string).
-- The holder's token is the fencing key's value: a solo holder is written
-- only on a lock nobody else holds, with the token the counter has just
-- issued (the acquire's fast path, rw_transfer.lua, rw_grant_heads, which
-- grants nothing after a writer), and every other grant runs this first
-- (acquire's full path, release, downgrade), so no grant can have counted
-- on since. The counter outlives its last grant by its
-- retention (an hour at least): a solo holder renewed past that reads 0
-- here, as a Mutex's holder does in inspect.lua; its Lease keeps its own.
-- Its first write is DEL, which Redis allows at maxmemory (unlike ZADD, see
-- rw_extend.lua), so that a downgrade or release still runs there.
local function rw_unsolo(keys, member, pttl, now_ms)
  local token = redis.call('GET', keys[2]) or '0'
  redis.call('DEL', keys[1])
  redis.call('ZADD', keys[1], string.format('%.0f', now_ms + pttl), member)
  redis.call('HSET', keys[5], member, token)
  redis.call('PEXPIRE', keys[1], pttl)
  dlock_keep(keys[5], pttl)
end

-- rw_prune drops the holders whose expiry has passed. On a key of another
-- type it raises WRONGTYPE before anything is written.
local function rw_prune(keys, now_ms)
  local expired = redis.call('ZRANGEBYSCORE', keys[1], '-inf', string.format('%.0f', now_ms))
  for _, member in ipairs(expired) do
    redis.call('ZREM', keys[1], member)
    redis.call('HDEL', keys[5], member)
  end
end

-- rw_set_holder makes member a holder with token until now + px.
local function rw_set_holder(keys, member, px, now_ms, token)
  redis.call('ZADD', keys[1], string.format('%.0f', now_ms + tonumber(px)), member)
  redis.call('HSET', keys[5], member, string.format('%.0f', token))
  dlock_keep(keys[1], px)
  dlock_keep(keys[5], px)
end

-- rw_hold makes member a holder until now + px and returns its new fencing
-- token. The token is issued first: its INCR is the write Redis may refuse
-- (see dlock_issue_fence), and a holder written before it would stay.
local function rw_hold(keys, member, px, now_us, now_ms, retention_ms)
  local token = dlock_issue_fence(keys[2], retention_ms)
  rw_set_holder(keys, member, px, now_ms, token)
  return token
end

-- rw_drop removes member from the holders and reports whether it was one.
local function rw_drop(keys, member)
  redis.call('HDEL', keys[5], member)
  return redis.call('ZREM', keys[1], member) == 1
end

-- rw_token returns the fencing token issued to holder member.
local function rw_token(keys, member)
  return tonumber(redis.call('HGET', keys[5], member) or '') or dlock_last_fence(keys[2])
end

-- rw_writer_holds reports whether a writer holds the lock. A writer never
-- shares it, so it is then the only holder.
local function rw_writer_holds(keys)
  local first = redis.call('ZRANGE', keys[1], 0, 0)
  return #first > 0 and string.sub(first[1], 1, 1) == 'W'
end

-- rw_free_for reports whether a newcomer of mode could hold the lock now,
-- queue aside: a writer when nobody holds it, a reader when no writer does.
local function rw_free_for(keys, mode)
  if mode == 'W' then
    return redis.call('ZCARD', keys[1]) == 0
  end
  return not rw_writer_holds(keys)
end

-- rw_grant_heads grants the lock to the live waiters at the head of the
-- queue as far as the rules allow: the head writer when nobody holds the
-- lock; every reader up to the first writer when no writer holds it. Each
-- grant lasts the waiter's claim window (its grant px) and is published as
-- "<fence> <px> <granted at µs> <owner value>" (the member without its mode), like
-- lock_lib's dlock_grant. self, the member running the script (may be nil),
-- is granted self_px instead and learns of it from the script's reply.
-- A writer holds alone, so it is granted in the solo form, as the fast path
-- takes a free lock: its poll, renewal, release and local hand-off then cost
-- what a Mutex's do. holders is absent then (the zset of nobody), so SET
-- replaces nothing, and the loop ends with it, so no grant counts on past
-- its token (see rw_unsolo).
-- Returns the published grants, flattened: {member, fence, px, ...}, then
-- the writer granted solo (or nil), its token and its px: the caller must
-- read holders as a string after that.
local function rw_grant_heads(keys, now_us, now_ms, retention_ms, publish, channel, self, self_px)
  local granted = {}
  while true do
    local head, px = dlock_live_head(keys[3], keys[4], now_ms)
    if not head then
      break
    end
    local mode = string.sub(head, 1, 1)
    if not rw_free_for(keys, mode) then
      break
    end
    local token = dlock_issue_fence(keys[2], retention_ms) -- first: see rw_hold
    dlock_dequeue(keys[3], keys[4], head)
    if head == self then
      px = self_px
    end
    if mode == 'W' then
      redis.call('SET', keys[1], head, 'PX', px)
    else
      rw_set_holder(keys, head, px, now_ms, token)
    end
    if head ~= self then
      redis.pcall(publish, channel, dlock_grant_message(token, px, now_us, string.sub(head, 2))) -- see dlock_grant
      table.insert(granted, head)
      table.insert(granted, token)
      table.insert(granted, tonumber(px))
    end
    if mode == 'W' then
      return granted, head, token, tonumber(px)
    end
  end
  return granted
end
