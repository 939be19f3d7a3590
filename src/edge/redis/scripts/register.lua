-- Add a member to its services list once: atomic and idempotent, unlike the
-- check-then-push of the Go implementation, which could add it twice.
-- Also used by `distributor services|workunits add`.
-- KEYS: the list
-- ARGV: the entry, then LPUSH or RPUSH (members prepend, as the Go workers did)
-- Returns 1 when added, 0 when already listed, {-3, ...} when the key is not a list.
local t = type_of(KEYS[1])
if t ~= 'list' and t ~= 'none' then
  return wrong_type(KEYS[1], t, 'list')
end
if redis.call('LPOS', KEYS[1], ARGV[1]) then
  return 0
end
redis.call(ARGV[2], KEYS[1], ARGV[1])
return 1
