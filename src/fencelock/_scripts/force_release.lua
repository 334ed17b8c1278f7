-- An administrator's release: delete the lock whoever holds it (or only the grant named by
-- ARGV[1] / ARGV[2]), then serve the waiters exactly as a release does (serve.lua).
--
-- KEYS[1]  lock key: a string (simple lock) or a hash (reentrant lock)
-- KEYS[2]  queue of waiters (acquire.lua)
-- KEYS[3]  fencing counter (prelude.lua): never deleted here, and given the forced-out holder's
--          token if the server's clock has not passed it, so that the next grant's token is
--          larger and the forced-out holder's fenced writes are refused
-- ARGV[1]  the fencing token the operator saw (as inspect shows it: a simple lock's own, else the
--          counter), or '': release only if it is still exactly that (no grant since; a block
--          reserved for local hand-offs of one process counts as one grant)
-- ARGV[2]  the holder token the operator saw, or '': release only if it still holds (Redlock,
--          whose nodes' counters differ, names the grant so)
-- ARGV[3]  wake-up channel (same hash tag as KEYS[1])
-- ARGV[4]  'PUBLISH', or 'SPUBLISH' on a Cluster with sharded pub/sub
--
-- Returns {status, holder, counter}: status 1 released (and the waiters served), 0 the name was
-- not held, -1 held by another grant than the one named (nothing is touched then); the holder
-- token found ('' if none) and the token found ('' if none).
local kind = lock_kind(KEYS[1])
local holder, held = '', nil
if kind == 'string' then
  holder, held = lock_value(redis.call('GET', KEYS[1]))
elseif kind == 'hash' then
  holder = redis.call('HGETALL', KEYS[1])[1] or ''  -- one holder at a time
end
local counter = held or redis.pcall('GET', KEYS[3])
if type(counter) ~= 'string' then
  counter = ''
end
if kind == 'none' then
  return {0, '', counter}
end
if (ARGV[1] ~= '' and counter ~= ARGV[1]) or (ARGV[2] ~= '' and holder ~= ARGV[2]) then
  return {-1, holder, counter}
end
redis.call('DEL', KEYS[1])
if held then
  forget(KEYS[3], held)
end
serve(KEYS[1], KEYS[2], KEYS[3], ARGV[3], ARGV[4], '1')
return {1, holder, counter}
