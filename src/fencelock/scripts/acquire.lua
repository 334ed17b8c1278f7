-- Acquire a simple lock, or re-confirm a grant this holder already has.
--
-- KEYS[1]  lock key: a string holding the holder token, always with a TTL
-- KEYS[2]  fencing counter: an integer incremented on every grant, never expires
-- ARGV[1]  holder token (at least 20 random bytes, url-safe base64)
-- ARGV[2]  ttl in milliseconds
-- ARGV[3]  fencing tokens to reserve: 1, or more when waiters of the same process are queued
--          for local hand-offs (the grant's token is the first of the block)
--
-- Returns {1, fence} when granted, fence being the last token of the block. When ARGV[1] already holds the lock (the library retries a
-- request that timed out, and the first attempt had in fact succeeded) the lease is re-extended
-- and the fence of that grant is returned again, so the retry cannot fail against itself.
-- Otherwise returns {0, pttl}: the holder's remaining ttl in ms (-1: a key without expiry).
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local fence = redis.pcall('INCRBY', KEYS[2], ARGV[3])
  if type(fence) == 'table' then
    -- the counter holds something else: undo the SET rather than grant without a token
    redis.call('DEL', KEYS[1])
    return redis.error_reply('fencing counter ' .. KEYS[2] .. ': ' .. fence.err)
  end
  return {1, redis.call('GET', KEYS[2])}  -- the exact decimal string, not a Lua double
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, redis.call('GET', KEYS[2])}
end
return {0, redis.call('PTTL', KEYS[1])}
