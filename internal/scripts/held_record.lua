-- held_record.lua: record when a holder's hold began, for inspection
-- (docs/guide.md, "How long a holder has held a lock"). A kind's
-- held-since hash holds member -> "<hold start> <recorded at>" (server ms).
-- The script names that hash alone and checks no ownership: a record of a
-- hold that has just ended is never read (inspect.lua looks up the current
-- holders' members, which are fresh for every grant), and a single-key
-- script is served by ASK during a slot migration, as renewals are.
-- KEYS: 1 the held-since hash
-- ARGV: 1 member, 2 the hold's age in ms, 3 retention ms: how long a record
--       lives unless recorded again
-- Returns: 1. Records older than the retention go.
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local retention = tonumber(ARGV[3])
local entries = redis.call('HGETALL', KEYS[1])
for i = 1, #entries, 2 do
  local at = tonumber(string.match(entries[i + 1], ' (%d+)$') or '')
  if not at or at + retention <= now_ms then
    redis.call('HDEL', KEYS[1], entries[i])
  end
end
redis.call('HSET', KEYS[1], ARGV[1], string.format('%.0f %.0f', now_ms - tonumber(ARGV[2]), now_ms))
redis.call('PEXPIRE', KEYS[1], retention)
return 1
