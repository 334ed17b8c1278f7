-- Semaphores: prepended to semaphore_acquire.lua and semaphore_release.lua (after prelude.lua).
--
-- The keys of one semaphore share one hash tag (keys.py, LockKeys.for_semaphore):
--   permits  a sorted set: holder token -> the end of its lease, in ms of this server's clock.
--            A permit is a lease: a holder that crashed gets its permits back when it ends,
--            taken back by whichever script of the semaphore runs next (no sweeper).
--   state    a hash: 'limit' (kept: the semaphore's limit, set by the first acquire or by
--            set_limit), 'n:<holder>' the permits a holder has (when more than one),
--            'w:<waiter>' the permits a queued waiter asks for (when more than one)
--   queue    a sorted set: waiter id -> its arrival (microseconds of the server's clock); the
--            first is the only one that may be granted (FIFO, so a large request is not starved)
--   alive    a sorted set: waiter id -> the time (ms) by which it must re-try, or be forgotten
--            (a waiter that crashed must not block the queue for ever)

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
    redis.call('HDEL', state, 'n:' .. holder)
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

-- Wake the first queued waiter if its request fits now; one that no longer listens is
-- forgotten and the next tried. Returns 3 when a waiting client was woken, else 1.
local function wake_first(permits, state, queue, alive, limit, channel, publish)
  local free = limit - used(permits, state)
  for _ = 1, 16 do  -- bounds the script's time when many queued waiters are gone
    local first = redis.call('ZRANGE', queue, 0, 0)[1]
    if not first or weight(state, 'w:' .. first) > free then
      return 1
    end
    local woken = redis.pcall(publish, channel .. ':' .. first, '1')
    if type(woken) == 'number' and woken > 0 then
      return 3
    end
    dequeue(state, queue, alive, first)
  end
  return 1
end
