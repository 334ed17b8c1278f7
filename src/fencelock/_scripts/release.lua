-- Release a simple lock if, and only if, ARGV[1] still holds it; serve the next waiter.
--
-- KEYS[1]  lock key
-- KEYS[2]  queue of waiters that wait to be woken alone (see acquire.lua)
-- KEYS[3]  fencing counter (prelude.lua)
-- ARGV[1]  holder token
-- ARGV[2]  wake-up channel (same hash tag as KEYS[1]); a queued waiter listens on
--          ARGV[2] .. ':' .. its id
-- ARGV[3]  'PUBLISH', or 'SPUBLISH' on a Cluster with sharded pub/sub
-- ARGV[4]  an entry of KEYS[2] to remove first (a waiter that gives up: whatever a release
--          granted it meanwhile is then released here, and a wake-up it got is passed on), or ''
--
-- Returns 1 when released, 3 when released and the wake-up reached a waiting client (the
-- releaser then lets that waiter have the next turn), 4 when released and granted to a queued
-- waiter (serve.lua), 0 when ARGV[1] is not the holder (nothing is deleted then; a reentrant
-- lock, a hash, holding the name is not ARGV[1]'s either).
local popped = false
if ARGV[4] ~= '' then
  popped = redis.call('ZREM', KEYS[2], ARGV[4]) == 0
end
local holder = simple_holder(KEYS[1])
if holder ~= ARGV[1] then
  if popped and holder == false then
    -- A leaving waiter whose entry a release popped (it was woken, and gives up before its
    -- re-try) finds the lock free: the wake-up it will not use goes to the next waiter.
    serve(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[3])
  end
  return 0
end
redis.call('DEL', KEYS[1])
return serve(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[3])
