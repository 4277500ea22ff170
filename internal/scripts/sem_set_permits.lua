-- sem_set_permits.lua: change a semaphore's limit for every user of it: set
-- it (SetPermits), or add to the limit in force (AddPermits). Raising it
-- serves waiters at once; lowering it revokes nothing (new requests wait
-- until enough permits come back) and fails the waiters that ask for more
-- than the new limit.
-- KEYS: 1 holders, 2 counts, 3 limit, 4 fence, 5 queue, 6 waiters
--       (see sem_lib.lua), 7 (adding only) calls: AddPermits's recent call
--       ids, a zset scored by server ms
-- ARGV: 1 the new limit, or when adding the change to the limit in force,
--       2 limit retention ms, 3 fence retention ms, 4 publish command,
--       5 channel; to add, also: 6 the caller's permits (the limit in force
--       when none is stored), 7 the largest limit allowed, 8 call id, 9 call
--       memory ms
-- Returns: {limit, fence, px, owner, ...}: the limit now in force, then
--          each grant this call made to a waiter. An addition whose call id
--          is remembered (the same call, sent again after its reply was
--          lost) changes nothing and returns {limit}.
--          Error DLOCK_RANGE <limit in force> when the addition would leave
--          the limit below 1 or above ARGV[7]; nothing is modified then.
--          Error DLOCK_CONFLICT (or WRONGTYPE) when a key holds something no
--          semaphore wrote; nothing is modified then.
sem_check(6)
local limit = tonumber(ARGV[1])
local now_us, now_ms = sem_now()
if ARGV[6] then
  -- Inline rather than in sem_lib.lua: a helper there would be defined by
  -- every semaphore script, renewals included (docs/design.md).
  -- AddPermits always gives the calls key an expiry: one without is not
  -- ours (another type raises WRONGTYPE at ZSCORE, still before any write).
  if redis.call('PTTL', KEYS[7]) == -1 then
    error('DLOCK_CONFLICT ' .. KEYS[7] .. ' has no expiry: AddPermits did not write it')
  end
  local current = tonumber(redis.call('GET', KEYS[3]) or ARGV[6])
  if redis.call('ZSCORE', KEYS[7], ARGV[8]) then -- raises WRONGTYPE first
    return {current}
  end
  limit = current + limit
  if limit < 1 or limit > tonumber(ARGV[7]) then
    return redis.error_reply('DLOCK_RANGE ' .. string.format('%.0f', current))
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[7], '-inf', now_ms - tonumber(ARGV[9]))
  redis.call('ZADD', KEYS[7], now_ms, ARGV[8])
  redis.call('PEXPIRE', KEYS[7], ARGV[9])
end
-- After the checks above and any refusal: a refused change leaves even
-- the holders' form as it was.
sem_unsolo(now_ms, 6)
redis.call('SET', KEYS[3], string.format('%.0f', limit), 'PX', ARGV[2])
sem_drop_expired(now_ms)
if sem_drop_oversized(limit) then
  redis.pcall(ARGV[4], ARGV[5], 'limit') -- a wake-up only: see dlock_grant
end
local _, grants = sem_grant_queued(now_us, limit, sem_used(), ARGV[3], ARGV[4], ARGV[5])
local reply = {limit}
for _, v in ipairs(grants) do
  reply[#reply + 1] = v
end
return reply
