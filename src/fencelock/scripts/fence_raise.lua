-- Redlock: raise this node's fencing counter to a grant's token before the token is handed out.
--
-- KEYS[1]  lock key: a string (simple lock) or a hash holder -> hold count (reentrant)
-- KEYS[2]  fencing counter of the lock
-- ARGV[1]  holder token of the grant
-- ARGV[2]  the grant's fencing token: the largest counter among the nodes that granted it
--
-- Returns 1 when ARGV[1] holds the lock here (the counter is now >= ARGV[2]), 0 otherwise
-- (nothing is touched then: a later grant may already have read this counter).
-- Once a majority returned 1, every later majority shares a node with it whose counter is
-- >= ARGV[2], so every later grant's token is larger (the nodes must keep their data).
local kind = redis.call('TYPE', KEYS[1]).ok
local held = (kind == 'string' and redis.call('GET', KEYS[1]) == ARGV[1])
  or (kind == 'hash' and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1)
if not held then
  return 0
end
local counter = redis.pcall('GET', KEYS[2])
if type(counter) == 'table' then
  return redis.error_reply('WRONGTYPE fencing counter ' .. KEYS[2] .. ': ' .. counter.err)
end
-- compared as decimal strings (length first): exact beyond the 2^53 of a Lua number
local token = ARGV[2]
if not counter or #counter < #token or (#counter == #token and counter < token) then
  redis.call('SET', KEYS[2], token)
end
return 1
