-- Store a semaphore's limit (set_limit) and serve its queue (keys: semaphore.lua): under a
-- raised limit, the waiters that now fit are granted at once, in order.
--
-- KEYS[1]  permits
-- KEYS[2]  queue of waiters
-- KEYS[3]  fencing counter (prelude.lua)
-- KEYS[4]  state
-- KEYS[5]  alive
-- ARGV[1]  the new limit
-- ARGV[2]  wake-up channel; a queued waiter listens on ARGV[2] .. ':' .. its id
-- ARGV[3]  'PUBLISH', or 'SPUBLISH' on a Cluster
--
-- Returns what serve_queue returns: 1 nobody served, 3 a waiting client woken, 4 a waiter granted.
local permits, queue, fence, state, alive = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local t, now = clock()
reclaim(permits, state, queue, alive, now)
redis.call('HSET', state, 'limit', ARGV[1])
return serve_queue(permits, fence, state, queue, alive, tonumber(ARGV[1]), ARGV[2], ARGV[3], t, now)
