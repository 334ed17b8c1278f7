-- Acquire a reentrant lock, or enter it once more: the lock key is a hash holder -> hold count.
--
-- KEYS[1]  lock key (hash; its TTL is the lease)
-- KEYS[2]  fencing counter: a token is handed out on the first entry only, and kept for the
--          lease (prelude.lua)
-- KEYS[3]  queue of waiters (acquire.lua), where a waiter puts '*' (woken on the lock's channel)
-- ARGV[1]  holder token
-- ARGV[2]  ttl in milliseconds
-- ARGV[3]  the hold count this holder believes it has (0 for a first acquire)
-- ARGV[4]  fencing tokens to reserve on a first entry (see acquire.lua)
-- ARGV[5]  '*' when a waiter re-tries (a release then wakes it), else '' or absent
--
-- Returns {1, fence} when entered, fence being the last token of the block. A retry of a
-- request that timed out after it had been applied finds the count already at ARGV[3] + 1 and
-- only re-extends, so it cannot count twice. Returns {0, pttl} when another holder has the lock
-- (a simple lock, a string, holding the name is busy the same way), {-1, count} when this
-- holder's count is not what it believes (its lease expired and was retaken: it must not enter).
local kind = lock_kind(KEYS[1])
local expected = tonumber(ARGV[3])
local count = 0
if kind == 'hash' then
  count = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
end
if count == 0 and expected == 0 then
  if kind ~= 'none' then
    local pttl = redis.call('PTTL', KEYS[1])
    if ARGV[5] == '*' then
      redis.call('ZADD', KEYS[3], 'NX', '+inf', '*')
      if redis.call('PTTL', KEYS[3]) < pttl + ARGV[2] then
        redis.call('PEXPIRE', KEYS[3], pttl + ARGV[2])
      end
    end
    return {0, pttl}
  end
  local fence, err = mint(KEYS[2], ARGV[4], ARGV[2])
  if not fence then
    return err
  end
  redis.call('HSET', KEYS[1], ARGV[1], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, fence}
end
if count ~= expected and count ~= expected + 1 then
  return {-1, count}
end
local fence, err = current_token(KEYS[2], ARGV[4], ARGV[2])
if not fence then
  return err
end
if count == expected then
  redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, fence}
