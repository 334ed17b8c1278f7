-- What a semaphore shows now (keys: semaphore.lua), and set_limit.
--
-- KEYS[1]  permits (sorted set: holder -> lease end, ms)
-- KEYS[2]  state (hash: 'limit', 'n:<holder>')
-- ARGV[1]  a new limit to store (set_limit), or nothing (a read)
--
-- Returns {limit, {holder, permits, holder, permits, ...}}: the stored limit (0 if none yet)
-- and the holders whose lease has not ended (a read changes nothing: the next acquire or
-- release takes back the ended ones).
if ARGV[1] then
  redis.call('HSET', KEYS[2], 'limit', ARGV[1])
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local holders = {}
for _, holder in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf')) do
  holders[#holders + 1] = holder
  holders[#holders + 1] = tonumber(redis.call('HGET', KEYS[2], 'n:' .. holder) or '1')
end
return {tonumber(redis.call('HGET', KEYS[2], 'limit') or '0'), holders}
