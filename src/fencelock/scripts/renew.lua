-- Reset the remaining lease of several locks at once, each only if its holder still holds it.
-- Used by extend() (one lock) and by the watchdog (up to a batch of locks per call).
--
-- KEYS[i]      lock key i: a string (simple lock) or a hash holder -> hold count (reentrant)
-- ARGV[2i-1]   holder token of lock i
-- ARGV[2i]     new ttl of lock i in milliseconds
--
-- Returns one integer per lock: 1 when extended, 0 when its holder no longer holds it (nothing is
-- touched then).
local result = {}
for i, key in ipairs(KEYS) do
  local holder = ARGV[2 * i - 1]
  local kind = redis.call('TYPE', key).ok
  local held = (kind == 'string' and redis.call('GET', key) == holder)
    or (kind == 'hash' and redis.call('HEXISTS', key, holder) == 1)
  if held then
    redis.call('PEXPIRE', key, ARGV[2 * i])
    result[i] = 1
  else
    result[i] = 0
  end
end
return result
