-- What the server shows of a latch or a barrier now (keys: latch.lua), read only.
--
-- KEYS[1]  participants
-- KEYS[2]  state
-- KEYS[3]  counted
--
-- Returns {gen, count, opened, parties, now (ms), {holder, lease end, ...}, {counted id, ...}}:
-- gen 0 when the latch does not exist (yet, or any more); parties 0 for a latch (a barrier's
-- otherwise); the participants in order of lease end.
local members, state, counted = KEYS[1], KEYS[2], KEYS[3]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local values = redis.call('HMGET', state, 'gen', 'count', 'opened', 'parties')
return {
  tonumber(values[1] or '0'),
  tonumber(values[2] or '0'),
  tonumber(values[3] or '0'),
  tonumber(values[4] or '0'),
  now,
  redis.call('ZRANGE', members, 0, -1, 'WITHSCORES'),
  redis.call('SMEMBERS', counted),
}
