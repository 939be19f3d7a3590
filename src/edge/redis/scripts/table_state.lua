-- Read-only: what the stored table looks like, for "did it change?".
-- KEYS: table, meta
-- ARGV: '1' to check the content in Redis, '0' to trust the caller's watch
-- Returns {digest or false, generation or false}, or {-2, key, field, value,
-- expected} when meta holds an unusable generation.
--
-- The digest is returned only when the table is intact. With ARGV[1] = '1'
-- that means its content hashes to meta.digest (O(table bytes), in Redis,
-- nothing sent back): the daemon asks for it only where it cannot WATCH the
-- table. With '0' it means a hash (or nothing, for an empty table) of exactly
-- the number of rows the writer recorded. A table deleted, edited or of the
-- wrong type reads as "changed", and the holder writes it again.
local meta_type = type_of(KEYS[2])
if meta_type ~= 'hash' then
  return {false, false}
end
local v = redis.call('HMGET', KEYS[2], 'digest', 'generation', 'members')
if v[2] and not count(v[2]) then
  return invalid(KEYS[2], 'generation', v[2], COUNT)
end
local rows = count(v[3] or '')
local table_type = type_of(KEYS[1])
local intact
if table_type == 'none' then
  intact = rows == 0
elseif table_type == 'hash' and redis.call('HLEN', KEYS[1]) == rows then
  intact = ARGV[1] ~= '1' or table_digest(redis.call('HGETALL', KEYS[1])) == v[1]
else
  intact = false
end
if intact then
  return {v[1] or false, v[2] or false}
end
return {false, v[2] or false}
