-- Acquire the lease if nobody holds it, and open a new fencing epoch.
-- KEYS: lease, epoch, meta
-- ARGV: token, ttl_ms, epoch_floor, holder_id, now_ms, failure_threshold,
--       generation_floor, client_id, dead_token, dead_epoch, dead_client
-- client_id and dead_client name a connection: '<client id>' or
-- '<client id>@<run id>' (the run id of the server it is on, where the
-- caller could ask INFO; see core::lease).
-- Returns
--   {1, epoch}                                      acquired;
--   {0, pttl_ms, holder, epoch, generation, foreign, token, client}
--                                                   held by someone else;
--     `foreign` is '' or why the lease key cannot be a holder's (no TTL, or
--     not a string): it is given a TTL of ttl_ms, so that it lapses;
--     `token` is the holder's token and `client` the Redis client id of the
--     connection it renews on ('' when it recorded none);
--   {-2, key, field, value, expected}               a value it will not use.
--
-- Connection record: meta.holder_conn = '<token> <client id>[@<run id>]', written by
-- this script and by renew.lua on the connection whose id it names (the
-- caller asks CLIENT ID on that same connection; Lua cannot call CLIENT). It
-- is bound to the token, so a record left by an earlier holding (or a holder
-- that writes none, such as the Go daemon, which keeps the same lease key: a
-- string token with a PX expiry) never describes the current one.
--
-- Takeover: with dead_token set, the caller saw (by CLIENT LIST ID) that the
-- connection `dead_client` of the holding (dead_token, dead_epoch) is gone.
-- The lease is then taken as if free, but only if it still holds exactly that
-- record: same token, same epoch, same client id. A holder that reconnected
-- and renewed since has a new record, and the takeover is refused.
-- Client ids only grow while a Redis server process runs, so a closed id
-- never reopens. After a restart or a failover the ids are another server's:
-- the caller asks only the server the record names (its run id), so a
-- record of before is never seen closed, and the holder, which may be alive
-- and reconnecting, has until the TTL to renew with a new record. A record
-- without a run id is looked for by its id alone. A live holder whose
-- connection was replaced renews with its new id; until then it may be taken
-- over, and is then fenced by the token and epoch checks: a liveness cost,
-- never a second writer.
--
-- The floors are the highest epoch and generation the caller has seen. If
-- Redis lost its data (restart without persistence) its counters restart at 0;
-- the floors keep them increasing. A caller that finds the lease held by an
-- epoch below its floor raises the stored epoch: that holder's renewal then
-- fails the epoch check, and the next acquisition starts above the floor.
--
-- The generation floor is kept in meta.generation_floor, never in
-- meta.generation: meta.generation is only ever written with a table, so a
-- reader never sees a generation number beside a table it does not name.

-- Validate everything first: nothing below may fail after a write.
local ttl = count(ARGV[2])
if not ttl or ttl == 0 then return invalid('ARGV', 'ttl_ms', ARGV[2], 'a TTL in ms > 0') end
local floor = count(ARGV[3])
if not floor then return invalid('ARGV', 'epoch_floor', ARGV[3], COUNT) end
if not count(ARGV[5]) then return invalid('ARGV', 'now_ms', ARGV[5], COUNT) end
if not count(ARGV[6]) then return invalid('ARGV', 'failure_threshold', ARGV[6], COUNT) end
local generation_floor = count(ARGV[7])
if not generation_floor then return invalid('ARGV', 'generation_floor', ARGV[7], COUNT) end
if ARGV[8] ~= '' and not connection(ARGV[8]) then
  return invalid('ARGV', 'client_id', ARGV[8], CONNECTION)
end
local dead_token = ARGV[9] or ''

local epoch_type = type_of(KEYS[2])
if epoch_type ~= 'string' and epoch_type ~= 'none' then
  return wrong_type(KEYS[2], epoch_type, 'string')
end
local epoch = 0
if epoch_type == 'string' then
  local text = redis.call('GET', KEYS[2])
  epoch = count(text)
  if not epoch or epoch + 1 >= MAX_SAFE then
    return invalid(KEYS[2], '', text, COUNT .. ', below its largest')
  end
end
if floor + 1 >= MAX_SAFE then
  return invalid('ARGV', 'epoch_floor', ARGV[3], COUNT .. ', below its largest')
end

-- The metadata hash is ours and derived: a wrong type is reset below.
local meta_type = type_of(KEYS[3])
local generation, stored_floor = 0, 0
if meta_type == 'hash' then
  local v = redis.call('HMGET', KEYS[3], 'generation', 'generation_floor')
  if v[1] then
    generation = count(v[1])
    if not generation then return invalid(KEYS[3], 'generation', v[1], COUNT) end
  end
  if v[2] then
    stored_floor = count(v[2])
    if not stored_floor then return invalid(KEYS[3], 'generation_floor', v[2], COUNT) end
  end
end

local lease_type = type_of(KEYS[1])
-- A takeover of a holding whose connection is gone: only of exactly the
-- record the caller saw dead (see above).
if dead_token ~= '' and lease_type == 'string' and meta_type == 'hash'
  and redis.call('GET', KEYS[1]) == dead_token
  and count(ARGV[10]) == epoch
  and redis.call('HGET', KEYS[3], 'holder_conn') == dead_token .. ' ' .. ARGV[11] then
  redis.call('DEL', KEYS[1])
  lease_type = 'none'
end
local foreign = ''
if lease_type ~= 'none' and lease_type ~= 'string' then
  foreign = 'the lease key holds a ' .. lease_type
elseif lease_type == 'string' and redis.call('PTTL', KEYS[1]) < 0 then
  foreign = 'the lease key has no TTL'
end

-- Writes from here on.
if meta_type ~= 'hash' and meta_type ~= 'none' then
  redis.call('DEL', KEYS[3])
end
if generation_floor > stored_floor then
  redis.call('HSET', KEYS[3], 'generation_floor', generation_floor)
  stored_floor = generation_floor
end
local known_generation = math.max(generation, stored_floor)

if lease_type == 'none' then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
  epoch = math.max(epoch, floor) + 1
  redis.call('SET', KEYS[2], epoch)
  redis.call('HSET', KEYS[3], 'holder', ARGV[4], 'holder_epoch', epoch, 'acquired_at_ms', ARGV[5],
    'failure_threshold', ARGV[6], 'holder_conn', ARGV[1] .. ' ' .. ARGV[8])
  return {1, epoch}
end
if epoch < floor then
  redis.call('SET', KEYS[2], floor)
  epoch = floor
end
if foreign ~= '' then
  -- No holder of ours writes a lease without a TTL or of another type: give
  -- it one (once), so that it lapses like any lease.
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl < 0 then
    redis.call('PEXPIRE', KEYS[1], ttl)
    pttl = ttl
  end
  return {0, pttl, '', epoch, known_generation, foreign, '', ''}
end
local holder, token, client = '', redis.call('GET', KEYS[1]), ''
if meta_type == 'hash' then
  local v = redis.call('HMGET', KEYS[3], 'holder', 'holder_conn')
  holder = v[1] or ''
  local conn = v[2] or ''
  -- The record describes this holding only if it names its token.
  if string.sub(conn, 1, #token + 1) == token .. ' ' then
    client = string.sub(conn, #token + 2)
  end
end
return {0, redis.call('PTTL', KEYS[1]), holder, epoch, known_generation, '', token, client}
