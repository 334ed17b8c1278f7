-- Semaphores: prepended to semaphore_acquire.lua and semaphore_release.lua (after prelude.lua).
--
-- The keys of one semaphore share one hash tag (_keys.py, LockKeys.for_semaphore):
--   permits  a sorted set: holder token -> the end of its lease, in ms of this server's clock.
--            A permit is a lease: a holder that crashed gets its permits back when it ends,
--            taken back by the next script of the semaphore that would have to refuse or
--            queue someone without them, or that serves a queue (no sweeper).
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

-- This server's TIME, and the same in ms (every script of the semaphore reads it once).
local function clock()
  local t = redis.call('TIME')
  return t, tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function weight(state, field)
  return tonumber(redis.call('HGET', state, field) or '1')
end

-- A lease end (ms), as a score: a Lua number would be sent in the float form %.17g.
local function ms(n)
  return string.format('%d', n)
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

-- The permits held (a holder whose lease ended counts until reclaimed), and by how many
-- holders.
local function used(permits, state)
  if redis.call('ZCARD', permits) == 0 then
    return 0, 0
  end
  local holders = redis.call('ZRANGE', permits, 0, -1)
  local fields = {}
  for i, holder in ipairs(holders) do
    fields[i] = 'n:' .. holder
  end
  local total = 0
  for _, n in ipairs(redis.call('HMGET', state, unpack(fields))) do
    total = total + (tonumber(n) or 1)
  end
  return total, #holders
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

-- Record `n` permits of `holder`, added to the permits with its lease end already, and `top`,
-- the last token of its block. `alone`: the permits set was empty before (its expiry is new).
-- (`ttl`: ms, as the decimal string it came in.)
local function grant(permits, state, holder, n, top, ttl, alone)
  if alone then
    redis.call('PEXPIRE', permits, ttl)
  else
    outlive(permits, tonumber(ttl))
  end
  if n > 1 then
    redis.call('HSET', state, 't:' .. holder, top, 'n:' .. holder, n)
  else
    redis.call('HSET', state, 't:' .. holder, top)
  end
end

-- Serve the queue in order while the first waiter's request fits: a waiter queued with its
-- token ('id ttl block token') is granted its permits here and told so on its channel
-- ('g<score> <last token of the block>', as serve.lua does); one queued by id alone is woken
-- to re-try, and serving stops there. A waiter that no longer listens is forgotten (with
-- what was granted to it) and the next tried. Returns 1 when nobody was served, 3 when a
-- waiting client was woken, 4 when a waiter was granted. (`t`, `now`: the server's clock.)
local function serve_queue(permits, fence, state, queue, alive, limit, channel, publish, t, now)
  local served, free, held = 1, nil, 0
  for _ = 1, 16 do  -- bounds the script's time when many queued waiters are gone
    local head = redis.call('ZRANGE', queue, 0, 0, 'WITHSCORES')
    local first, score = head[1], head[2]
    if not first then
      return served
    end
    local n = weight(state, 'w:' .. first)
    if free == nil then  -- (only once someone waits: an empty queue is served at no cost)
      local total
      total, held = used(permits, state)
      free = limit - total
    end
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
      local top = mint(fence, block, ttl, nil, t)
      if not top then
        -- no token to grant with: let the waiter re-try, and hear of the counter itself
        heard(publish, channel .. ':' .. id, '1')
        return 3
      end
      redis.call('ZADD', permits, ms(now + tonumber(ttl)), holder)
      grant(permits, state, holder, n, top, ttl, held == 0)
      dequeue(state, queue, alive, first)
      if heard(publish, channel .. ':' .. id, 'g' .. score .. ' ' .. top) then
        served, free, held = 4, free - n, held + 1
      else
        redis.call('ZREM', permits, holder)  -- nobody listens for it (the counter keeps its gap)
        redis.call('HDEL', state, 'n:' .. holder, 't:' .. holder)
      end
    end
  end
  return served
end
