-- Release a simple lock if, and only if, ARGV[1] still holds it; wake the waiters.
--
-- KEYS[1]  lock key
-- ARGV[1]  holder token
-- ARGV[2]  wake-up channel (same hash tag as KEYS[1])
-- ARGV[3]  'PUBLISH', or 'SPUBLISH' on a Cluster with sharded pub/sub
--
-- Returns 1 when released, 0 when ARGV[1] is not the holder (nothing is deleted then).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call(ARGV[3], ARGV[2], '1')
  return 1
end
return 0
