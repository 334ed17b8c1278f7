-- Write a value to a resource key only if the writer's fencing token is not older than any token
-- the resource has already seen.
--
-- KEYS[1]  resource key: a plain string, readable by anyone with GET
-- KEYS[2]  companion key holding the highest token seen for KEYS[1]
-- ARGV[1]  value
-- ARGV[2]  fencing token: a positive decimal integer without leading zeros
--
-- Returns {1, previous highest} when written, {0, highest} when the token is stale (nothing is
-- written then). Tokens are compared as decimal strings (length first), so they are exact beyond
-- the 2^53 that Lua numbers can hold.
local t = redis.call('TYPE', KEYS[1]).ok
if t ~= 'none' and t ~= 'string' then
  return redis.error_reply('WRONGTYPE resource ' .. KEYS[1] .. ' holds a ' .. t)
end
local seen = redis.call('GET', KEYS[2]) or '0'
if not string.match(seen, '^%d+$') then
  return redis.error_reply('WRONGTYPE companion key ' .. KEYS[2] .. ' holds no token: ' .. seen)
end
local token = ARGV[2]
if #token < #seen or (#token == #seen and token < seen) then
  return {0, seen}
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], token)
return {1, seen}
