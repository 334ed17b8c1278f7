-- Acquire a reentrant lock, or enter it once more: the lock key is a hash holder -> hold count.
--
-- KEYS[1]  lock key (hash; its TTL is the lease)
-- KEYS[2]  fencing counter: incremented on the first entry only, never expires
-- ARGV[1]  holder token
-- ARGV[2]  ttl in milliseconds
-- ARGV[3]  the hold count this holder believes it has (0 for a first acquire)
-- ARGV[4]  fencing tokens to reserve on a first entry (see acquire.lua)
--
-- Returns {1, fence} when entered, fence being the last token of the block. A retry of a request that timed out after it had been applied
-- finds the count already at ARGV[3] + 1 and only re-extends, so it cannot count twice.
-- Returns {0, pttl} when another holder has the lock, {-1, count} when this holder's count is not
-- what it believes (its lease expired and was retaken: it must not enter).
local expected = tonumber(ARGV[3])
local count = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if count == 0 and expected == 0 then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    return {0, redis.call('PTTL', KEYS[1])}
  end
  local fence = redis.pcall('INCRBY', KEYS[2], ARGV[4])
  if type(fence) == 'table' then
    return redis.error_reply('fencing counter ' .. KEYS[2] .. ': ' .. fence.err)
  end
  redis.call('HSET', KEYS[1], ARGV[1], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, redis.call('GET', KEYS[2])}  -- the exact decimal string, not a Lua double
end
if count == expected + 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
elseif count == expected then
  redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
else
  return {-1, count}
end
return {1, redis.call('GET', KEYS[2])}
