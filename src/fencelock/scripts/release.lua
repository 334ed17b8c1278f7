-- Release a simple lock if, and only if, ARGV[1] still holds it; wake a waiter.
--
-- KEYS[1]  lock key
-- KEYS[2]  queue of waiters that wait to be woken alone (see acquire.lua)
-- ARGV[1]  holder token
-- ARGV[2]  wake-up channel (same hash tag as KEYS[1]); a queued waiter listens on
--          ARGV[2] .. ':' .. its id
-- ARGV[3]  'PUBLISH', or 'SPUBLISH' on a Cluster with sharded pub/sub
--
-- Wakes the first queued waiter that still listens (one that left or crashed has no
-- subscriber: the next is tried); when there is none, every waiter of ARGV[2] (wake="all").
-- Returns 1 when released, 3 when released and the wake-up reached a waiting client (the
-- releaser then lets that waiter have the next turn), 0 when ARGV[1] is not the holder (nothing
-- is deleted then).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
-- The wake-up is best effort (without the right to publish, waiters poll): the lock is
-- released whatever it answers.
for _ = 1, 16 do  -- bounds the script's time when many queued waiters are gone
  local head = redis.call('ZPOPMIN', KEYS[2])
  if #head == 0 then
    break
  end
  local woken = redis.pcall(ARGV[3], ARGV[2] .. ':' .. head[1], '1')
  if type(woken) == 'number' and woken > 0 then
    return 3
  end
end
local woken = redis.pcall(ARGV[3], ARGV[2], '1')
if type(woken) == 'number' and woken > 0 then
  return 3
end
return 1
