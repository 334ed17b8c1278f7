-- Prepended to the scripts of versioned values (versioned_get, versioned_set).
--
-- A versioned value is a plain string key (readable by anyone with GET) and a companion key in
-- its Cluster slot (keys.version_key_for) counting the versioned writes: a missing companion is
-- version 0. A DEL of the value leaves the count, so a version is never reused.

-- The version and value ('0' and false when unset), or nil and an error reply when either key
-- holds something else than expected.
local function read_versioned(key, version_key)
  local value = redis.pcall('GET', key)
  if type(value) == 'table' then
    return nil, redis.error_reply('WRONGTYPE versioned key ' .. key .. ': ' .. value.err)
  end
  local version = redis.pcall('GET', version_key)
  if type(version) == 'table' then
    return nil, redis.error_reply('WRONGTYPE version key ' .. version_key .. ': ' .. version.err)
  end
  version = version or '0'
  if version ~= '0' and not string.match(version, '^[1-9]%d*$') then
    return nil, redis.error_reply('WRONGTYPE version key ' .. version_key .. ' holds no version: ' .. version)
  end
  return version, value
end
