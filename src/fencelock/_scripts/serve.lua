-- Serving the waiters of a lock just released: prepended to release.lua and
-- reentrant_release.lua (after prelude.lua), so that a waiter of either kind of lock is served
-- whichever kind released the name.
--
-- Serves the first queued waiter of `queue` that still listens (one that left or crashed has no
-- subscriber: the next is tried). An entry 'id ttl block token' is granted the lock at once: the
-- lock key is set to its token and a block of fencing tokens handed out at `fence` with its ttl,
-- and the message 'g<score> <last token of the block>' tells it so; a waiter that queued by id
-- alone gets '1' on `channel`:id and re-tries, and one queued as '>' and a channel (a multi-lock's
-- waiter, multi_acquire.lua: whichever of its names is released) gets '1' on that channel and
-- re-tries. '*' (queued last: acquire.lua) stands for the waiters that listen on `channel`
-- itself (wake="all", reentrant waiters): every one is woken. With nobody queued, nothing is
-- published unless `announce` is '1' (then every listener of `channel` is woken); after 16
-- waiters that no longer listen, every listener of `channel` is woken. The wake-up is best effort (without the right to publish,
-- waiters re-try when the holder's lease would have ended): the lock is released whatever it
-- answers.
-- A barging lock's release (`barge` '1': docs/contention.md, "Barging") grants only an entry in
-- the form 'id ttl block token' (a waiter served in order from now on: acquire.lua); any other
-- entry it wakes stays queued, its place kept, and is removed only when nobody listens for it.
-- Returns 1 when nobody was woken, 3 when a waiting client was woken, 4 when a queued waiter was
-- granted the lock.
local function serve(lock, queue, fence, channel, publish, announce, barge)
  for _ = 1, 16 do  -- bounds the script's time when many queued waiters are gone
    local head
    if barge == '1' then
      head = redis.call('ZRANGE', queue, 0, 0, 'WITHSCORES')
    else
      head = redis.call('ZPOPMIN', queue)
    end
    if #head == 0 then
      if announce == '1' and heard(publish, channel, '1') then
        return 3
      end
      return 1
    end
    local entry = head[1]
    local elsewhere = string.match(entry, '^>(.+)$')
    local id, ttl, block, token
    if not elsewhere and entry ~= '*' then
      id, ttl, block, token = string.match(entry, '^(%S+) (%d+) (%d+) (%S+)$')
    end
    local woken
    if entry == '*' then
      woken = heard(publish, channel, '1')
    elseif id == nil then
      woken = heard(publish, elsewhere or (channel .. ':' .. entry), '1')
    end
    if woken then
      return 3
    end
    if barge == '1' then
      redis.call('ZREM', queue, entry)  -- (as ZPOPMIN: nobody listens for it, or it is granted)
    end
    if id ~= nil then
      local top = mint(fence, block, 0)
      if not top then
        -- no token to grant with: let the waiter re-try, and hear of the counter itself
        heard(publish, channel .. ':' .. id, '1')
        return 3
      end
      redis.call('SET', lock, token .. ' ' .. top, 'PX', ttl)
      if heard(publish, channel .. ':' .. id, 'g' .. head[2] .. ' ' .. top) then
        return 4
      end
      redis.call('DEL', lock)  -- nobody listens for it (its token is kept until the clock passes)
      forget(fence, top)
    end
  end
  if heard(publish, channel, '1') then
    return 3
  end
  return 1
end
