-- Read what one lock name holds, atomically (every key of a lock shares one hash slot).
-- Read-only: nothing is written, so it may run on any server an operator points at.
--
-- KEYS[1]  lock key: a string (simple lock: 'holder token', or the holder token alone when taken
--          without scripts) or a hash (reentrant: holder -> hold count)
-- KEYS[2]  fencing counter (prelude.lua)
-- KEYS[3]  queue of waiters (a sorted set scored by the server clock in microseconds at arrival;
--          entries 'id' or 'id ttl block token', and '*' last for the waiters woken together,
--          not listed: see acquire.lua)
-- ARGV[1]  how many queued waiters to list at most (the first ones)
--
-- Returns {kind, holder, count, pttl, counter, now, queued, entry1, score1, entry2, ...}: kind
-- 'none', 'string' or 'hash' (anything else is an error), the holder token ('' if none), its
-- hold count, the lock's remaining ttl in ms (PTTL: -1 no expiry, -2 no key), the grant's token
-- (a simple lock's own, else the counter; '' if none), this server's clock in microseconds, how
-- many waiters are queued, then the first ARGV[1] of them with their scores.
local kind = redis.call('TYPE', KEYS[1]).ok
if kind ~= 'none' and kind ~= 'string' and kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE its lock key holds a ' .. kind)
end
local holder, count, token = '', 0, nil
if kind == 'string' then
  holder, count = redis.call('GET', KEYS[1]), 1
  local own, held = string.match(holder, '^(%S+) (%d+)$')
  if own then
    holder, token = own, held
  end
elseif kind == 'hash' then
  -- one holder at a time (reentrant_acquire.lua enters a first holder only on an empty key)
  local fields = redis.call('HGETALL', KEYS[1])
  holder, count = fields[1] or '', tonumber(fields[2] or '0')
end
local counter = token or redis.pcall('GET', KEYS[2])
if type(counter) ~= 'string' then
  counter = ''
end
local t = redis.call('TIME')
local reply = {kind, holder, count, redis.call('PTTL', KEYS[1]), counter,
  t[1] .. string.format('%06d', t[2])}
local queued = 0
if redis.call('TYPE', KEYS[3]).ok == 'zset' then
  queued = redis.call('ZCARD', KEYS[3])
  if redis.call('ZSCORE', KEYS[3], '*') then
    queued = queued - 1  -- ('*', last, stands for waiters that did not queue one by one)
  end
  local listed = redis.call('ZRANGE', KEYS[3], 0, tonumber(ARGV[1]) - 1, 'WITHSCORES')
  for i = 1, #listed, 2 do
    if listed[i] ~= '*' then
      reply[#reply + 1] = listed[i]
      reply[#reply + 1] = listed[i + 1]
    end
  end
end
table.insert(reply, 7, queued)
return reply
