-- The only writer of the matching table: a fenced, atomic replace.
-- KEYS: table, meta, epoch, lease, liveness, suspects, transit
-- ARGV: token, epoch, generation_floor, digest, now_ms, holder_id, channel,
--       write_table (0|1), n_rows, n_health_set, n_health_del,
--       n_suspect_set, n_suspect_del, write_transit (0|1), n_transit,
--       assignment, last_change (stored in meta with a table write; an
--       empty last_change leaves the stored one), expected_version (meta's
--       `version` the caller's plan is based on; empty: no check), then
--       n_rows (member, units) pairs, n_health_set (member, state) pairs,
--       n_health_del member names, n_suspect_set (member, suspicion) pairs,
--       n_suspect_del member names and n_transit (field, value) pairs.
-- With write_transit, the transit hash is replaced whole; a value that
-- starts with "0 " (a revocation this write makes) gets the new generation
-- instead of the 0, so revocations are numbered by the write that makes them.
-- Every write increments meta's `version`: a write whose plan was based on
-- another version (a write of the same holder that timed out and landed
-- later, an edit of the metadata) is refused, so no write ever lands on a
-- state its planner did not read.
-- Returns {1, generation, version} (generation -1 when only liveness was
-- written), {0, reason} when the caller no longer holds the lease (Redis
-- itself rejects a stale holder's write), {-4, version} when meta's version is
-- not the expected one, or {-2, key, field, value, expected} when a stored
-- value or an argument is unusable; then nothing was written.

-- Fencing.
if type_of(KEYS[4]) ~= 'string' or redis.call('GET', KEYS[4]) ~= ARGV[1] then
  return {0, 'lease'}
end
if type_of(KEYS[3]) ~= 'string' or redis.call('GET', KEYS[3]) ~= ARGV[2] then
  return {0, 'epoch'}
end

-- Validate everything before the first write.
local argv_floor = count(ARGV[3])
if not argv_floor then return invalid('ARGV', 'generation_floor', ARGV[3], COUNT) end
if not count(ARGV[5]) then return invalid('ARGV', 'now_ms', ARGV[5], COUNT) end
local n_rows, n_set, n_del = count(ARGV[9]), count(ARGV[10]), count(ARGV[11])
local n_sus, n_unsus = count(ARGV[12]), count(ARGV[13])
local n_transit = count(ARGV[15])
if not (n_rows and n_set and n_del and n_sus and n_unsus and n_transit)
  or #ARGV ~= 18 + 2 * n_rows + 2 * n_set + n_del + 2 * n_sus + n_unsus + 2 * n_transit then
  return invalid('ARGV', 'counts', table.concat({ARGV[9] or '', ARGV[10] or '', ARGV[11] or '',
    ARGV[12] or '', ARGV[13] or '', ARGV[15] or ''}, ' ') .. ' for ' .. #ARGV .. ' arguments',
    'counts that match the arguments')
end
local write_table = ARGV[8] == '1'
local write_transit = ARGV[14] == '1'
local expected_version = nil
if ARGV[18] ~= '' then
  expected_version = count(ARGV[18])
  if not expected_version then return invalid('ARGV', 'expected_version', ARGV[18], COUNT) end
end

-- The metadata and liveness hashes are ours and derived: a wrong type (an
-- operator's mistake) is reset below. The table itself is deleted before it
-- is written, whatever its type.
local meta_type = type_of(KEYS[2])
local version = 0
if meta_type == 'hash' then
  local v = redis.call('HGET', KEYS[2], 'version')
  if v then
    version = count(v)
    if not version then return invalid(KEYS[2], 'version', v, COUNT) end
  end
end
if version + 1 >= MAX_SAFE then
  return invalid(KEYS[2], 'version', decimal(version), COUNT .. ', below its largest')
end
if expected_version and expected_version ~= version then
  return {-4, version}
end
local generation = -1
if write_table then
  local current, stored_floor = 0, 0
  if meta_type == 'hash' then
    local v = redis.call('HMGET', KEYS[2], 'generation', 'generation_floor')
    if v[1] then
      current = count(v[1])
      if not current then return invalid(KEYS[2], 'generation', v[1], COUNT) end
    end
    if v[2] then
      stored_floor = count(v[2])
      if not stored_floor then return invalid(KEYS[2], 'generation_floor', v[2], COUNT) end
    end
  end
  generation = math.max(current, stored_floor, argv_floor) + 1
  if generation >= MAX_SAFE then
    return invalid(KEYS[2], 'generation', decimal(generation - 1), COUNT .. ', below its largest')
  end
end
local liveness_type = type_of(KEYS[5])
local suspects_type = type_of(KEYS[6])
local transit_type = type_of(KEYS[7])

local rows_at = 19
local set_at = rows_at + 2 * n_rows
local del_at = set_at + 2 * n_set
local sus_at = del_at + n_del
local unsus_at = sus_at + 2 * n_sus
local transit_at = unsus_at + n_unsus

-- A revocation (a transit value starting with "0 ") is numbered by the
-- table write that makes it: none without one.
if write_transit then
  for i = transit_at + 1, transit_at + 2 * n_transit - 1, 2 do
    if string.sub(ARGV[i], 1, 2) == '0 ' and not write_table then
      return invalid('ARGV', ARGV[i - 1], ARGV[i], 'a revocation written with the table')
    end
  end
end

-- Writes from here on; none of them can fail.
if meta_type ~= 'hash' and meta_type ~= 'none' then
  redis.call('DEL', KEYS[2])
end
if liveness_type ~= 'hash' and liveness_type ~= 'none' then
  redis.call('DEL', KEYS[5])
end
if suspects_type ~= 'hash' and suspects_type ~= 'none' then
  redis.call('DEL', KEYS[6])
end
if write_transit and transit_type ~= 'none' then
  redis.call('DEL', KEYS[7])
end

-- HSET/HDEL in chunks: Lua's unpack() is limited to a few thousand values.
local CHUNK = 1000
local function apply(cmd, key, first, last)
  local s = first
  while s <= last do
    local e = math.min(s + CHUNK - 1, last)
    redis.call(cmd, key, unpack(ARGV, s, e))
    s = e + 1
  end
end

if write_table then
  redis.call('DEL', KEYS[1])
  apply('HSET', KEYS[1], rows_at, set_at - 1)
  redis.call('HSET', KEYS[2], 'generation', generation, 'digest', ARGV[4],
    'epoch', ARGV[2], 'writer', ARGV[6], 'written_at_ms', ARGV[5], 'members', n_rows,
    'assignment', ARGV[16])
  if ARGV[17] ~= '' then
    redis.call('HSET', KEYS[2], 'last_change', ARGV[17])
  end
end
apply('HSET', KEYS[5], set_at, del_at - 1)
apply('HDEL', KEYS[5], del_at, sus_at - 1)
apply('HSET', KEYS[6], sus_at, unsus_at - 1)
apply('HDEL', KEYS[6], unsus_at, unsus_at + n_unsus - 1)
if write_transit then
  local gen = decimal(generation)
  for i = transit_at, transit_at + 2 * n_transit - 1, 2 do
    local v = ARGV[i + 1]
    if string.sub(v, 1, 2) == '0 ' then
      v = gen .. string.sub(v, 2)
    end
    redis.call('HSET', KEYS[7], ARGV[i], v)
  end
end
redis.call('HSET', KEYS[2], 'version', version + 1)
if write_table then
  redis.call('PUBLISH', ARGV[7], generation)
end
return {1, generation, version + 1}
