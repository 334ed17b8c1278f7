-- Semaphores: prepended to semaphore_acquire.lua and semaphore_release.lua (after prelude.lua).
--
-- The keys of one semaphore share one hash tag (_keys.py, LockKeys.for_semaphore):
--   permits  a sorted set: holder token -> the end of its lease, in ms of this server's clock.
--            A permit is a lease: a holder that crashed gets its permits back when it ends,
--            taken back by whichever script of the semaphore runs next (no sweeper).
--   state    a hash: 'limit' (kept: the semaphore's limit, set by the first acquire or by
--            set_limit), 'n:<holder>' the permits a holder has (when more than one),
--            't:<holder>' the last fencing token of its grant, 'w:<waiter>' the permits a
--            queued waiter asks for (when more than one)
--   queue    a sorted set: waiter -> its arrival (microseconds of the server's clock); the
--            first is the only one that may be granted (FIFO, so a large request is not
--            starved). A waiter is its id, or 'id ttl block token' (contention.py): a release
--            may then grant it its permits directly, as serve.lua does for a lock
--   alive    a sorted set: waiter -> the time (ms) by which it must re-try, or be forgotten
--            (a waiter that crashed must not block the queue for ever)
-- The sorted sets expire with their last entry's lease or turn, so a semaphore whose clients
-- all died leaves only its state behind.

local function clock_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function weight(state, field)
  return tonumber(redis.call('HGET', state, field) or '1')
end

-- Take back the permits whose lease ended, and forget the waiters that stopped re-trying.
local function reclaim(permits, state, queue, alive, now)
  for _, holder in ipairs(redis.call('ZRANGEBYSCORE', permits, '-inf', now)) do
    redis.call('ZREM', permits, holder)
    redis.call('HDEL', state, 'n:' .. holder, 't:' .. holder)
  end
  for _, waiter in ipairs(redis.call('ZRANGEBYSCORE', alive, '-inf', now)) do
    redis.call('ZREM', alive, waiter)
    redis.call('ZREM', queue, waiter)
    redis.call('HDEL', state, 'w:' .. waiter)
  end
end

-- The permits held now (after reclaim).
local function used(permits, state)
  local total = 0
  for _, holder in ipairs(redis.call('ZRANGE', permits, 0, -1)) do
    total = total + weight(state, 'n:' .. holder)
  end
  return total
end

-- Forget a queued waiter.
local function dequeue(state, queue, alive, waiter)
  redis.call('ZREM', queue, waiter)
  redis.call('ZREM', alive, waiter)
  redis.call('HDEL', state, 'w:' .. waiter)
end

-- Keep `key` at least `ms` longer (-2, gone, stays gone).
local function outlive(key, ms)
  local left = redis.call('PTTL', key)
  if left == -1 or (left >= 0 and left < ms) then
    redis.call('PEXPIRE', key, ms)
  end
end

-- Grant `n` permits to `holder` until now + ttl, with `top`, the last token of its block.
local function grant(permits, state, holder, n, top, now, ttl)
  redis.call('ZADD', permits, now + ttl, holder)
  outlive(permits, ttl)
  redis.call('HSET', state, 't:' .. holder, top)
  if n > 1 then
    redis.call('HSET', state, 'n:' .. holder, n)
  end
end

-- Serve the queue in order while the first waiter's request fits: a waiter queued with its
-- token ('id ttl block token') is granted its permits here and told so on its channel
-- ('g<score> <last token of the block>', as serve.lua does); one queued by id alone is woken
-- to re-try, and serving stops there. A waiter that no longer listens is forgotten (with
-- what was granted to it) and the next tried. Returns 1 when nobody was served, 3 when a
-- waiting client was woken, 4 when a waiter was granted.
local function serve_queue(permits, fence, state, queue, alive, limit, channel, publish, now)
  local served = 1
  local free = limit - used(permits, state)
  for _ = 1, 16 do  -- bounds the script's time when many queued waiters are gone
    local head = redis.call('ZRANGE', queue, 0, 0, 'WITHSCORES')
    local first, score = head[1], head[2]
    if not first then
      return served
    end
    local n = weight(state, 'w:' .. first)
    if n > free then
      return served
    end
    local id, ttl, block, holder = string.match(first, '^(%S+) (%d+) (%d+) (%S+)$')
    if id == nil then
      if heard(publish, channel .. ':' .. first, '1') then
        return 3
      end
      dequeue(state, queue, alive, first)
    else
      local top = mint(fence, block, ttl)
      if not top then
        -- no token to grant with: let the waiter re-try, and hear of the counter itself
        heard(publish, channel .. ':' .. id, '1')
        return 3
      end
      grant(permits, state, holder, n, top, now, tonumber(ttl))
      dequeue(state, queue, alive, first)
      if heard(publish, channel .. ':' .. id, 'g' .. score .. ' ' .. top) then
        served, free = 4, free - n
      else
        redis.call('ZREM', permits, holder)  -- nobody listens for it (the counter keeps its gap)
        redis.call('HDEL', state, 'n:' .. holder, 't:' .. holder)
      end
    end
  end
  return served
end
