-- Leave a latch or a barrier: end a participant's lease without counting down (keys:
-- latch.lua). The last live participant of a barrier to leave tells the others.
--
-- KEYS[1]  participants
-- KEYS[2]  state
-- KEYS[3]  counted
-- ARGV[1]  holder token
-- ARGV[2]  wake-up channel
-- ARGV[3]  'PUBLISH', or 'SPUBLISH' on a Cluster
-- ARGV[4]  keep: ms the latch's keys outlive their last write
--
-- Returns 1 when it left, 0 when ARGV[1] was no participant (nothing is changed then).
local members, state, counted = KEYS[1], KEYS[2], KEYS[3]
if redis.call('ZREM', members, ARGV[1]) == 0 then
  return 0
end
if redis.call('ZCOUNT', members, '(' .. latch_now_ms(), '+inf') == 0 then
  heard(ARGV[3], ARGV[2], 'left ' .. (redis.call('HGET', state, 'gen') or '0'))
end
latch_keep({members, state, counted}, ARGV[4])
return 1
