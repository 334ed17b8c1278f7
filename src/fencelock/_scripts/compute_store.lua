-- Store a build's result, or its failure, and wake the waiters: fenced, so that a builder whose
-- lease ran out (paused, partitioned) cannot overwrite what a newer build stored.
--
-- KEYS[1]  result (compute_look.lua)
-- KEYS[2]  the builder's fencing counter (prelude.lua): raised past a build's token by a newer
--          grant, or by forget while the build ran (compute_forget.lua)
-- KEYS[3]  failure (compute_look.lua)
-- KEYS[4]  the builder's lease (compute_look.lua): a newer build under way holds a newer token
-- ARGV[1]  the builder's fencing token
-- ARGV[2]  'v': a result; 'e': the build raised
-- ARGV[3]  'v': the encoded result; 'e': the exception's type name
-- ARGV[4]  'v': how long it is kept, ms; 'e': the exception's message
-- ARGV[5]  'v': the request's fingerprint, or ''; 'e': how long the failure is kept, ms
-- ARGV[6]  wake-up channel (the lease's: a release publishes there too)
-- ARGV[7]  'PUBLISH', or 'SPUBLISH' on a Cluster
-- ARGV[8]  'v': '1' when the message carries the result (small ones: the waiters need not
--          read it), else ''
--
-- Stored only if ARGV[1] is not older than the stored result's token, the counter, nor the
-- token of the build under way.
-- The message: 'v', or 'v' .. ARGV[1] .. ':' .. the result (ARGV[8]); 'e' for a failure.
-- Returns {1} when stored (a failure is kept only if a waiter heard of it: nobody else needs
-- it), or {0, the stored result's token, the stored result or false} when refused.
local token = ARGV[1]
local stored = redis.call('HMGET', KEYS[1], 'f', 'v')
local seen = stored[1] or '0'
local counter, err = last_token(KEYS[2])
if not counter then
  return err
end
local _, building = simple_holder(KEYS[4], redis.pcall('GET', KEYS[4]))
if building and below(counter, building) then
  counter = building
end
if below(token, seen) or below(token, counter) then
  return {0, seen, stored[2]}
end
if ARGV[2] == 'e' then
  local failed = redis.call('HGET', KEYS[3], 'f') or '0'
  if below(token, failed) then
    return {0, seen, stored[2]}
  end
  if heard(ARGV[7], ARGV[6], 'e') then
    redis.call('HSET', KEYS[3], 'f', token, 'e', ARGV[3], 'm', ARGV[4])
    redis.call('PEXPIRE', KEYS[3], ARGV[5])
  end
  return {1}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], 'v', ARGV[3], 'f', token, 't', decimal(now))
if ARGV[5] ~= '' then
  redis.call('HSET', KEYS[1], 'p', ARGV[5])
end
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('DEL', KEYS[3])  -- (any failure recorded is older: its waiters were woken)
if ARGV[8] == '1' then
  heard(ARGV[7], ARGV[6], 'v' .. token .. ':' .. ARGV[3])
else
  heard(ARGV[7], ARGV[6], 'v')
end
return {1}
