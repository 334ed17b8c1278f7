-- Leave a reentrant lock once; release it (and wake the waiters) when the last hold is left.
--
-- KEYS[1]  lock key (hash holder -> hold count)
-- ARGV[1]  holder token
-- ARGV[2]  wake-up channel (same hash tag as KEYS[1])
-- ARGV[3]  'PUBLISH', or 'SPUBLISH' on a Cluster with sharded pub/sub
--
-- Returns 1 when released, 3 when released and the wake-up reached a waiting client, 2 when
-- still held (count decremented), 0 when ARGV[1] does not hold the lock (nothing is touched).
local count = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if count == 0 then
  return 0
end
if count > 1 then
  redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
  return 2
end
redis.call('DEL', KEYS[1])
-- the wake-up is best effort (without the right to publish, waiters poll): the lock is
-- released whatever it answers
local woken = redis.pcall(ARGV[3], ARGV[2], '1')
if type(woken) == 'number' and woken > 0 then
  return 3
end
return 1
