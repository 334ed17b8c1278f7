-- Release every name of a multi-lock that ARGV[1] holds, serving each name's waiters as a lock's
-- release does (serve.lua), or take a waiter that gives up out of the names' queues.
--
-- KEYS        as multi_acquire.lua: lock key, fencing counter and queue of each name
-- ARGV[1]     holder token
-- ARGV[2]     a waiter's entry to take out of every queue first (a waiter that gives up: a
--             wake-up it got and will not use goes on to the next waiter), or ''
-- ARGV[3]     'PUBLISH', or 'SPUBLISH' on a Cluster
-- ARGV[3+i]   wake-up channel of name i
--
-- Returns 1 when every name was released, 3 when also a waiting client was woken, 4 when also a
-- queued waiter was granted a name; 0 when ARGV[1] did not hold every name (those it held are
-- released all the same: the grant was lost in part, or never made).
local n = #KEYS / 3
local holder, leaving, publish = ARGV[1], ARGV[2], ARGV[3]
local outcome, whole = 1, true
for i = 1, n do
  local lock, fence, queue, channel = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i], ARGV[3 + i]
  if leaving ~= '' then
    redis.call('ZREM', queue, leaving)
  end
  local found, token = simple_holder(lock, redis.pcall('GET', lock))
  if found == holder then
    redis.call('DEL', lock)
    if token then
      forget(fence, token)
    end
    outcome = math.max(outcome, serve(lock, queue, fence, channel, publish, ''))
  else
    whole = false
    if leaving ~= '' and found == false and redis.call('ZCARD', queue) > 0 then
      serve(lock, queue, fence, channel, publish, '')
    end
  end
end
if not whole then
  return 0
end
return outcome
