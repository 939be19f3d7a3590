-- Record quarantined units (core::quarantine), only for the current holder in
-- its current epoch: a stale holder cannot take a unit from everyone.
-- KEYS: lease, epoch, quarantine
-- ARGV: token, epoch, then (unit, record) pairs; a record is
--       `<since_ms> <member>@<ms>,...`
-- Returns {1, added} (fields new to the hash), {0, reason} when fenced,
-- {-3, key, type, 'hash'} when the quarantine key holds another type, or
-- {-2, 'ARGV', field, value, expected} for an argument it will not store;
-- then nothing was written.
local refused = fenced(KEYS[1], ARGV[1], KEYS[2], ARGV[2])
if refused then return refused end
local t = type_of(KEYS[3])
if t ~= 'hash' and t ~= 'none' then
  return wrong_type(KEYS[3], t, 'hash')
end
if #ARGV % 2 ~= 0 then
  return invalid('ARGV', 'pairs', decimal(#ARGV - 2), 'an even count of unit and record')
end
for i = 3, #ARGV, 2 do
  if #ARGV[i] == 0 or string.find(ARGV[i], ',', 1, true) then
    return invalid('ARGV', 'unit', ARGV[i], 'a unit name: not empty, no comma')
  end
  local since = string.match(ARGV[i + 1], '^(%d+)')
  if not count(since) then
    return invalid('ARGV', ARGV[i], ARGV[i + 1], '<since_ms> <member>@<ms>,...')
  end
end
local added = 0
for i = 3, #ARGV, 2 do
  added = added + redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1])
end
return {1, added}
