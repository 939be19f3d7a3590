-- Add a member to its services list once: atomic and idempotent, unlike the
-- check-then-push of the Go implementation, which could add it twice.
-- KEYS: services list
-- ARGV: member address
-- Returns 1 when added, 0 when already listed.
if redis.call('LPOS', KEYS[1], ARGV[1]) then
  return 0
end
redis.call('LPUSH', KEYS[1], ARGV[1])
return 1
