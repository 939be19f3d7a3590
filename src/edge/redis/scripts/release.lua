-- Give the lease up and wake the standbys, only for its current holder.
-- KEYS: lease, meta
-- ARGV: token, epoch, channel
-- Returns 1 when released, 0 when it was not ours any more.
if type_of(KEYS[1]) ~= 'string' or redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local meta_type = type_of(KEYS[2])
redis.call('DEL', KEYS[1])
if meta_type == 'hash' or meta_type == 'none' then
  redis.call('HSET', KEYS[2], 'holder', '')
end
redis.call('PUBLISH', ARGV[3], ARGV[2])
return 1
