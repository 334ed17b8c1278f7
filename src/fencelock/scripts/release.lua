-- Release a simple lock if, and only if, ARGV[1] still holds it; serve the next waiter.
--
-- KEYS[1]  lock key
-- KEYS[2]  queue of waiters that wait to be woken alone (see acquire.lua)
-- KEYS[3]  fencing counter
-- ARGV[1]  holder token
-- ARGV[2]  wake-up channel (same hash tag as KEYS[1]); a queued waiter listens on
--          ARGV[2] .. ':' .. its id
-- ARGV[3]  'PUBLISH', or 'SPUBLISH' on a Cluster with sharded pub/sub
-- ARGV[4]  an entry of KEYS[2] to remove first (a waiter that gives up: whatever a release
--          granted it meanwhile is then released here), or ''
--
-- Serves the first queued waiter that still listens (one that left or crashed has no
-- subscriber: the next is tried). An entry 'id ttl block token' is granted the lock at once: the
-- key is set to its token with its ttl, the counter moves up by block, and the message
-- 'g<score> <counter>' tells it so; a waiter that queued by id alone gets '1' and re-tries. When
-- no queued waiter listens, every waiter of ARGV[2] is woken (wake="all").
-- Returns 1 when released, 3 when released and the wake-up reached a waiting client (the
-- releaser then lets that waiter have the next turn), 4 when released and granted to a queued
-- waiter, 0 when ARGV[1] is not the holder (nothing is deleted then).
if ARGV[4] ~= '' then
  redis.call('ZREM', KEYS[2], ARGV[4])
end
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
  local id, ttl, block, token = string.match(head[1], '^(%S+) (%d+) (%d+) (%S+)$')
  if id == nil then
    local woken = redis.pcall(ARGV[3], ARGV[2] .. ':' .. head[1], '1')
    if type(woken) == 'number' and woken > 0 then
      return 3
    end
  else
    redis.call('SET', KEYS[1], token, 'PX', ttl)
    local fence = redis.pcall('INCRBY', KEYS[3], block)
    if type(fence) == 'table' then
      -- no token to grant with: let the waiter re-try, and hear of the counter itself
      redis.call('DEL', KEYS[1])
      redis.pcall(ARGV[3], ARGV[2] .. ':' .. id, '1')
      return 3
    end
    local granted = redis.pcall(
      ARGV[3], ARGV[2] .. ':' .. id, 'g' .. head[2] .. ' ' .. redis.call('GET', KEYS[3]))
    if type(granted) == 'number' and granted > 0 then
      return 4
    end
    redis.call('DEL', KEYS[1])  -- nobody listens for it (the counter keeps its gap)
  end
end
local woken = redis.pcall(ARGV[3], ARGV[2], '1')
if type(woken) == 'number' and woken > 0 then
  return 3
end
return 1
