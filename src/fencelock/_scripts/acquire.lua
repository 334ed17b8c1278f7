-- Acquire a simple lock, or re-confirm a grant this holder already has.
--
-- KEYS[1]  lock key: a string holding the holder token, always with a TTL
-- KEYS[2]  fencing counter: the last token handed out, kept a while (prelude.lua)
-- KEYS[3]  queue of waiters to wake one at a time (a sorted set, by arrival on the server clock)
-- ARGV[1]  holder token (at least 20 random bytes, url-safe base64)
-- ARGV[2]  ttl in milliseconds
-- ARGV[3]  fencing tokens to reserve: 1, or more when waiters of the same process are queued
--          for local hand-offs (the grant's token is the first of the block)
-- ARGV[4]  this waiter's entry in KEYS[3] when it waits to be woken alone (wake="one"), or '':
--          its id, or 'id ttl block token' when a release may grant it the lock (release.lua)
--
-- Returns {1, fence} when granted, fence being the last token of the block. When ARGV[1] already
-- holds the lock (the library retries a request that timed out and the first attempt had in
-- fact succeeded, or a release granted it to this waiter) the lease is re-extended and the fence
-- of that grant is returned again, so the retry cannot fail against itself. Otherwise returns
-- {0, pttl, score}: the holder's remaining ttl in ms (-1: a key without expiry; a reentrant
-- lock holding the name, a hash, is busy the same way), and a waiter is queued (once: it keeps
-- its place on re-tries) with the score of its entry ('' if none). An entry popped by a release
-- and queued again has a new score: that is how a waiter tells a grant it may trust from one that
-- came before this reply (see lock.py). The fence of a grant confirmed again is the counter, or
-- a fresh token if the counter is gone (prelude.lua).
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local fence, err = mint(KEYS[2], ARGV[3], ARGV[2])
  if not fence then
    -- the counter holds something else: undo the SET rather than grant without a token
    redis.call('DEL', KEYS[1])
    return err
  end
  if ARGV[4] ~= '' then
    redis.call('ZREM', KEYS[3], ARGV[4])
  end
  return {1, fence}
end
if simple_holder(KEYS[1]) == ARGV[1] then
  local fence, err = current_token(KEYS[2], ARGV[3], ARGV[2])
  if not fence then
    return err
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, fence}
end
local pttl = redis.call('PTTL', KEYS[1])
local score = ''
if ARGV[4] ~= '' then
  local now = redis.call('TIME')
  -- microseconds, as a string: a Lua number would be sent rounded to 14 digits
  redis.call('ZADD', KEYS[3], 'NX', now[1] .. string.format('%06d', now[2]), ARGV[4])
  score = redis.call('ZSCORE', KEYS[3], ARGV[4])
  -- Waiters re-try (and so re-queue) within the holder's ttl at the latest: a queue nobody
  -- refreshes for that long is left over from waiters that are gone.
  if redis.call('PTTL', KEYS[3]) < pttl + ARGV[2] then
    redis.call('PEXPIRE', KEYS[3], pttl + ARGV[2])
  end
end
return {0, pttl, score}
