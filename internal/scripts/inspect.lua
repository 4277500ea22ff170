-- inspect.lua: read everything dlock keeps under one name, for operators
-- (Client.Inspect, List, ForceUnlock). It writes nothing.
-- KEYS: 1-4   mutex: lock, fence, queue, waiters (lock_lib.lua)
--       5-9   reentrant: lock, fence, queue, waiters, holds (reentrant_acquire.lua)
--       10-14 read-write: holders, fence, queue, waiters, tokens (rw_lib.lua)
--       15-20 semaphore: holders, counts, limit, fence, queue, waiters (sem_lib.lua)
--       21    latch (latch_lib.lua)
--       22-26 election: lock, fence, queue, waiters (lock_lib.lua), leader
--             record (election_proclaim.lua)
--       27-31 the held-since hashes (held_record.lua) of the mutex, reentrant,
--             read-write, semaphore and election, in that order
--       all under the name's hash tag.
-- ARGV: none
-- Returns: {mutex, reentrant, rw, semaphore, latch, election}, one part per kind:
--          {} when none of the kind's keys exists, else
--          {last fence, holders, waiters, limit, count, pttl} where
--          holders  {{member, ttl ms, permits, token, {hold id, ...}, held ms},
--                   ...} live holders only (the mutex's and reentrant lock's
--                   key holds the owner value; the rw member starts with its
--                   mode); held ms is how long it has held, -1 until a
--                   renewal recorded its start;
--          waiters  {{member, lease left ms, permits asked, waited ms}, ...}
--                   live waiters in queue order, waited since their arrival
--                   (their score in the queue, server µs);
--          limit    the semaphore's stored limit, 0 when none;
--          count, pttl  the latch's count and remaining ms.
--          Error DLOCK_CONFLICT (or WRONGTYPE) when a key holds something no
--          dlock primitive wrote (the checks the primitives' own scripts make).
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now_ms = math.floor(now_us / 1000)

-- check raises DLOCK_CONFLICT unless key is absent or of type want, holds a
-- number if numeric, and has an expiry if timed; it reports whether the key
-- exists.
local function check(key, want, numeric, timed)
  local kind = redis.call('TYPE', key)
  if type(kind) == 'table' then
    kind = kind['ok']
  end
  if kind == 'none' then
    return false
  end
  if kind ~= want then
    error('DLOCK_CONFLICT ' .. key .. ' holds a ' .. kind .. ' that dlock did not write')
  end
  if numeric and not tonumber(redis.call('GET', key)) then
    error('DLOCK_CONFLICT ' .. key .. ' does not hold a number')
  end
  if timed and redis.call('PTTL', key) == -1 then
    error('DLOCK_CONFLICT ' .. key .. ' has no expiry: dlock did not write it')
  end
  return true
end

-- checks runs check over KEYS[first..] with specs {type, numeric, timed} and
-- reports whether any of those keys exists.
local function checks(first, specs)
  local any = false
  for i, spec in ipairs(specs) do
    if check(KEYS[first + i - 1], spec[1], spec[2], spec[3]) then
      any = true
    end
  end
  return any
end

-- held_for returns how long member has held, by its record in the
-- held-since hash held_key (held_record.lua), or -1 when it has none.
local function held_for(held_key, member)
  local since = tonumber(string.match(redis.call('HGET', held_key, member) or '', '^(%d+) '))
  if not since then
    return -1
  end
  return math.max(0, now_ms - since)
end

local function fence(key)
  return tonumber(redis.call('GET', key) or '0') or 0
end

-- waiting lists the live waiters of a queue (lock_lib.lua's format).
local function waiting(queue_key, waiters_key)
  local out = {}
  local queue = redis.call('ZRANGE', queue_key, 0, -1, 'WITHSCORES')
  for i = 1, #queue, 2 do
    local member = queue[i]
    local entry = redis.call('HGET', waiters_key, member)
    local expiry, extra
    if entry then
      expiry, extra = string.match(entry, '^(%d+) %d+ ?(.*)$')
    end
    if expiry and tonumber(expiry) > now_ms then
      local waited = math.max(0, math.floor((now_us - tonumber(queue[i + 1])) / 1000))
      out[#out + 1] = {member, tonumber(expiry) - now_ms, tonumber(extra) or 0, waited}
    end
  end
  return out
end

-- owned is the part of a lock whose key holds its holder's owner value.
local function owned(k, held_key, holds_key)
  local holders = {}
  local owner = redis.call('GET', KEYS[k])
  local last = fence(KEYS[k + 1])
  if owner then
    local pttl = redis.call('PTTL', KEYS[k])
    if pttl > 0 then -- -2: expired since GET (servers whose clock moves inside a script)
      local ids = {}
      if holds_key then
        ids = redis.call('SMEMBERS', holds_key)
        if #ids == 0 then
          ids = {string.sub(owner, 1, 32)} -- no holds set: the grant's own hold alone (reentrant_acquire.lua)
        end
      end
      holders[1] = {owner, pttl, 0, last, ids, held_for(held_key, owner)}
    end
  end
  return {last, holders, waiting(KEYS[k + 2], KEYS[k + 3]), 0, 0, 0}
end

-- scored lists the live members of a holders zset scored by expiry, with
-- what token_of(member) returns: permits and token.
local function scored(key, held_key, token_of)
  local holders = {}
  local entries = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
  for i = 1, #entries, 2 do
    local member, rest = entries[i], tonumber(entries[i + 1]) - now_ms
    if rest > 0 then
      local permits, token = token_of(member)
      if token then
        holders[#holders + 1] = {member, rest, permits, token, {}, held_for(held_key, member)}
      end
    end
  end
  return holders
end

local reply = {{}, {}, {}, {}, {}, {}}
for k = 27, 31 do
  check(KEYS[k], 'hash', false, true)
end

if checks(1, {{'string', false, true}, {'string', true}, {'zset'}, {'hash'}}) then
  reply[1] = owned(1, KEYS[27])
end

if checks(5, {{'string', false, true}, {'string', true}, {'zset'}, {'hash'}, {'set'}}) then
  reply[2] = owned(5, KEYS[28], KEYS[9])
end

-- A lone read-write holder may be a string under the holders key, its
-- member, with its hold's expiry and the fencing key's token (the solo
-- form, rw_lib.lua); any other string there is foreign.
local rw_solo = redis.pcall('GET', KEYS[10])
if type(rw_solo) == 'string' and not string.match(rw_solo, '^[WR]') then
  error('DLOCK_CONFLICT ' .. KEYS[10] .. ' holds a string that dlock did not write')
end
rw_solo = type(rw_solo) == 'string' and rw_solo
if checks(10, {{rw_solo and 'string' or 'zset', false, true}, {'string', true}, {'zset'}, {'hash'}, {'hash'}}) then
  local last = fence(KEYS[11])
  local holders = {}
  if rw_solo then
    local pttl = redis.call('PTTL', KEYS[10])
    if pttl > 0 then -- -2: expired since GET (servers whose clock moves inside a script)
      holders[1] = {rw_solo, pttl, 0, last, {}, held_for(KEYS[29], rw_solo)}
    end
  else
    holders = scored(KEYS[10], KEYS[29], function(member)
      return 0, tonumber(redis.call('HGET', KEYS[14], member) or '') or 0
    end)
  end
  reply[3] = {last, holders, waiting(KEYS[12], KEYS[13]), 0, 0, 0}
end

-- sem_solo lists a semaphore's solo holder, the string sem_acquire.lua's
-- fast path writes under the holders key ("<owner> <permits> <token>",
-- sem_lib.lua), as scored lists a zset's; nil when that key is no string.
local function sem_solo(key, held_key)
  local kind = redis.call('TYPE', key)
  if (type(kind) == 'table' and kind['ok'] or kind) ~= 'string' then
    return nil
  end
  local v, pttl = redis.call('GET', key), redis.call('PTTL', key)
  if not v or pttl <= -2 then
    return {} -- expired since TYPE (servers whose clock moves inside a script)
  end
  local owner, n, token = string.match(v, '^(.+) (%d+) (%d+)$')
  if not n or pttl == -1 then
    error('DLOCK_CONFLICT ' .. key .. ' holds a string that dlock did not write')
  end
  return {{owner, pttl, tonumber(n), tonumber(token), {}, held_for(held_key, owner)}}
end

local sem_holders = sem_solo(KEYS[15], KEYS[30])
local sem_found = checks(16, {{'hash', false, true}, {'string', true, true}, {'string', true}, {'zset'}, {'hash'}})
if not sem_holders and check(KEYS[15], 'zset', false, true) then
  sem_found = true
end
if sem_holders or sem_found then
  local holders = sem_holders or scored(KEYS[15], KEYS[30], function(member)
    local entry = redis.call('HGET', KEYS[16], member)
    if not entry then
      return nil -- its count was deleted by hand: the semaphore ignores it too
    end
    local n, token = string.match(entry, '^(%d+) (%d+)$')
    return tonumber(n) or 0, tonumber(token) or 0
  end)
  local limit = tonumber(redis.call('GET', KEYS[17]) or '0') or 0
  reply[4] = {fence(KEYS[18]), holders, waiting(KEYS[19], KEYS[20]), limit, 0, 0}
end

if check(KEYS[21], 'string', true, true) then
  local n = tonumber(redis.call('GET', KEYS[21]))
  if n < 1 or n ~= math.floor(n) then
    error('DLOCK_CONFLICT ' .. KEYS[21] .. ' does not hold a latch count')
  end
  reply[5] = {0, {}, {}, 0, n, redis.call('PTTL', KEYS[21])}
end

if checks(22, {{'string', false, true}, {'string', true}, {'zset'}, {'hash'}, {'hash'}}) then
  reply[6] = owned(22, KEYS[31])
end

return reply
