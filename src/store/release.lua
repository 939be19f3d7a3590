-- Give the lease up and wake the standbys, only for its current holder.
-- KEYS: lease, meta
-- ARGV: token, epoch, channel
-- Returns 1 when released, 0 when it was not ours any more.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[2], 'holder', '')
  redis.call('PUBLISH', ARGV[3], ARGV[2])
  return 1
end
return 0
