-- Join a latch or a barrier as a participant with a lease (keys: latch.lua), or confirm the
-- lease of a participant that joined already (a re-sent request). Never busy.
--
-- KEYS[1]  participants (sorted set: holder token -> lease end, ms)
-- KEYS[2]  fencing counter (prelude.lua): each participant's grant gets a token
-- KEYS[3]  state (hash: count, gen, opened)
-- KEYS[4]  counted (set of participant ids)
-- ARGV[1]  holder token (its label, after '~', is the participant's id)
-- ARGV[2]  ttl in milliseconds
-- ARGV[3]  fencing tokens to reserve (1)
-- ARGV[4]  a queue entry (unused: a join never waits)
-- ARGV[5]  the count a new latch starts from
-- ARGV[6]  a barrier's parties: it opens once that many participants hold live leases in the
--          generation (0: a latch, opened by count_down)
-- ARGV[7]  wake-up channel
-- ARGV[8]  'PUBLISH', or 'SPUBLISH' on a Cluster
-- ARGV[9]  keep: ms the latch's keys outlive their last write
--
-- Returns {1, fence}, as acquire.lua does.
local members, fence, state, counted = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local holder, ttl, parties = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[6])
local gen = latch_gen(state, ARGV[5])
if parties > 0 then
  redis.call('HSETNX', state, 'parties', parties)
end
local now = latch_now_ms()
local live = redis.call('ZCOUNT', members, '(' .. now, '+inf')
if parties > 0 and live == 0 and tonumber(redis.call('HGET', state, 'opened')) >= gen then
  -- a barrier's round is over (everyone left, or their leases ended): this one starts the next
  gen = gen + 1
  redis.call('HSET', state, 'gen', gen)
  redis.call('DEL', members, counted)
end
local token, err
if redis.call('ZSCORE', members, holder) then
  token, err = current_token(fence, ARGV[3], ARGV[2])
else
  token, err = mint(fence, ARGV[3], ARGV[2])
  live = live + 1
end
if not token then
  return err
end
redis.call('ZADD', members, now + ttl, holder)
if parties > 0 and live >= parties and tonumber(redis.call('HGET', state, 'opened')) < gen then
  redis.call('HSET', state, 'opened', gen)
  heard(ARGV[8], ARGV[7], 'open ' .. gen)
end
latch_keep({members, state, counted}, math.max(tonumber(ARGV[9]), ttl))
return {1, token}
