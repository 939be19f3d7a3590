-- Replace a whole list atomically (`distributor workunits set`), refusing a
-- key of another type instead of destroying it.
-- KEYS: the list
-- ARGV: the new entries, in order
-- Returns the number of entries, or {-3, key, type, 'list'}.
local t = type_of(KEYS[1])
if t ~= 'list' and t ~= 'none' then
  return wrong_type(KEYS[1], t, 'list')
end
redis.call('DEL', KEYS[1])
local CHUNK = 1000
local s = 1
while s <= #ARGV do
  local e = math.min(s + CHUNK - 1, #ARGV)
  redis.call('RPUSH', KEYS[1], unpack(ARGV, s, e))
  s = e + 1
end
return #ARGV
