-- Hand a lock held by this process straight to another of its waiters (local hand-off).
--
-- KEYS[1]  lock key: a string (simple lock) or a hash holder -> hold count (reentrant)
-- KEYS[2]  fencing counter
-- ARGV[1]  the releasing holder's token
-- ARGV[2]  the new holder's token (fresh random bytes)
-- ARGV[3]  the new holder's ttl in milliseconds
--
-- Returns {1, fence}: the lock now belongs to ARGV[2] with a fresh ttl and a new, larger fencing
-- token, exactly as if it had been released and acquired, without the round trips in between.
-- Returns {0, 0} when ARGV[1] no longer holds it (its lease expired): nothing is touched.
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'string' and redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
elseif kind == 'hash' and redis.call('HGET', KEYS[1], ARGV[1]) == '1' then
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], ARGV[2], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
else
  return {0, 0}
end
return {1, redis.call('INCR', KEYS[2])}
