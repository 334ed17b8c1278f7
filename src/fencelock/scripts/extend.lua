-- Reset the remaining lease of a simple lock to ARGV[2] ms, if ARGV[1] still holds it.
--
-- KEYS[1]  lock key
-- ARGV[1]  holder token
-- ARGV[2]  ttl in milliseconds
--
-- Returns 1 when extended, 0 when ARGV[1] is not the holder (nothing is touched then).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
