-- Write a value to a resource key only if the writer's fencing token is not older than any token
-- the resource has already seen (and, with ARGV[3], only if the value is still the one read).
--
-- KEYS[1]  resource key: a plain string, readable by anyone with GET
-- KEYS[2]  companion key holding the highest token seen for KEYS[1]
-- ARGV[1]  value
-- ARGV[2]  fencing token: a positive decimal integer without leading zeros
-- ARGV[3]  optional (fenced_update): the SHA1 (hex) of the value the writer read, or '' if it
--          read none; the write happens only if KEYS[1] still holds that
--
-- Returns {1, previous highest} when written, {0, highest} when the token is stale, {-1, highest}
-- when the value changed since it was read (nothing is written then).
local seen, err = seen_token(KEYS[1], KEYS[2])
if not seen then
  return err
end
local token = ARGV[2]
if stale(token, seen) then
  return {0, seen}
end
if ARGV[3] then
  local current = redis.call('GET', KEYS[1])
  if (current and redis.sha1hex(current) or '') ~= ARGV[3] then
    return {-1, seen}
  end
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], token)
return {1, seen}
