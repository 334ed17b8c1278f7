-- Acquire a simple lock, or re-confirm a grant this holder already has.
--
-- KEYS[1]  lock key: 'holder token', the holder token and the grant's fencing token (prelude.lua),
--          always with a TTL
-- KEYS[2]  fencing counter: a token kept while it is ahead of the server's clock (prelude.lua)
-- KEYS[3]  queue of waiters (a sorted set, by arrival on the server clock): each woken alone, and
--          '*' (last) for the waiters woken together on the lock's channel; a release that finds
--          it empty publishes nothing, unless asked to announce (release.lua ARGV[5])
-- ARGV[1]  holder token (at least 20 random bytes, url-safe base64)
-- ARGV[2]  ttl in milliseconds
-- ARGV[3]  fencing tokens to reserve: 1, or more when waiters of the same process are queued
--          for local hand-offs (the grant's token is the first of the block)
-- ARGV[4]  this waiter's entry in KEYS[3], or '' (not waiting): its id when it waits to be woken
--          alone (wake="one"), or 'id ttl block token' when a release may grant it the lock
--          (release.lua); '*' when it waits on the lock's channel with others (wake="all", a
--          reentrant lock's waiter). A barging lock's waiter (fair=False) queues by its id for its
--          first tries (kinds.BARGED_TRIES), then as 'id ttl block token': that entry takes the
--          place (the score) of its id, and a barging release grants it (serve.lua)
-- ARGV[5]  Redlock: a proposed fencing token (the client's clock in microseconds, a little ahead),
--          or absent. A grant's token is then max(last token + 1, this server's clock, the
--          proposal) when the proposal is ahead of the clock by less than the lease (less 2 ms
--          where the lock key alone will hold it, until the clock has passed it; one further
--          ahead is ignored): every node of a majority grants the same token, and none needs its
--          write-back (fence_raise.lua)
--
-- Returns {1, fence} when granted, fence being the last token of the block. When ARGV[1] already
-- holds the lock (the library retries a request that timed out and the first attempt had in
-- fact succeeded, or a release granted it to this waiter) the lease is re-extended and the fence
-- of that grant is returned again, so the retry cannot fail against itself. Otherwise returns
-- {0, pttl, score}: the holder's remaining ttl in ms (-1: a key without expiry; a reentrant
-- lock holding the name, a hash, is busy the same way), and a waiter is queued (once: it keeps
-- its place on re-tries) with the score of its entry ('' if none, or '*'). An entry popped by a
-- release and queued again has a new score: that is how a waiter tells a grant it may trust
-- from one that came before this reply (see lock.py).
--
-- The uncontended grant runs first, before the helpers are made: one token, the lock free, and
-- no counter, or one below the token (a token kept until the clock passed it: it goes, the lock
-- key holding the larger one), so no token ahead of the clock to count on from.
local t, fence, last
local proposed = tonumber(ARGV[5] or '')
if ARGV[3] == '1' then
  last = redis.pcall('GET', KEYS[2])  -- (false: none; not a string: the slower path's error)
end
if last == false or type(last) == 'string' then
  t = redis.call('TIME')
  fence = t[1] .. string.format('%06d', t[2])
  local px, ttl = 'PX', ARGV[2]
  if proposed and proposed > tonumber(fence) then
    -- The lock key alone will hold a token ahead of the clock: it must not expire before the
    -- clock has passed it (renew.lua too). The lease ends at the clock read (TIME) plus the ttl,
    -- not at the script's start (the time PX counts from on Valkey), and the proposal is below
    -- it by 2 ms at least: a re-sent acquire's PEXPIRE, below, starts later still.
    local ends = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + ARGV[2]
    if proposed < (ends - 1) * 1000 then
      fence, px, ttl = string.format('%d', proposed), 'PXAT', string.format('%d', ends)
    end
  end
  if last and not (string.match(last, '^[1-9]%d*$')
      and (#last < #fence or (#last == #fence and last < fence))) then
    fence = nil  -- counted on from the counter, below
  elseif redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. fence, 'NX', px, ttl) then
    if last then
      redis.call('DEL', KEYS[2])
    end
    if ARGV[4] ~= '' and ARGV[4] ~= '*' then
      redis.call('ZREM', KEYS[3], ARGV[4], string.match(ARGV[4], '^%S+'))
    end
    return {1, fence}
  end
end
-- (the preludes' helpers from here on)
if not fence and redis.call('EXISTS', KEYS[1]) == 0 then
  -- a block reserved, or a counter to count on from (and the proposal, within the lease)
  t = t or redis.call('TIME')
  local floor
  if proposed and proposed < tonumber(micros(t)) + ARGV[2] * 1000 then
    floor = decimal(proposed - 1)
  end
  local top, err = mint(KEYS[2], ARGV[3], 0, floor, t)
  if not top then
    return err
  end
  redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. top, 'PX', ARGV[2])
  if ARGV[4] ~= '' and ARGV[4] ~= '*' then
    redis.call('ZREM', KEYS[3], ARGV[4], string.match(ARGV[4], '^%S+'))
  end
  return {1, top}
end
local holder, held = simple_holder(KEYS[1], redis.pcall('GET', KEYS[1]))
if holder == ARGV[1] then
  local top, err = current_token(KEYS[2], ARGV[3], ARGV[2], held)
  if not top then
    return err
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, top}
end
local pttl = redis.call('PTTL', KEYS[1])
local score = ''
if ARGV[4] ~= '' then
  if ARGV[4] == '*' then
    redis.call('ZADD', KEYS[3], 'NX', '+inf', '*')  -- served after every waiter woken alone
  else
    -- microseconds, as a string: a Lua number would be sent rounded to 14 digits
    local added = redis.call('ZADD', KEYS[3], 'NX', micros(t or redis.call('TIME')), ARGV[4])
    -- a barging waiter served in order from now on: its entry by id alone gives it its place
    local id = added == 1 and string.match(ARGV[4], '^(%S+) ')
    local before = id and redis.call('ZSCORE', KEYS[3], id)
    if before then
      redis.call('ZREM', KEYS[3], id)
      redis.call('ZADD', KEYS[3], 'XX', before, ARGV[4])
    end
    score = redis.call('ZSCORE', KEYS[3], ARGV[4])
  end
  -- Waiters re-try (and so re-queue) within the holder's ttl at the latest: a queue nobody
  -- refreshes for that long is left over from waiters that are gone.
  if redis.call('PTTL', KEYS[3]) < pttl + ARGV[2] then
    redis.call('PEXPIRE', KEYS[3], pttl + ARGV[2])
  end
end
return {0, pttl, score}
