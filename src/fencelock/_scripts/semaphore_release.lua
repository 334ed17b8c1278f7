-- Release a holder's permits of a semaphore (keys: semaphore.lua) and serve the queue: the
-- waiters whose requests now fit are granted in order (or the first woken to re-try).
--
-- KEYS[1]  permits
-- KEYS[2]  queue of waiters
-- KEYS[3]  fencing counter (prelude.lua)
-- KEYS[4]  state
-- KEYS[5]  alive
-- ARGV[1]  holder token
-- ARGV[2]  wake-up channel; a queued waiter listens on ARGV[2] .. ':' .. its id
-- ARGV[3]  'PUBLISH', or 'SPUBLISH' on a Cluster
-- ARGV[4]  a waiter giving up, to forget first (the wake-up it may have had is passed on), or ''
--
-- Returns 1 when released, 3 when released and a waiting client was woken, 4 when released and
-- a waiter granted, 0 when ARGV[1] holds no permit (nothing is changed then: no release twice,
-- none of another holder's).
local permits, queue, fence, state, alive = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local released = redis.call('ZREM', permits, ARGV[1]) == 1
if released then
  redis.call('HDEL', state, 'n:' .. ARGV[1], 't:' .. ARGV[1])
end
if ARGV[4] == '' and (not released or redis.call('ZCARD', queue) == 0) then
  return released and 1 or 0  -- nobody to serve (nor a lease to take back for anyone)
end
-- (the preludes' helpers from here on)
if ARGV[4] ~= '' then
  dequeue(state, queue, alive, ARGV[4])
end
local t, now = clock()
reclaim(permits, state, queue, alive, now)
local limit = tonumber(redis.call('HGET', state, 'limit') or '0')
local served = serve_queue(permits, fence, state, queue, alive, limit, ARGV[2], ARGV[3], t, now)
return released and served or 0
