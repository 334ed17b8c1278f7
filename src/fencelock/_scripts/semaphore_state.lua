-- What a semaphore (or read-write lock) shows now (keys: semaphore.lua). Read-only.
--
-- KEYS[1]  permits (sorted set: holder -> lease end, ms)
-- KEYS[2]  state (hash: 'limit', 'n:<holder>')
-- KEYS[3]  fencing counter (prelude.lua)
-- KEYS[4]  queue of waiters
--
-- Returns {limit, {holder, permits, lease end, ...}, now, counter, queued}: the stored limit (0
-- if none yet), the holders whose lease has not ended with their permits and lease ends (ms of
-- the server's clock), the server's clock (ms), the last token handed out ('' if gone) and how
-- many waiters are queued. A read changes nothing: the next acquire or release takes back the
-- ended leases.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local holders = {}
local found = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES')
for i = 1, #found, 2 do
  holders[#holders + 1] = found[i]
  holders[#holders + 1] = tonumber(redis.call('HGET', KEYS[2], 'n:' .. found[i]) or '1')
  holders[#holders + 1] = tonumber(found[i + 1])
end
local counter = redis.pcall('GET', KEYS[3])
if type(counter) ~= 'string' then
  counter = ''
end
local queued = 0
if redis.call('TYPE', KEYS[4]).ok == 'zset' then
  queued = redis.call('ZCARD', KEYS[4])
end
return {tonumber(redis.call('HGET', KEYS[2], 'limit') or '0'), holders, now, counter, queued}
