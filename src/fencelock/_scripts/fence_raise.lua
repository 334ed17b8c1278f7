-- Redlock: raise this node's token of a grant to the grant's token before it is handed out,
-- where the majority that granted it answered different tokens (a majority that answered the
-- grant's own token, acquire.lua's proposal in the common case, holds it already).
--
-- KEYS[1]  lock key: 'holder token' (simple lock) or a hash holder -> hold count (reentrant)
-- KEYS[2]  fencing counter of the lock (prelude.lua)
-- ARGV[1]  holder token of the grant
-- ARGV[2]  the grant's fencing token: the largest among the nodes that granted it
--
-- Returns 1 when ARGV[1] holds the lock here (its token here is now >= ARGV[2]: a simple lock's
-- key holds it, and the counter too until this node's clock has passed it; a reentrant lock's
-- counter, for the lease left and until then), 0 otherwise (nothing is touched then: a later
-- grant may already have read this node's token).
-- Once a majority returned 1, every later majority shares a node with it whose lock, counter or
-- clock is past ARGV[2], so every later grant's token is larger (the nodes must keep their data,
-- or restart with their clock past every token they had handed out).
local mine, held = holds(KEYS[1], ARGV[1])
if not mine then
  return 0
end
local last, err = last_token(KEYS[2])
if not last then
  return err
end
if held then
  if below(held, ARGV[2]) then
    redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. ARGV[2], 'KEEPTTL')
  end
  -- (the lease may end before this node's clock passes the token: the counter outlives it)
  if below(last, ARGV[2]) then
    keep_token(KEYS[2], ARGV[2], 0, redis.call('TIME'), last ~= '0')
  end
elseif below(last, ARGV[2]) then
  keep_token(KEYS[2], ARGV[2], redis.call('PTTL', KEYS[1]), redis.call('TIME'), last ~= '0')
end
return 1
