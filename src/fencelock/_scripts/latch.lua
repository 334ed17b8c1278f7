-- Countdown latches: prepended to the latch scripts (after prelude.lua).
--
-- The keys of one latch share one hash tag (_keys.py, LockKeys.for_family(name, prefix, 'latch')):
--   lock     a sorted set: participant holder token -> the end of its lease, in ms of this
--            server's clock. A participant that joined keeps a lease (renewed by the watchdog
--            through renew.lua) until it leaves; one whose lease ended without counting down
--            stays listed until the next generation: it is missing (crashed, or stuck).
--   state    a hash: 'count' (what the generation counts down from), 'gen' (the generation,
--            from 1; reset() starts the next), 'opened' (the last generation that reached 0),
--            'parties' (a barrier's: it opens when that many participants have joined)
--   counted  a set: the participants counted down in this generation (by participant id: a
--            retried count_down, or one sent again after a reply was lost, counts once)
-- Every key of a latch is kept `keep` ms after its last write (ARGV of every script): a latch
-- nobody uses leaves nothing behind.

local function latch_now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The latch's generation, starting it (count `count`) if the latch is new.
local function latch_gen(state, count)
  local gen = redis.call('HGET', state, 'gen')
  if not gen then
    redis.call('HSET', state, 'gen', 1, 'count', count, 'opened', 0)
    return 1
  end
  return tonumber(gen)
end

-- Keep every key of the latch `keep` ms from now (a key that does not exist stays so).
local function latch_keep(keys, keep)
  for _, key in ipairs(keys) do
    redis.call('PEXPIRE', key, keep)
  end
end
