-- Extend the lease, only for its current holder in its current epoch.
-- KEYS: lease, epoch
-- ARGV: token, epoch, ttl_ms
-- Returns 1 when renewed, 0 when the lease is lost.
if redis.call('GET', KEYS[1]) == ARGV[1] and redis.call('GET', KEYS[2]) == ARGV[2] then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return 1
end
return 0
