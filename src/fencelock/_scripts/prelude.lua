-- Prepended to every script that grants, releases or hands out tokens (_scripts/__init__.py).
--
-- Fencing tokens. A grant's token is max(last token + 1, this server's clock in microseconds),
-- and a block of tokens reserved for local hand-offs follows it. Where the last token is kept:
-- a simple lock's key holds it beside the holder token ('holder token', lock_value) for as long
-- as the lock is held; the counter (the fence key) holds a token only while this server's clock
-- has not passed it (a block reserved ahead of the clock, tokens counted on past it, a lock
-- released within its token's microsecond, a Redlock token raised past this node's clock), with
-- an absolute expiry just past it (SET ... PXAT: a promoted replica keeps it until its own clock
-- passes it). The kinds whose key cannot hold a token (a reentrant lock's hash, a semaphore's
-- permits, a latch) keep it in the counter for their lease too. So a held lock is one key, a free
-- name none, and tokens keep increasing when a lock or its counter is lost (FLUSHALL, a restart
-- without persistence, a failover to a replica that missed grants, a DEL by hand) as long as the
-- clock of the server that takes over is past the lost tokens (docs/safety.md, "Fencing tokens").
-- Tokens are decimal strings throughout: a counter beyond the 2^53 a Lua number holds exactly
-- (set by hand) counts on exactly with INCRBY.

local function decimal(n)
  return string.format('%d', n)  -- an integer below 2^53, never in exponent form
end

-- a < b, for decimal integers without leading zeros
local function below(a, b)
  return #a < #b or (#a == #b and a < b)
end

-- TIME's reply in microseconds, as a decimal string
local function micros(t)
  return t[1] .. string.format('%06d', t[2])
end

-- The last token kept at `key` ('0': none), or nil and an error reply.
local function last_token(key)
  local last = redis.pcall('GET', key)
  if type(last) == 'table' then
    return nil, redis.error_reply('its fencing counter: ' .. last.err)
  end
  if not last then
    return '0'
  end
  if last ~= '0' and not string.match(last, '^[1-9]%d*$') then
    return nil, redis.error_reply('its fencing counter: value is not an integer')
  end
  return last
end

-- Keep `top` (larger than the counter at `key`, if any) as the last token at `key`: for
-- `keep_ms` (a lease; 0: none) and until this server's clock passes it. Nothing is written when
-- there was no counter (`had`), no lease to keep it for, and the clock (`t`, TIME) has passed
-- `top` already; a counter that was there is written whatever (it must stay the largest token
-- while it lives: a client without scripts counts on from it).
local function keep_token(key, top, keep_ms, t, had)
  if not had and keep_ms == 0 and below(top, micros(t)) then
    return
  end
  local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local expiry = math.max(now_ms + keep_ms, math.floor(tonumber(top) / 1000) + 2)
  redis.call('SET', key, top, 'PXAT', decimal(expiry))
end

-- Hand out `block` tokens, larger than the counter at `key` and than `floor` (a token that is
-- not in the counter: the current grant's, for a new block of the same hold; or nil), kept as
-- keep_token keeps them. Returns the last of them, or nil and an error reply (a counter of
-- another type, or beyond 64 bits: nothing is written). `t`: the server's TIME, if the caller
-- has it already.
local function mint(key, block, keep_ms, floor, t)
  local last, err = last_token(key)
  if not last then
    return nil, err
  end
  local had = last ~= '0'
  local from = last
  if floor and below(from, floor) then
    from = floor
  end
  t = t or redis.call('TIME')
  local now = micros(t)
  local top
  if below(from, now) then
    top = now
    if block ~= 1 and block ~= '1' then
      top = decimal(tonumber(now) + tonumber(block) - 1)
    end
  else
    -- at or past the clock (tokens handed out faster than one per microsecond, or by a server
    -- whose clock was ahead): count on exactly
    if from ~= last then
      redis.call('SET', key, from)
    end
    local counted = redis.pcall('INCRBY', key, block)
    if type(counted) == 'table' then
      return nil, redis.error_reply('its fencing counter: ' .. counted.err)
    end
    top = redis.call('GET', key)
    had = true
  end
  keep_token(key, top, tonumber(keep_ms), t, had)
  return top
end

-- A token leaves the lock key (a release, a grant undone): kept in the counter at `key` until
-- this server's clock has passed it, if it has not yet. `t`: TIME, if the caller has it.
local function forget(key, token, t)
  t = t or redis.call('TIME')
  if below(token, micros(t)) then
    return
  end
  local last = last_token(key)
  if last and below(last, token) then
    keep_token(key, token, 0, t, last ~= '0')
  end
end

-- Lock keys. What one holds: 'none', 'string' (a simple lock) or 'hash' (a reentrant lock:
-- holder -> hold count). Either kind of lock is busy for the other. A key of another type is
-- not a lock: an error.
local function lock_kind(key)
  local kind = redis.call('TYPE', key).ok
  if kind ~= 'none' and kind ~= 'string' and kind ~= 'hash' then
    error({err = 'WRONGTYPE its lock key holds a ' .. kind})
  end
  return kind
end

-- A simple lock's value as (holder token, fencing token): 'holder token'. A value without a
-- token (a lock taken by plain commands, scripts="never", whose token is the counter's) is all
-- holder, its token nil.
local function lock_value(value)
  local holder, token = string.match(value, '^(%S+) (%d+)$')
  if holder then
    return holder, token
  end
  return value, nil
end

-- The holder token and fencing token of a simple lock, from `value` (GET's reply at `key`, by
-- pcall): false when there is no lock, nil when a reentrant lock's hash holds the name.
local function simple_holder(key, value)
  if type(value) == 'table' then
    lock_kind(key)  -- a key that is no lock: an error
    return nil
  end
  if not value then
    return false
  end
  return lock_value(value)
end

-- Whether `holder` holds the lock at `key`, of either kind, and the token its key holds (nil for
-- a reentrant lock's hash, or a simple lock taken without scripts: the counter's).
local function holds(key, holder)
  local kind = lock_kind(key)
  if kind == 'string' then
    local found, token = lock_value(redis.call('GET', key))
    return found == holder, token
  end
  return kind == 'hash' and redis.call('HEXISTS', key, holder) == 1, nil
end

-- The token of a grant being confirmed again (a re-sent request): the one its lock key holds,
-- else the counter, or, if that is gone (the clock passed it while the lease was extended), a
-- new one, larger than any before.
local function current_token(key, block, ttl_ms, held)
  if held then
    return held
  end
  local last = redis.pcall('GET', key)
  if type(last) == 'string' then
    return last
  end
  return mint(key, block, ttl_ms)
end

-- Publish `message` on `channel` (`publish`: 'PUBLISH', or 'SPUBLISH' on a Cluster), best effort:
-- without the right to publish, waiters re-try when the lease would have ended. Whether a
-- client heard it.
local function heard(publish, channel, message)
  local listeners = redis.pcall(publish, channel, message)
  return type(listeners) == 'number' and listeners > 0
end
