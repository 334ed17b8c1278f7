-- Acquire every name of a multi-lock at once, or none (_core/kinds.py, AllOf), or re-confirm a
-- grant this holder has already (a re-sent request). Its names share one server (one master, or
-- one slot of a Cluster); each is a simple lock of its own, as acquire.lua takes it ('holder
-- token': each name's own fencing token beside the holder token).
--
-- KEYS[3i-2]  lock key of name i (the names in canonical order: sorted)
-- KEYS[3i-1]  its fencing counter (prelude.lua)
-- KEYS[3i]    its queue of waiters (acquire.lua)
-- ARGV[1]     holder token
-- ARGV[2]     ttl in milliseconds
-- ARGV[3]     this waiter's entry once it waits, or '': '>' and the channel it listens on,
--             where the release of any name wakes it (serve.lua)
-- ARGV[4]     'PUBLISH', or 'SPUBLISH' on a Cluster
-- ARGV[4+i]   wake-up channel of name i
--
-- Returns {1, fence 1, ..., fence n} when every name is granted to ARGV[1] (a name it holds
-- already, after a re-sent request, is re-extended and keeps its token). Otherwise {0, pttl, score}, and ARGV[1] holds none of the names: pttl is the
-- remaining ttl in ms of the first name held by another (-1: no expiry; a reentrant lock, a
-- hash, is busy the same way), and a waiter is queued on that name only (keeping its place on
-- re-tries), with the score of its entry ('' if none). A name found free whose queue has
-- waiters is served (serve.lua): a wake-up a release gave this waiter goes on to the next, as
-- a lock's waiter that gives up passes its own on (release.lua).
local n = #KEYS / 3
local holder, ttl, entry, publish = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local found, tokens, busy = {}, {}, nil
for i = 1, n do
  local lock = KEYS[3 * i - 2]
  local value, token = simple_holder(lock, redis.pcall('GET', lock))
  if value == nil then
    value = true  -- a reentrant lock's hash: another holder
  end
  found[i], tokens[i] = value, token
  if value ~= false and value ~= holder then
    busy = busy or i
  end
end
if busy then
  for i = 1, n do
    local lock, fence, queue, channel = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i], ARGV[4 + i]
    if i ~= busy then
      if entry ~= '' then
        redis.call('ZREM', queue, entry)
      end
      if found[i] == holder then
        -- left from a grant this holder never heard of, partly lost since: given back
        redis.call('DEL', lock)
        if tokens[i] then
          forget(fence, tokens[i])
        end
        serve(lock, queue, fence, channel, publish, '')
      elseif found[i] == false and redis.call('ZCARD', queue) > 0 then
        serve(lock, queue, fence, channel, publish, '')
      end
    end
  end
  local lock, queue = KEYS[3 * busy - 2], KEYS[3 * busy]
  local pttl = redis.call('PTTL', lock)
  local score = ''
  if entry ~= '' then
    local now = redis.call('TIME')
    redis.call('ZADD', queue, 'NX', now[1] .. string.format('%06d', now[2]), entry)
    score = redis.call('ZSCORE', queue, entry)
    if redis.call('PTTL', queue) < pttl + ttl then
      redis.call('PEXPIRE', queue, pttl + ttl)
    end
  end
  return {0, pttl, score}
end
local t = redis.call('TIME')
local fences = {1}
for i = 1, n do
  local lock, fence = KEYS[3 * i - 2], KEYS[3 * i - 1]
  local token, err
  if found[i] == holder then
    token, err = current_token(fence, 1, ttl, tokens[i])
    if token then
      redis.call('PEXPIRE', lock, ttl)
    end
  else
    token, err = mint(fence, 1, 0, nil, t)
    if token then
      redis.call('SET', lock, holder .. ' ' .. token, 'PX', ttl)
    end
  end
  if not token then
    -- a counter holds something else: undo what this script took rather than grant without
    -- a token
    for j = 1, i - 1 do
      if found[j] == false then
        redis.call('DEL', KEYS[3 * j - 2])
        forget(KEYS[3 * j - 1], fences[j + 1], t)
      end
    end
    return err
  end
  fences[i + 1] = token
  if entry ~= '' then
    redis.call('ZREM', KEYS[3 * i], entry)
  end
end
return fences
