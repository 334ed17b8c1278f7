-- Release a simple lock if, and only if, ARGV[1] still holds it; wake the waiters.
--
-- KEYS[1]  lock key
-- ARGV[1]  holder token
-- ARGV[2]  wake-up channel (same hash tag as KEYS[1])
-- ARGV[3]  'PUBLISH', or 'SPUBLISH' on a Cluster with sharded pub/sub
--
-- Returns 1 when released, 3 when released and the wake-up reached a waiting client (the
-- releaser then lets that waiter have the next turn), 0 when ARGV[1] is not the holder (nothing
-- is deleted then).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  -- the wake-up is best effort (without the right to publish, waiters poll): the lock is
  -- released whatever it answers
  local woken = redis.pcall(ARGV[3], ARGV[2], '1')
  if type(woken) == 'number' and woken > 0 then
    return 3
  end
  return 1
end
return 0
