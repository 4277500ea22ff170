-- reentrant_holds.lua: how many holds an owner has on a reentrant lock.
-- KEYS: 1 lock (the grant's hold id, then the owner value), 2 holds (see
--       reentrant_acquire.lua)
-- ARGV: 1 owner value
-- Returns: the owner's hold count, 0 when another owner or nobody holds it.
local cur = redis.call('GET', KEYS[1])
if cur and string.sub(cur, 33) == ARGV[1] then
  local n = redis.call('SCARD', KEYS[2])
  if n == 0 then
    return 1 -- no holds set: the grant's own hold alone
  end
  return n
end
return 0
