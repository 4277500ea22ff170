-- reentrant_lib.lua: the reentrant lock's hand-off, prepended after
-- lock_lib.lua to the reentrant scripts.

-- reentrant_check_holds raises DLOCK_CONFLICT unless the holds key is
-- absent or one of ours (a set with an expiry, left by a lock whose key was
-- deleted): call it before any write of a grant, which deletes it.
local function reentrant_check_holds(holds_key)
  local t = redis.call('TYPE', holds_key).ok
  if t ~= 'none' and (t ~= 'set' or redis.call('PTTL', holds_key) < 0) then
    error('DLOCK_CONFLICT ' .. holds_key .. ' holds a ' .. t .. ' that no reentrant lock wrote')
  end
end

-- reentrant_grant hands the lock to the waiting member (hold id followed by
-- owner value): the owner holds the lock with that one hold, for the claim
-- window px, and is told as by dlock_grant. The key holds member: this
-- grant's hold id names the grant, and with no holds set it is the one
-- hold (see reentrant_acquire.lua).
local function reentrant_grant(keys, member, px, now_us, retention_ms, publish, channel)
  reentrant_check_holds(keys[5])
  local token = dlock_issue_fence(keys[2], retention_ms)
  dlock_dequeue(keys[3], keys[4], member)
  redis.call('SET', keys[1], member, 'PX', px)
  redis.call('DEL', keys[5])
  redis.pcall(publish, channel, dlock_grant_message(token, px, now_us, member)) -- see dlock_grant
  return token
end
