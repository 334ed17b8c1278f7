-- Acquire permits of a semaphore (keys: semaphore.lua), or re-confirm a grant this holder has.
--
-- KEYS[1]  permits (sorted set: holder -> lease end, ms)
-- KEYS[2]  fencing counter (prelude.lua)
-- KEYS[3]  queue of waiters (sorted set: waiter -> arrival, us)
-- KEYS[4]  state (hash: limit, permits per holder and per waiter)
-- KEYS[5]  alive (sorted set: waiter -> the time it must re-try by, ms)
-- ARGV[1]  holder token
-- ARGV[2]  ttl in milliseconds
-- ARGV[3]  fencing tokens to reserve (1)
-- ARGV[4]  this waiter, once it waits (its queue entry: its id, or 'id ttl block token' to be
--          granted by a release: semaphore.lua), or ''
-- ARGV[5]  permits asked for (1 or more)
-- ARGV[6]  the limit to keep if the semaphore has none yet (the stored one applies otherwise)
-- ARGV[7]  wake-up channel; a queued waiter listens on ARGV[7] .. ':' .. its id
--          (a waiter granted on the way is told there too: semaphore.lua)
-- ARGV[8]  'PUBLISH', or 'SPUBLISH' on a Cluster
--
-- Returns what acquire.lua returns: {1, fence} when granted (or already granted to ARGV[1]: a
-- re-sent request), {0, pttl, score} when not: pttl, the ms until a permit's lease or a queued
-- waiter's turn ends at the latest (when a re-try may succeed without a wake-up), and the
-- score of this waiter's queue entry ('' when not queued). Granted only when the permits fit
-- under the limit and no waiter is queued ahead (first come, first served). An error when more
-- permits are asked than the limit can ever give.
local permits, fence, queue, state, alive = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local holder, ttl, n, waiter = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[5]), ARGV[4]
local t, now = clock()
local limit = tonumber(redis.call('HGET', state, 'limit') or '0')
if limit == 0 then
  limit = tonumber(ARGV[6])
  redis.call('HSET', state, 'limit', ARGV[6])
end
local first = nil
if redis.call('ZCARD', queue) > 0 then
  first = redis.call('ZRANGE', queue, 0, 0)[1]
end
local reclaimed = false
if first and first ~= waiter then
  -- a waiter ahead: unless it stopped re-trying (then forgotten now)
  reclaim(permits, state, queue, alive, now)
  reclaimed = true
  first = redis.call('ZRANGE', queue, 0, 0)[1]
end
if not first or first == waiter then
  local total, held = used(permits, state)
  if total + n > limit and not reclaimed then
    -- full, unless some leases have ended: their permits come back first
    reclaim(permits, state, queue, alive, now)
    total, held = used(permits, state)
  end
  if total + n <= limit then
    local added = redis.call('ZADD', permits, 'NX', ms(now + ttl), holder)
    if added == 0 and tonumber(redis.call('ZSCORE', permits, holder)) <= now then
      -- its own permits, whose lease ended before this re-try: taken back, granted afresh
      redis.call('HDEL', state, 'n:' .. holder, 't:' .. holder)
      redis.call('ZADD', permits, ms(now + ttl), holder)
      added = 1
    end
    if added == 1 then
      local token, err = mint(fence, ARGV[3], ARGV[2], nil, t)
      if not token then
        redis.call('ZREM', permits, holder)
        return err
      end
      grant(permits, state, holder, n, token, ARGV[2], held == 0)
      if waiter ~= '' then
        dequeue(state, queue, alive, waiter)
        -- the next may fit too
        serve_queue(permits, fence, state, queue, alive, limit, ARGV[7], ARGV[8], t, now)
      end
      return {1, token}
    end
  end
end
-- (every lease that ended is taken back by now, unless this holder's own is live)
if redis.call('ZSCORE', permits, holder) then
  -- already ARGV[1]'s (a re-sent request; a release may have granted it): its own token,
  -- though others may have been granted since
  local token = redis.call('HGET', state, 't:' .. holder)
  if not token then
    local err
    token, err = current_token(fence, ARGV[3], ARGV[2])
    if not token then
      return err
    end
  end
  redis.call('ZADD', permits, 'XX', ms(now + ttl), holder)
  outlive(permits, ttl)
  return {1, token}
end
if n > limit then
  return redis.error_reply('cannot take ' .. n .. ' permits at once: the limit stored for this '
    .. 'semaphore is ' .. limit .. ' (set_limit changes it)')
end
-- Busy: a re-try may succeed when the first permit's lease or the first waiter's turn ends.
-- (a loop over the two sets, not over their first scores: {nil, turn} would stop at the nil)
local pttl = ttl
for _, ending in ipairs({permits, alive}) do
  local ends = redis.call('ZRANGE', ending, 0, 0, 'WITHSCORES')[2]
  if ends then
    pttl = math.min(pttl, math.max(0, tonumber(ends) - now))
  end
end
local score = ''
if waiter ~= '' then
  redis.call('ZADD', queue, 'NX', t[1] .. string.format('%06d', t[2]), waiter)
  score = redis.call('ZSCORE', queue, waiter)
  -- forgotten unless it re-tries by then (it re-tries at the latest when pttl ends)
  redis.call('ZADD', alive, ms(now + pttl + ttl), waiter)
  outlive(queue, pttl + ttl)
  outlive(alive, pttl + ttl)
  if n > 1 then
    redis.call('HSET', state, 'w:' .. waiter, n)
  end
end
return {0, pttl, score}
