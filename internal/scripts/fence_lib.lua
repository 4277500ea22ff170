-- fence_lib.lua: fencing tokens, issued in this one place. Every script
-- that grants a lock gets its token from the block below.
--
-- A lock's fencing key holds a counter, and each grant takes the next
-- number, so a later grant always carries a higher token. A fresh counter
-- (never used, or expired after its retention) starts at the server clock
-- in µs instead of 1, so tokens keep increasing across its expiry: a
-- counter created at T0 stood at most at T0 µs plus one per grant since,
-- far below the clock an hour later. The counter expires retention_ms
-- after it started; grants made through dlock_issue_fence (hand-offs, and
-- acquires that found waiters) push that back, because a waiter may read
-- the token later (dlock_last_fence). Scripts that hand their token
-- straight to the one caller that takes it (the acquire scripts' free-lock
-- fast paths, mutex_transfer.lua) leave the expiry as it is.
--
-- How scripts get it (scripts.go): a line
--   --@fence(<fence key>, <retention ms>)
-- in a script is replaced by the block between --@block and --@end, with
-- fence_key and retention_ms replaced by those two Lua expressions. The
-- block declares `local token`: the new token, or, when Redis refused the
-- INCR, the error it gave (a table), which the script handles itself
-- (dlock_fence_conflict tells a foreign value from a server refusal). The
-- rest of this file, the functions, goes in front of lock_lib.lua, and
-- wherever a script has a line "--@fence_lib".
-- The block is copied rather than called because the fast paths run
-- before any helper is defined: defining a Lua function costs more, on
-- every call of the script, than a Redis command (see mutex_acquire.lua).
-- The retention expression sits in the fresh-counter branch only, so it is
-- evaluated once per counter, not once per grant.

--@block
local token = redis.pcall('INCR', fence_key)
if token == 1 then -- a fresh counter: start at the server clock, in µs
  local t = redis.call('TIME')
  local digits = t[1] .. string.sub('00000' .. t[2], -6) -- without formatting a number
  redis.call('SET', fence_key, digits, 'PX', retention_ms)
  token = tonumber(digits)
end
--@end

-- A script that ends when the block's INCR was refused has a line
--   --@fence_refused(<fence key>)
-- after the block (and after undoing its own writes), replaced by the
-- block below: it returns DLOCK_CONFLICT for a foreign value under the
-- fencing key, or the server's own refusal (OOM at maxmemory, an ACL's
-- NOPERM) in its own words.
--@refused
if type(token) ~= 'number' then
  --@fence_lib
  local conflict = dlock_fence_conflict(fence_key) -- GET raises WRONGTYPE
  if conflict then
    return redis.error_reply(conflict)
  end
  return token
end
--@end

-- dlock_counter reports whether v, a fencing key's value, is a counter
-- INCR counts on from: an integer as Redis writes one ("0", or digits
-- without a leading zero after an optional '-') that leaves room for one
-- more. INCR refuses anything else, including strings Lua's tonumber reads
-- ("007", "1.5", "1e3", 20 digits), so a check before a script's writes
-- must use this, not tonumber, or the INCR after them raises.
local function dlock_counter(v)
  if v == '0' then
    return true
  end
  local sign, digits = string.match(v, '^(%-?)([1-9]%d*)$')
  if not digits or #digits > 19 then
    return false
  elseif #digits < 19 then
    return true
  elseif sign == '-' then
    return digits <= '9223372036854775808'
  end
  return digits < '9223372036854775807' -- INCR of the largest overflows
end

-- dlock_fence_conflict is called when INCR of the fencing key failed, and
-- returns the DLOCK_CONFLICT message when the key holds something other
-- than a counter (GET raises WRONGTYPE for a list or a hash), or nil when
-- the server refused INCR itself: at maxmemory with a policy that evicts
-- nothing, Redis refuses a script's first write that may grow memory (INCR
-- is one), and an ACL may deny it. That refusal must reach the caller as
-- the server words it ("OOM ...", "NOPERM ..."): reported as a foreign
-- key, it told operators to delete the fencing key.
local function dlock_fence_conflict(fence_key)
  local v = redis.call('GET', fence_key)
  if v and not dlock_counter(v) then
    return 'DLOCK_CONFLICT the fencing key ' .. fence_key .. ' does not hold a number'
  end
  return nil
end

-- dlock_issue_fence returns the next fencing token and keeps the counter
-- retention_ms more. Call it before any other write of a grant: it raises
-- when the key holds something else, or when Redis refuses INCR, and a
-- script's earlier writes would not be rolled back. Conflicts are raised
-- as plain strings: Redis and miniredis both keep the text of those.
local function dlock_issue_fence(fence_key, retention_ms)
  --@fence(fence_key, retention_ms)
  if type(token) ~= 'number' then
    local conflict = dlock_fence_conflict(fence_key)
    if conflict then
      error(conflict)
    end
    -- Nothing was written since the first INCR, so Redis refuses this one
    -- too, and redis.call raises the refusal in the server's own words.
    token = redis.call('INCR', fence_key)
  end
  redis.call('PEXPIRE', fence_key, retention_ms)
  return token
end

-- dlock_last_fence returns the last fencing token issued, or 0.
local function dlock_last_fence(fence_key)
  return tonumber(redis.call('GET', fence_key) or '0') or 0
end
