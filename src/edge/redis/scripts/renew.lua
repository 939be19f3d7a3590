-- Extend the lease, only for its current holder in its current epoch.
-- KEYS: lease, epoch
-- ARGV: token, epoch, ttl_ms
-- Returns {1} when renewed, {0, reason} when the lease is lost, where reason
-- is 'expired' (no lease key), 'taken' (another token holds it), 'epoch' (a
-- higher epoch was opened: a replica that saw one fenced this holder) or
-- 'foreign' (the lease key is not a string).
local ttl = count(ARGV[3])
if not ttl or ttl == 0 then return invalid('ARGV', 'ttl_ms', ARGV[3], 'a TTL in ms > 0') end
local lease_type = type_of(KEYS[1])
if lease_type == 'none' then return {0, 'expired'} end
if lease_type ~= 'string' then return {0, 'foreign'} end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {0, 'taken'} end
if type_of(KEYS[2]) ~= 'string' or redis.call('GET', KEYS[2]) ~= ARGV[2] then
  return {0, 'epoch'}
end
redis.call('PEXPIRE', KEYS[1], ttl)
return {1}
