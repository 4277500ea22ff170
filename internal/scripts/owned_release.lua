-- owned_release.lua: delete a key, only while owner holds it
-- (compare-and-delete), and tell its waiters. Redlock's release on each node.
-- KEYS: 1 the owned key, also the channel its waiters listen on
-- ARGV: 1 owner value, 2 "1" to tell the key's waiters, when it held a
--       quorum of the nodes (a lease's release); "0" for the shares of an
--       acquisition that did not get a quorum: nobody waits for those, and
--       waking everyone for them would send every waiter to ask again.
-- Returns: 1 deleted, 0 not held by owner.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[2] == '1' then
    -- Any payload that is not a grant makes every waiter ask again
    -- (notify.go). With nobody subscribed, PUBLISH costs the server a
    -- dictionary lookup. pcall: a wake-up only, which an ACL may refuse
    -- after the DEL (see dlock_grant in lock_lib.lua).
    redis.pcall('PUBLISH', KEYS[1], 'free')
  end
  return 1
end
return 0
