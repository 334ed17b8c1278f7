-- What a compute_once or idempotent call finds for its key (_async/compute.py): the stored
-- result, the build in progress if any, and the failure of the last build. Read only, except
-- for ARGV[1].
--
-- KEYS[1]  result: a hash {v = the encoded result, f = the fencing token of its build, t = when
--          it was stored (the server's clock, ms), p = the request's fingerprint (idempotent)}
-- KEYS[2]  the builder's lease: a simple lock ('holder token', acquire.lua)
-- KEYS[3]  the builder's fencing counter (prelude.lua)
-- KEYS[4]  failure: a hash {f = the failed build's token, e = the exception's type name,
--          m = its message}, kept a lease's time for the waiters of that build
-- ARGV[1]  a fingerprint to record for a key with nothing stored, or '': the builder of an
--          idempotent call, once it holds the lease, records its request's (a repeat with
--          another is refused)
-- ARGV[2]  how long a fingerprint recorded without a result is kept, ms (with ARGV[1])
--
-- Returns {value or false, its token ('0': none), its age in ms (-1: none), fingerprint or
-- false, the builder's lease left in ms (-2: no build), the build's token (the lease's own, else
-- the counter) or false, the failure's token or false, its type name, its message}.
if ARGV[1] ~= '' and redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'p', ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
local stored = redis.call('HMGET', KEYS[1], 'v', 'f', 't', 'p')
local age = -1
if stored[1] then
  local t = redis.call('TIME')
  age = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - tonumber(stored[3])
end
local failed = redis.call('HMGET', KEYS[4], 'f', 'e', 'm')
local lease = redis.call('GET', KEYS[2])
local building = lease and string.match(lease, '^%S+ (%d+)$')
return {
  stored[1],
  stored[2] or '0',
  age,
  stored[4],
  redis.call('PTTL', KEYS[2]),
  building or redis.call('GET', KEYS[3]),
  failed[1],
  failed[2] or '',
  failed[3] or '',
}
