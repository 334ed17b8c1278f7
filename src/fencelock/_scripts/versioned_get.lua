-- A versioned value and its version, read together.
--
-- KEYS[1]  the value: a plain string, or none
-- KEYS[2]  its version key (versioned.lua)
--
-- Returns {version, value} (no value: the key does not exist).
local version, value = read_versioned(KEYS[1], KEYS[2])
if not version then
  return value
end
return {version, value}
