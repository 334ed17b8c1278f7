-- Reset the remaining lease of several locks at once, each only if its holder still holds it,
-- and keep each lock's fencing counter at least as long as its lease where the lock key does
-- not hold its token (a reentrant lock's hash, a semaphore's permits: prelude.lua keeps it for
-- the first lease only otherwise, and inspect reads it). Used by extend() (one lock) and by the
-- watchdog (a batch per call).
--
-- KEYS[2i-1]   lock key i: a string (simple lock: 'holder token', or the holder token alone when
--              taken without scripts), a hash holder -> hold count (reentrant), or a sorted set
--              holder -> lease end in ms (a semaphore's permits, semaphore.lua)
-- KEYS[2i]     fencing counter of lock i (prelude.lua), or lock key i again where it holds its
--              token ('holder token': no counter to keep, and no key named that a Cluster's
--              slot migration could leave behind, which the server refuses, TRYAGAIN)
-- ARGV[2i-1]   holder token of lock i
-- ARGV[2i]     new ttl of lock i in milliseconds (from this server's clock: a key that holds its
--              token is kept, whatever the ttl, until the clock has passed the token)
--
-- Returns one integer per lock: 1 when extended; when its holder no longer holds it (nothing is
-- touched then), 0 if nobody does, -1 if another holder does (for the reason of the loss).
-- Keep `key` at least `ttl` ms more: only ever lengthened (-1, no expiry, is left alone; -2,
-- gone, stays gone).
local function lengthen(key, ttl)
  local left = redis.call('PTTL', key)
  if left >= 0 and left < tonumber(ttl) then
    redis.call('PEXPIRE', key, ttl)
  end
end

local t  -- this server's clock (TIME), read once per call
local function now_ms()
  t = t or redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local result = {}
for i = 1, #KEYS / 2 do
  local key, fence = KEYS[2 * i - 1], KEYS[2 * i]
  local holder, ttl = ARGV[2 * i - 1], ARGV[2 * i]
  local kind = redis.call('TYPE', key).ok
  local owned, counted, value, token = false, kind ~= 'string', nil, nil
  if kind == 'zset' then
    -- a semaphore's permits (semaphore.lua): the holder's lease end is its score, in ms
    local now = now_ms()
    local ends = redis.call('ZSCORE', key, holder)
    owned = ends ~= false and tonumber(ends) > now
    if owned then
      redis.call('ZADD', key, 'XX', now + tonumber(ttl), holder)
      lengthen(key, ttl)  -- the set expires with its last lease (semaphore.lua)
    end
  elseif kind == 'string' then
    value = redis.call('GET', key)
    -- 'holder token' (no counter to keep for it), or the holder token alone: a lock taken
    -- without scripts, whose token is the counter's
    counted = value == holder
    owned = counted or string.sub(value, 1, #holder + 1) == holder .. ' '
    token = owned and not counted and tonumber(string.sub(value, #holder + 2))
  else
    owned = kind == 'hash' and redis.call('HEXISTS', key, holder) == 1
  end
  if token then
    -- The key may be all that holds its token (a Redlock proposal ahead of the clock,
    -- acquire.lua): it never expires before this server's clock has passed it, whatever the
    -- ttl, or a later grant could get a smaller token from the clock. (SET ... PXAT: the
    -- commands an ACL allows the library, docs/security.md, have no PEXPIREAT.)
    local ends = math.max(now_ms() + tonumber(ttl), math.floor(token / 1000) + 2)
    redis.call('SET', key, value, 'PXAT', string.format('%d', ends))
  elseif owned and kind ~= 'zset' then
    redis.call('PEXPIRE', key, ttl)
  end
  if owned then
    if counted then
      lengthen(fence, ttl)  -- (it may be kept longer already, until the server's clock passes it)
    end
    result[i] = 1
  elseif kind == 'none' or kind == 'zset' then  -- (a permit is never taken over)
    result[i] = 0
  else
    result[i] = -1
  end
end
return result
