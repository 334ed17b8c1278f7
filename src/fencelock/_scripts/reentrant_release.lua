-- Leave a reentrant lock once; release it (and serve the waiters) when the last hold is left.
--
-- KEYS[1]  lock key (hash holder -> hold count)
-- KEYS[2]  queue of waiters (acquire.lua)
-- KEYS[3]  fencing counter (prelude.lua)
-- ARGV[1]  holder token
-- ARGV[2]  wake-up channel (same hash tag as KEYS[1])
-- ARGV[3]  'PUBLISH', or 'SPUBLISH' on a Cluster with sharded pub/sub
-- ARGV[4]  the hold count this holder believes it has before leaving (1: its last hold)
--
-- Returns 1 when released, 3 when released and the wake-up reached a waiting client, 4 when
-- released and granted to a queued waiter of a simple lock (serve.lua), 2 when still held (count
-- decremented), 0 when ARGV[1] does not hold the lock (nothing is touched; a simple lock, a
-- string, holding the name is not ARGV[1]'s either).
-- A count below ARGV[4] answers 2 and touches nothing: the hold was left already, by this same
-- request sent before (Redlock sends a round again when too few replies came in time), or never
-- entered on this node. Leaving once more would take a hold the holder still has, and free the
-- lock under it.
if lock_kind(KEYS[1]) ~= 'hash' then
  return 0
end
local count = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if count == 0 then
  return 0
end
if count < tonumber(ARGV[4]) then
  return 2
end
if count > 1 then
  redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
  return 2
end
redis.call('DEL', KEYS[1])
return serve(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[3], '')
