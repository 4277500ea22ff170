-- latch_count.lua: read a latch's count, and its round.
-- KEYS: 1 latch, 2 its zero mark, 3 its round (see latch_lib.lua)
-- ARGV: none
-- Returns: {count, pttl, zeroed, epoch, zeros, prev epoch, prev zeros}: the
--          count (0 when the key is absent), the key's remaining ms (0 when
--          absent), after which it reads as zero; at zero, 1 when the zero
--          mark is there (a CountDown took it there), 0 otherwise (never
--          set, or expired); then the round record's fields, all 0 when
--          there is none.
local n = latch_count(KEYS[1])
local r = latch_round(KEYS[3]) or {epoch = 0, zeros = 0, prev_epoch = 0, prev_zeros = 0}
local pttl, zeroed = 0, 0
if n == 0 then
  zeroed = redis.call('EXISTS', KEYS[2])
else
  pttl = redis.call('PTTL', KEYS[1])
end
return {n, pttl, zeroed, r.epoch, r.zeros, r.prev_epoch, r.prev_zeros}
