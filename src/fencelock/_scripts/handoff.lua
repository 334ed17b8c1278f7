-- Local hand-off: the releasing holder passes the lock to another waiter of its own process,
-- and reserves a block of fencing tokens for that and the next hand-offs of the streak.
--
-- KEYS[1]  lock key: 'holder token' (simple lock) or a hash holder -> hold count (reentrant)
-- KEYS[2]  fencing counter (prelude.lua)
-- ARGV[1]  the holder token (the process keeps it across its local hand-offs)
-- ARGV[2]  the new holder's ttl in milliseconds
-- ARGV[3]  how many fencing tokens to reserve (the longest streak of local hand-offs)
--
-- Returns {1, top}: the lease restarts at ARGV[2] and a block of ARGV[3] tokens ending at top
-- was handed out (a simple lock's key now holds top); the process hands out top - ARGV[3] + 1 ..
-- top, one per hand-off, and any later grant by anyone gets more than top. Returns {0, 0} when
-- ARGV[1] no longer holds the lock (its lease expired): nothing is touched.
local mine, held = holds(KEYS[1], ARGV[1])
if not mine then
  return {0, 0}
end
if held then
  local top, err = mint(KEYS[2], ARGV[3], 0, held)
  if not top then
    return err
  end
  redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. top, 'PX', ARGV[2])
  return {1, top}
end
-- a reentrant lock's (or a lock taken without scripts): its counter kept for the lease
local top, err = mint(KEYS[2], ARGV[3], ARGV[2])
if not top then
  return err
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, top}
