-- Extend the lease, only for its current holder in its current epoch.
-- KEYS: lease, epoch, meta
-- ARGV: token, epoch, ttl_ms, client_id
-- client_id ('' for none) names the Redis connection this renewal goes over,
-- as the caller last learned it ('<client id>[@<run id>]': CLIENT ID and
-- INFO server, pipelined with the renewals): recorded in meta.holder_conn (see acquire.lua) when it
-- changed, so that after a reconnect the record names the live connection
-- again and standbys do not take a live holder's lease over.
-- Returns {1} when renewed, {0, reason} when the lease is lost, where reason
-- is 'expired' (no lease key), 'taken' (another token holds it), 'epoch' (a
-- higher epoch was opened: a replica that saw one fenced this holder) or
-- 'foreign' (the lease key is not a string).
local ttl = count(ARGV[3])
if not ttl or ttl == 0 then return invalid('ARGV', 'ttl_ms', ARGV[3], 'a TTL in ms > 0') end
local client = ARGV[4] or ''
if client ~= '' and not connection(client) then
  return invalid('ARGV', 'client_id', client, CONNECTION)
end
local lease_type = type_of(KEYS[1])
if lease_type == 'none' then return {0, 'expired'} end
if lease_type ~= 'string' then return {0, 'foreign'} end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {0, 'taken'} end
if type_of(KEYS[2]) ~= 'string' or redis.call('GET', KEYS[2]) ~= ARGV[2] then
  return {0, 'epoch'}
end
local meta_type = type_of(KEYS[3])
redis.call('PEXPIRE', KEYS[1], ttl)
-- The metadata hash is derived: one of another type is left to acquire.lua.
if meta_type == 'hash' or meta_type == 'none' then
  local record = ARGV[1] .. ' ' .. client
  if redis.call('HGET', KEYS[3], 'holder_conn') ~= record then
    redis.call('HSET', KEYS[3], 'holder_conn', record)
  end
end
return {1}
