-- redlock_acquire.lua: take one Redlock node's share of a lock.
-- KEYS: 1 the lock key; 2 (with ARGV[3]) the lock's lines key
-- ARGV: 1 owner value, 2 ttl ms; a waiting Lock adds 3 its line's id and
--       4 how long that line has waited, ms
-- Returns: 1 (a bare integer: the common reply, the cheapest to build and
--          read): owner holds the key now, for ttl ms (set by this call, or
--          re-armed when an earlier attempt by the same owner had set it);
--          {0, pttl, holder, next}: the owner value holder holds it for pttl
--          ms more (a waiter tells a holder with a quorum of the nodes from
--          contenders that split them); next is 1 when the caller's line has
--          waited longest of the lines waiting for the lock here (it asks
--          first after a release), else 0.
--          Error DLOCK_CONFLICT (or WRONGTYPE) when the key holds something
--          that is not a lock; nothing is modified then.
-- The lines key is a hash: line id -> "<start> <seen>", in ms on this
-- node's clock (lines of machines whose clocks differ compare on one
-- clock). A line that takes the lock leaves it; one not seen for half the
-- ttl is dropped (a waiting line asks again within a third of it). It only
-- orders who asks first: it grants nothing and blocks nobody.

-- took drops the caller's line, which holds the lock now, and answers 1.
local function took()
  if ARGV[3] then
    redis.pcall('HDEL', KEYS[2], ARGV[3])
  end
  return 1
end

-- The common case first: the key free, taken in one call (a GET before it
-- would cost the server another call on every acquire). SET NX writes
-- nothing to a key that exists, whatever it holds, so a foreign value is
-- still met, and reported, by the GET below.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return took()
end
local cur = redis.call('GET', KEYS[1])
if not cur or cur == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return took()
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl < 0 then
  return redis.error_reply('DLOCK_CONFLICT ' .. KEYS[1] .. ' holds a value with no expiry that no lock wrote')
end
if not ARGV[3] then
  return {0, pttl, cur, 0}
end
local lines = redis.pcall('HGETALL', KEYS[2])
if lines.err then -- not a hash: not ours to touch
  return {0, pttl, cur, 0}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local start = now - tonumber(ARGV[4])
local keep = math.floor(tonumber(ARGV[2]) / 2) + 1
local next = 1
for i = 1, #lines, 2 do
  local id = lines[i]
  local s, seen = string.match(lines[i + 1], '^(%d+) (%d+)$')
  if not s or now - tonumber(seen) > keep then
    redis.call('HDEL', KEYS[2], id)
  elseif id ~= ARGV[3] then
    s = tonumber(s)
    if s < start or (s == start and id < ARGV[3]) then
      next = 0
    end
  end
end
redis.call('HSET', KEYS[2], ARGV[3], string.format('%d %d', start, now))
redis.call('PEXPIRE', KEYS[2], keep)
return {0, pttl, cur, next}
