-- Start a latch's next generation (keys: latch.lua): counting down from ARGV[1] again, with no
-- participant (the leases of those of the last generation end: their holders hear of it).
--
-- KEYS[1]  participants
-- KEYS[2]  state
-- KEYS[3]  counted
-- ARGV[1]  the new generation's count
-- ARGV[2]  wake-up channel
-- ARGV[3]  'PUBLISH', or 'SPUBLISH' on a Cluster
-- ARGV[4]  keep: ms the latch's keys outlive their last write
--
-- Returns the new generation.
local members, state, counted = KEYS[1], KEYS[2], KEYS[3]
local gen = tonumber(redis.call('HGET', state, 'gen') or '0') + 1
redis.call('HSET', state, 'gen', gen, 'count', ARGV[1])
redis.call('HSETNX', state, 'opened', 0)
redis.call('DEL', members, counted)
heard(ARGV[3], ARGV[2], 'reset ' .. gen)
latch_keep({state}, ARGV[4])
return gen
