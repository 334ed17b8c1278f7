-- Forget the results stored for a key (after a write to what they were computed from), and
-- refuse the store of a build already under way, which may have read the data before the
-- write: its counter is raised past its token (renewals keep the counter as long as the lease).
--
-- KEYS[4i-3]  result (compute_look.lua), one group of four keys per family (compute_once's,
--             idempotent's), all of one hash tag
-- KEYS[4i-2]  the builder's lease
-- KEYS[4i-1]  the builder's fencing counter (prelude.lua)
-- KEYS[4i]    failure (compute_look.lua)
--
-- Returns how many results were dropped.
local dropped = 0
for i = 1, #KEYS, 4 do
  dropped = dropped + redis.call('DEL', KEYS[i])
  redis.call('DEL', KEYS[i + 3])
  local left = redis.call('PTTL', KEYS[i + 1])
  if left > 0 then
    -- past the build's own token (its lease's), kept in the counter for the lease left
    local _, building = simple_holder(KEYS[i + 1], redis.pcall('GET', KEYS[i + 1]))
    local top, err = mint(KEYS[i + 2], 1, left, building or nil)
    if not top then
      return err
    end
  end
end
return dropped
