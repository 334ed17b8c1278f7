-- Read a resource key for a fencing token's holder, and from then on refuse every older token:
-- the companion key is raised to the token in the same step, so no older holder's write can
-- land between this read and the holder's fenced write (fenced_set.lua).
--
-- KEYS[1]  resource key: a plain string, or none
-- KEYS[2]  companion key holding the highest token seen for KEYS[1]
-- ARGV[1]  fencing token: a positive decimal integer without leading zeros
--
-- Returns {1, previous highest, value} (no value: the key does not exist), or {0, highest} when
-- the token is stale (nothing is read nor written then).
local seen, err = seen_token(KEYS[1], KEYS[2])
if not seen then
  return err
end
local token = ARGV[1]
if stale(token, seen) then
  return {0, seen}
end
if token ~= seen then
  redis.call('SET', KEYS[2], token)
end
return {1, seen, redis.call('GET', KEYS[1])}
