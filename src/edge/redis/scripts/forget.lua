-- Remove long-failing members from their services lists (-forget-after), only
-- for the current holder in its current epoch: a stale holder, cut off from
-- the workers, cannot delete anyone's registration.
-- A forgotten member's report (handoff protocol) and measured loads go with
-- it, so that `{T}:members` and `{T}:loads` do not grow with every address a
-- worker ever had.
-- KEYS: lease, epoch, members (reports), loads, then the lists
-- ARGV: token, epoch, then (list number, member) pairs; list number n names
--       KEYS[4 + n]; 0 removes only the report and loads (a list in another
--       cluster slot, removed by the caller once this fencing check passed)
-- Returns {1, removed_1, ..., removed_k} (LREM counts, one per pair),
-- {0, reason} when fenced, or {-3, key, type, 'list'} for a key that is not a list.
local refused = fenced(KEYS[1], ARGV[1], KEYS[2], ARGV[2])
if refused then return refused end
for i = 5, #KEYS do
  local t = type_of(KEYS[i])
  if t ~= 'list' and t ~= 'none' then
    return wrong_type(KEYS[i], t, 'list')
  end
end
for i = 3, #ARGV, 2 do
  local n = count(ARGV[i])
  if not n or n > #KEYS - 4 then
    return invalid('ARGV', 'list number', ARGV[i], 'a list number in 0..' .. (#KEYS - 4))
  end
end
-- Members write their reports and loads: a key of another type is left alone.
local reports = type_of(KEYS[3]) == 'hash'
local loads = type_of(KEYS[4]) == 'hash'
local out = {1}
for i = 3, #ARGV, 2 do
  local n = tonumber(ARGV[i])
  if n > 0 then
    out[#out + 1] = redis.call('LREM', KEYS[4 + n], 0, ARGV[i + 1])
  else
    out[#out + 1] = 0
  end
  if reports then
    redis.call('HDEL', KEYS[3], ARGV[i + 1])
  end
  if loads then
    redis.call('HDEL', KEYS[4], ARGV[i + 1])
  end
end
return out
