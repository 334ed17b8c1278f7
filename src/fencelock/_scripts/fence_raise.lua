-- Redlock: raise this node's fencing counter to a grant's token before the token is handed out.
--
-- KEYS[1]  lock key: a string (simple lock) or a hash holder -> hold count (reentrant)
-- KEYS[2]  fencing counter of the lock (prelude.lua)
-- ARGV[1]  holder token of the grant
-- ARGV[2]  the grant's fencing token: the largest counter among the nodes that granted it
--
-- Returns 1 when ARGV[1] holds the lock here (the counter is now >= ARGV[2], kept until this
-- node's clock has passed it and for the lease left), 0 otherwise (nothing is touched then: a
-- later grant may already have read this counter).
-- Once a majority returned 1, every later majority shares a node with it whose counter is
-- >= ARGV[2] or whose clock is past it, so every later grant's token is larger (the nodes must
-- keep their data, or restart with their clock past every token they had handed out).
local held = holds(KEYS[1], ARGV[1])
if not held then
  return 0
end
local last, err = last_token(KEYS[2])
if not last then
  return err
end
if below(last, ARGV[2]) then
  keep_token(KEYS[2], ARGV[2], redis.call('PTTL', KEYS[1]))
end
return 1
