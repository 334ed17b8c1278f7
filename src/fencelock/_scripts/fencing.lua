-- Prepended to the scripts that fence a resource key (fenced_set, fenced_get).
--
-- The highest token a resource has seen, kept in its companion key (keys.fence_key_for). Tokens
-- are decimal strings without leading zeros, compared length first: exact beyond the 2^53 that
-- Lua numbers hold.

-- The highest token seen for `resource` ('0': none), or nil and an error reply when either key
-- holds something else than expected (nothing is touched then).
local function seen_token(resource, companion)
  local t = redis.call('TYPE', resource).ok
  if t ~= 'none' and t ~= 'string' then
    return nil, redis.error_reply('WRONGTYPE resource ' .. resource .. ' holds a ' .. t)
  end
  local seen = redis.call('GET', companion) or '0'
  if not string.match(seen, '^%d+$') then
    return nil, redis.error_reply('WRONGTYPE companion key ' .. companion .. ' holds no token: ' .. seen)
  end
  return seen
end

-- Whether `token` is older than `seen`.
local function stale(token, seen)
  return #token < #seen or (#token == #seen and token < seen)
end
