-- Release a simple lock if, and only if, ARGV[1] still holds it; serve the next waiter.
--
-- KEYS[1]  lock key ('holder token', acquire.lua)
-- KEYS[2]  queue of waiters (see acquire.lua)
-- KEYS[3]  fencing counter (prelude.lua): the released token goes there if the server's clock
--          has not passed it yet
-- ARGV[1]  holder token
-- ARGV[2]  wake-up channel (same hash tag as KEYS[1]); a queued waiter listens on
--          ARGV[2] .. ':' .. its id
-- ARGV[3]  'PUBLISH', or 'SPUBLISH' on a Cluster with sharded pub/sub
-- ARGV[4]  an entry of KEYS[2] to remove first (a waiter that gives up: whatever a release
--          granted it meanwhile is then released here, and a wake-up it got is passed on), or ''
-- ARGV[5]  '1': publish on ARGV[2] when no queued waiter is served, for those that listen there
--          without queueing (an election's observers, compute_once's waiters); '' or absent: only
--          when a waiter is queued
-- ARGV[6]  '1': a barging lock (fair=False): the release wakes the first queued waiter without
--          granting it the name (unless it is served in order by now: serve.lua), and its entry
--          keeps its place; a waiter that leaves wakes the next when the name is free. '' or
--          absent: the fair lock's release
--
-- Returns 1 when released, 3 when released and the wake-up reached a waiting client (the
-- releaser then lets that waiter have the next turn), 4 when released and granted to a queued
-- waiter (serve.lua), 0 when ARGV[1] is not the holder (nothing is deleted then; a reentrant
-- lock, a hash, holding the name is not ARGV[1]'s either).
--
-- The uncontended release runs first, before the helpers are made: the holder's own lock,
-- nobody queued and nobody to tell, and its token passed by the clock, or kept in the counter
-- where none is (a token ahead of the clock: a Redlock proposal's, acquire.lua).
local value = redis.pcall('GET', KEYS[1])
local token, t
if ARGV[4] == '' and type(value) == 'string' then
  local mine = ARGV[1] .. ' '
  if string.sub(value, 1, #mine) == mine then
    redis.call('DEL', KEYS[1])
    token, t = string.sub(value, #mine + 1), redis.call('TIME')
    local now = t[1] .. string.format('%06d', t[2])
    if (ARGV[5] or '') == '' and redis.call('EXISTS', KEYS[2]) == 0 then
      if #token < #now or (#token == #now and token < now) then
        return 1
      end
      -- until this clock has passed it, as forget() keeps it
      local ms = tonumber(token)
      if ms and redis.call('EXISTS', KEYS[3]) == 0 then
        redis.call('SET', KEYS[3], token, 'PXAT', string.format('%d', math.floor(ms / 1000) + 2))
        return 1
      end
    end
  end
end
-- (the preludes' helpers from here on)
local announce, barge = ARGV[5] or '', ARGV[6] or ''
if token then
  forget(KEYS[3], token, t)
  return serve(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[3], announce, barge)
end
local popped = false
if ARGV[4] ~= '' then
  -- (and the entry by id alone that a barging waiter queued with before: acquire.lua)
  popped = redis.call('ZREM', KEYS[2], ARGV[4], string.match(ARGV[4], '^%S+')) == 0
end
local holder, held = simple_holder(KEYS[1], value)
if holder ~= ARGV[1] then
  if (popped or barge == '1') and holder == false then
    -- A leaving waiter whose entry a release popped, or a barging lock's (its entry stays
    -- queued when woken), finds the lock free: the wake-up it may have got and will not use
    -- goes to the next waiter.
    serve(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[3], '', barge)
  end
  return 0
end
redis.call('DEL', KEYS[1])
if held then
  forget(KEYS[3], held)
end
return serve(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[3], announce, barge)
