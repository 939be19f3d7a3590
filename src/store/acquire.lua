-- Acquire the lease if nobody holds it, and open a new fencing epoch.
-- KEYS: lease, epoch, meta
-- ARGV: token, ttl_ms, epoch_floor, holder_id, now_ms, failure_threshold
-- Returns {1, epoch} when acquired, {0, pttl_ms, holder, epoch} otherwise.
--
-- epoch_floor is the highest epoch the caller has seen: if Redis lost its data
-- (restart without persistence) the counter restarts at 0, and the floor keeps
-- epochs increasing anyway.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local epoch = redis.call('INCR', KEYS[2])
  local floor = tonumber(ARGV[3])
  if epoch <= floor then
    epoch = floor + 1
    redis.call('SET', KEYS[2], epoch)
  end
  redis.call('HSET', KEYS[3], 'holder', ARGV[4], 'holder_epoch', epoch, 'acquired_at_ms', ARGV[5],
    'failure_threshold', ARGV[6])
  return {1, epoch}
end
local holder = redis.call('HGET', KEYS[3], 'holder') or ''
local epoch = tonumber(redis.call('GET', KEYS[2]) or '0')
return {0, redis.call('PTTL', KEYS[1]), holder, epoch}
