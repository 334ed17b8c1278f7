-- Prepended to every script that grants, releases or hands out tokens (_scripts/__init__.py).
--
-- Fencing tokens. A grant's token is max(last token + 1, this server's clock in microseconds),
-- and a block of tokens reserved for local hand-offs follows it. The counter (the last token handed out) is
-- kept only until this server's clock has overtaken it and the lease it was handed out with has
-- run out; after that the clock alone gives a larger token. So a name leaves no counter behind,
-- and tokens keep increasing when the counter is lost (FLUSHALL, a restart without persistence,
-- a failover to a replica that missed grants, a DEL by hand) as long as the clock of the server
-- that takes over is past the lost tokens (docs/safety.md, "Fencing tokens").
-- Tokens are decimal strings throughout: a counter beyond the 2^53 a Lua number holds exactly
-- (set by hand) counts on exactly with INCRBY.

local function decimal(n)
  return string.format('%d', n)  -- an integer below 2^53, never in exponent form
end

-- a < b, for decimal integers without leading zeros
local function below(a, b)
  return #a < #b or (#a == #b and a < b)
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

-- Keep `top` as the last token at `key`, for `ttl_ms` and until this server's clock passes it
-- (an absolute expiry: a replica, once promoted, keeps it until its own clock passes it). `t`:
-- the server's TIME, if the caller has it already.
local function keep_token(key, top, ttl_ms, t)
  t = t or redis.call('TIME')
  local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local expiry = math.max(now_ms + tonumber(ttl_ms), math.floor(tonumber(top) / 1000) + 2)
  redis.call('SET', key, top, 'PXAT', decimal(expiry))
end

-- Hand out `block` tokens for a lease of `ttl_ms`: returns the last of them, or nil and an error
-- reply (a counter of another type, or beyond 64 bits: nothing is written). `t`: the server's
-- TIME, if the caller has it already.
local function mint(key, block, ttl_ms, t)
  local last, err = last_token(key)
  if not last then
    return nil, err
  end
  t = t or redis.call('TIME')
  local now = t[1] .. string.format('%06d', t[2])
  local top
  if below(last, now) then
    top = now
    if block ~= 1 and block ~= '1' then
      top = decimal(tonumber(now) + tonumber(block) - 1)
    end
  else
    -- at or past the clock (tokens handed out faster than one per microsecond, or by a server
    -- whose clock was ahead): count on from the counter
    local counted = redis.pcall('INCRBY', key, block)
    if type(counted) == 'table' then
      return nil, redis.error_reply('its fencing counter: ' .. counted.err)
    end
    top = redis.call('GET', key)
  end
  keep_token(key, top, ttl_ms, t)
  return top
end

-- The token of a grant being confirmed again (a re-sent request): the counter, or, if it is gone
-- (the clock passed it while the lease was extended), a new one, larger than any before.
local function current_token(key, block, ttl_ms)
  local last = redis.pcall('GET', key)
  if type(last) == 'string' then
    return last
  end
  return mint(key, block, ttl_ms)
end

-- Lock keys. What one holds: 'none', 'string' (a simple lock: the holder token) or 'hash' (a
-- reentrant lock: holder -> hold count). Either kind of lock is busy for the other. A key of
-- another type is not a lock: an error.
local function lock_kind(key)
  local kind = redis.call('TYPE', key).ok
  if kind ~= 'none' and kind ~= 'string' and kind ~= 'hash' then
    error({err = 'WRONGTYPE its lock key holds a ' .. kind})
  end
  return kind
end

-- The holder token of a simple lock at `key`, or nil (no lock, or a reentrant lock's hash). One
-- GET on the hot path; the type is looked at only when it is not a string.
local function simple_holder(key)
  local holder = redis.pcall('GET', key)
  if type(holder) == 'table' then
    lock_kind(key)  -- a key that is no lock: an error
    return nil
  end
  return holder
end

-- Whether `holder` holds the lock at `key`, of either kind.
local function holds(key, holder)
  local kind = lock_kind(key)
  if kind == 'string' then
    return redis.call('GET', key) == holder
  end
  return kind == 'hash' and redis.call('HEXISTS', key, holder) == 1
end

-- Publish `message` on `channel` (`publish`: 'PUBLISH', or 'SPUBLISH' on a Cluster), best effort:
-- without the right to publish, waiters re-try when the lease would have ended. Whether a
-- client heard it.
local function heard(publish, channel, message)
  local listeners = redis.pcall(publish, channel, message)
  return type(listeners) == 'number' and listeners > 0
end
