-- Acquire the lease if nobody holds it, and open a new fencing epoch.
-- KEYS: lease, epoch, meta
-- ARGV: token, ttl_ms, epoch_floor, holder_id, now_ms, failure_threshold, generation_floor
-- Returns {1, epoch} when acquired, {0, pttl_ms, holder, epoch, generation} otherwise,
-- {-1, key} when a key this script must not touch has the wrong type.
--
-- The floors are the highest epoch and generation the caller has seen. If
-- Redis lost its data (restart without persistence) its counters restart at 0;
-- the floors keep them increasing. A caller that finds the lease held by an
-- epoch below its floor raises the stored epoch: that holder's renewal then
-- fails the epoch check, and the next acquisition starts above the floor.
local epoch_type = redis.call('TYPE', KEYS[2]).ok
if epoch_type ~= 'string' and epoch_type ~= 'none' then
  return {-1, KEYS[2]}
end
-- The metadata hash is ours and derived: a wrong type is reset, not fatal.
local meta_type = redis.call('TYPE', KEYS[3]).ok
if meta_type ~= 'hash' and meta_type ~= 'none' then
  redis.call('DEL', KEYS[3])
end
local floor = tonumber(ARGV[3])
local generation_floor = tonumber(ARGV[7])
local current_generation = tonumber(redis.call('HGET', KEYS[3], 'generation') or '0')
if current_generation < generation_floor then
  redis.call('HSET', KEYS[3], 'generation', generation_floor)
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local epoch = redis.call('INCR', KEYS[2])
  if epoch <= floor then
    epoch = floor + 1
    redis.call('SET', KEYS[2], epoch)
  end
  redis.call('HSET', KEYS[3], 'holder', ARGV[4], 'holder_epoch', epoch, 'acquired_at_ms', ARGV[5],
    'failure_threshold', ARGV[6])
  return {1, epoch}
end
local epoch = tonumber(redis.call('GET', KEYS[2]) or '0')
if epoch < floor then
  redis.call('SET', KEYS[2], floor)
  epoch = floor
end
local holder = redis.call('HGET', KEYS[3], 'holder') or ''
local generation = tonumber(redis.call('HGET', KEYS[3], 'generation') or '0')
return {0, redis.call('PTTL', KEYS[1]), holder, epoch, generation}
