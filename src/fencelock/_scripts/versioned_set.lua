-- Compare-and-set of a versioned value: written only if its version is still the one read.
--
-- KEYS[1]  the value: a plain string, or none
-- KEYS[2]  its version key (versioned.lua)
-- ARGV[1]  the new value
-- ARGV[2]  the version the writer read: a decimal integer without leading zeros ('0': unset)
--
-- Returns {1, new version} when written (the version moves up by one), or {0, version, value}:
-- what the writer must read again, sent along so that its next try needs no read of its own.
local version, value = read_versioned(KEYS[1], KEYS[2])
if not version then
  return value
end
if version ~= ARGV[2] then
  return {0, version, value}
end
redis.call('SET', KEYS[1], ARGV[1])
return {1, redis.call('INCRBY', KEYS[2], 1)}
