-- Read what one lock name holds, atomically (every key of a lock shares one hash slot).
-- Read-only: nothing is written, so it may run on any server an operator points at.
--
-- KEYS[1]  lock key: a string (simple lock: the holder token) or a hash (reentrant: holder ->
--          hold count)
-- KEYS[2]  fencing counter: the last token handed out (prelude.lua)
-- KEYS[3]  queue of waiters woken one at a time (a sorted set scored by the server clock in
--          microseconds at arrival; entries 'id' or 'id ttl block token', see acquire.lua)
-- ARGV[1]  how many queued waiters to list at most (the first ones)
--
-- Returns {kind, holder, count, pttl, counter, now, queued, entry1, score1, entry2, ...}: kind
-- 'none', 'string' or 'hash' (anything else is an error), the holder token ('' if none), its
-- hold count, the lock's remaining ttl in ms (PTTL: -1 no expiry, -2 no key), the counter ('' if
-- gone), this server's clock in microseconds, how many waiters are queued, then the first
-- ARGV[1] of them with their scores.
local kind = redis.call('TYPE', KEYS[1]).ok
if kind ~= 'none' and kind ~= 'string' and kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE its lock key holds a ' .. kind)
end
local holder, count = '', 0
if kind == 'string' then
  holder, count = redis.call('GET', KEYS[1]), 1
elseif kind == 'hash' then
  -- one holder at a time (reentrant_acquire.lua enters a first holder only on an empty key)
  local fields = redis.call('HGETALL', KEYS[1])
  holder, count = fields[1] or '', tonumber(fields[2] or '0')
end
local counter = redis.pcall('GET', KEYS[2])
if type(counter) ~= 'string' then
  counter = ''
end
local t = redis.call('TIME')
local reply = {kind, holder, count, redis.call('PTTL', KEYS[1]), counter,
  t[1] .. string.format('%06d', t[2])}
local queued = 0
if redis.call('TYPE', KEYS[3]).ok == 'zset' then
  queued = redis.call('ZCARD', KEYS[3])
  for _, v in ipairs(redis.call('ZRANGE', KEYS[3], 0, tonumber(ARGV[1]) - 1, 'WITHSCORES')) do
    reply[#reply + 1] = v
  end
end
table.insert(reply, 7, queued)
return reply
