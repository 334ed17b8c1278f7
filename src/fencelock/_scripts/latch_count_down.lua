-- Count a participant down, once per generation (keys: latch.lua): a count_down sent again
-- (a retry, or a reply lost) by the same participant counts once. The last one opens the
-- latch and tells the waiters.
--
-- KEYS[1]  participants
-- KEYS[2]  state
-- KEYS[3]  counted
-- ARGV[1]  the participant's id
-- ARGV[2]  the count a new latch starts from
-- ARGV[3]  wake-up channel
-- ARGV[4]  'PUBLISH', or 'SPUBLISH' on a Cluster
-- ARGV[5]  keep: ms the latch's keys outlive their last write
--
-- Returns {left, counted now (1) or before (0), generation}.
local members, state, counted = KEYS[1], KEYS[2], KEYS[3]
local gen = latch_gen(state, ARGV[2])
local added = redis.call('SADD', counted, ARGV[1])
local left = tonumber(redis.call('HGET', state, 'count')) - redis.call('SCARD', counted)
if left <= 0 then
  left = 0
  if tonumber(redis.call('HGET', state, 'opened')) < gen then
    redis.call('HSET', state, 'opened', gen)
    heard(ARGV[4], ARGV[3], 'open ' .. gen)
  end
end
latch_keep({members, state, counted}, ARGV[5])
return {left, added, gen}
