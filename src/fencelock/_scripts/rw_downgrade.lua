-- Downgrade a writer of a read-write lock to a reader (keys: semaphore.lua; a read-write lock
-- is a semaphore whose writers hold every permit, rw_lock.py): its share becomes one permit,
-- its lease and token stay, and the queue is served, so the readers queued up to the next
-- writer are granted now.
--
-- KEYS[1]  permits
-- KEYS[2]  queue of waiters
-- KEYS[3]  fencing counter (prelude.lua)
-- KEYS[4]  state
-- KEYS[5]  alive
-- ARGV[1]  holder token
-- ARGV[2]  wake-up channel; a queued waiter listens on ARGV[2] .. ':' .. its id
-- ARGV[3]  'PUBLISH', or 'SPUBLISH' on a Cluster
--
-- Returns 1 when downgraded (3: and a waiting client woken, 4: and a waiter granted), 0 when
-- ARGV[1] holds no permit (its lease ended: nothing is changed).
local permits, queue, fence, state, alive = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local t, now = clock()
reclaim(permits, state, queue, alive, now)
if not redis.call('ZSCORE', permits, ARGV[1]) then
  return 0
end
redis.call('HDEL', state, 'n:' .. ARGV[1])  -- (one permit: the default share)
local limit = tonumber(redis.call('HGET', state, 'limit') or '0')
return serve_queue(permits, fence, state, queue, alive, limit, ARGV[2], ARGV[3], t, now)
