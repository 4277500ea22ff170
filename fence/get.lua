-- get.lua: read a fenced value, refusing a token lower than the highest seen.
-- KEYS: 1 the value's key, 2 its mark (the highest token seen; same hash tag)
-- ARGV: 1 token (decimal, no sign, no leading zeros), 2 expiry ms of a
--       mark made for an absent value (0: none)
-- Returns: {1, value} accepted (value nil when the key is absent);
--          {0, highest} refused: the token is lower than highest.
--          Error FENCE_CONFLICT when the mark is not a token; WRONGTYPE when
--          the value's key is not a string. Nothing is written then.
local hi = redis.call('GET', KEYS[2])
if hi and not string.match(hi, '^%d+$') then
  return redis.error_reply('FENCE_CONFLICT ' .. KEYS[2] .. ' does not hold a fencing token')
end
local tok = ARGV[1]
-- Decimal strings compare exactly, where Lua's doubles would round tokens
-- above 2^53.
local function newer(a, b)
  if #a ~= #b then return #a > #b end
  return a > b
end
if hi and newer(hi, tok) then
  return {0, hi}
end
local value = redis.call('GET', KEYS[1])
if not hi or newer(tok, hi) then
  redis.call('SET', KEYS[2], tok)
  -- The mark lives as long as the value: a value with an expiry takes its
  -- mark with it; one without keeps it; none gets ARGV[2].
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl > 0 then
    redis.call('PEXPIRE', KEYS[2], pttl)
  elseif pttl == -2 and tonumber(ARGV[2]) > 0 then
    redis.call('PEXPIRE', KEYS[2], ARGV[2])
  end
end
return {1, value}
