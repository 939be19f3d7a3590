-- Remove long-failing members from their services lists (-forget-after), only
-- for the current holder in its current epoch: a stale holder, cut off from
-- the workers, cannot delete anyone's registration.
-- KEYS: lease, epoch, then the lists
-- ARGV: token, epoch, then (list number, member) pairs; list number n names
--       KEYS[2 + n]
-- Returns {1, removed_1, ..., removed_k} (LREM counts, one per pair),
-- {0, reason} when fenced, or {-3, key, type, 'list'} for a key that is not a list.
if type_of(KEYS[1]) ~= 'string' or redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {0, 'lease'}
end
if type_of(KEYS[2]) ~= 'string' or redis.call('GET', KEYS[2]) ~= ARGV[2] then
  return {0, 'epoch'}
end
for i = 3, #KEYS do
  local t = type_of(KEYS[i])
  if t ~= 'list' and t ~= 'none' then
    return wrong_type(KEYS[i], t, 'list')
  end
end
for i = 3, #ARGV, 2 do
  local n = count(ARGV[i])
  if not n or n < 1 or n > #KEYS - 2 then
    return invalid('ARGV', 'list number', ARGV[i], 'a list number in 1..' .. (#KEYS - 2))
  end
end
local out = {1}
for i = 3, #ARGV, 2 do
  out[#out + 1] = redis.call('LREM', KEYS[2 + tonumber(ARGV[i])], 0, ARGV[i + 1])
end
return out
