-- Read-only: what the stored table looks like, for "did it change?".
-- KEYS: table, meta
-- Returns {digest or false, generation or false}. The digest is returned only
-- when the table is intact: a hash (or absent, when empty) with exactly the
-- number of rows the writer recorded. A table deleted, edited by hand or of the
-- wrong type therefore reads as "changed", and the holder writes it again.
-- Keys of the wrong type are not an error here: the next write replaces them.
local meta_type = redis.call('TYPE', KEYS[2]).ok
if meta_type ~= 'hash' then
  return {false, false}
end
local v = redis.call('HMGET', KEYS[2], 'digest', 'generation', 'members')
local rows = tonumber(v[3] or '-1')
local table_type = redis.call('TYPE', KEYS[1]).ok
local intact = (table_type == 'hash' and redis.call('HLEN', KEYS[1]) == rows)
  or (table_type == 'none' and rows == 0)
if intact then
  return {v[1] or false, v[2] or false}
end
return {false, v[2] or false}
