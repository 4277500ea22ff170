-- set.lua: write a fenced value, refusing a token lower than the highest seen.
-- KEYS: 1 the value's key, 2 its mark (the highest token seen; same hash tag)
-- ARGV: 1 token (decimal, no sign, no leading zeros), 2 the value,
--       3 expiry ms of the value and its mark (0: none)
-- Returns: {1} written;
--          {0, highest} refused: the token is lower than highest.
--          Error FENCE_CONFLICT when the mark is not a token; WRONGTYPE when
--          the value's key is not a string. Nothing is written then.
local hi = redis.call('GET', KEYS[2])
if hi and not string.match(hi, '^%d+$') then
  return redis.error_reply('FENCE_CONFLICT ' .. KEYS[2] .. ' does not hold a fencing token')
end
local tok = ARGV[1]
local function newer(a, b)
  if #a ~= #b then return #a > #b end
  return a > b
end
if hi and newer(hi, tok) then
  return {0, hi}
end
-- TYPE before any write: SET would silently replace a list or a hash.
local t = redis.call('TYPE', KEYS[1])['ok']
if t ~= 'none' and t ~= 'string' then
  return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' holds a ' .. t .. ', not a string')
end
local px = tonumber(ARGV[3])
-- tok is at least hi here: it becomes the mark, which lives as long as
-- the value.
if px > 0 then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', px)
  redis.call('SET', KEYS[2], tok, 'PX', px)
else
  redis.call('SET', KEYS[1], ARGV[2])
  redis.call('SET', KEYS[2], tok)
end
return {1}
