-- The only writer of the matching table: a fenced, atomic write.
-- KEYS: table, meta, epoch, lease, liveness, suspects, transit, changes
-- ARGV: token, epoch, generation_floor, digest, now_ms, holder_id, channel,
--       write_table (0: none, 1: whole, 2: rows), n_rows, n_health_set, n_health_del,
--       n_suspect_set, n_suspect_del, write_transit (0|1), n_transit,
--       assignment, last_change (stored in meta with a table write; an
--       empty last_change leaves the stored one), expected_version (meta's
--       `version` the caller's plan is based on; empty: no check),
--       n_history, history_kept, base_digest (rows only, else empty),
--       n_removed (rows only, else 0), server (the run id of the Redis
--       server the holder writes on, 40 hex digits, or empty when it cannot
--       tell: kept in meta's `server`, so that a new holder sees whether
--       the state it inherits was written on its own server), reports (how
--       many members' reports the holder knows, kept in meta's `reports`:
--       a new holder that finds fewer knows that reports were lost),
--       deadline_max (the longest deadline, in ms, of the reports the holder
--       knows, kept in meta's `deadline_max`: what a new holder waits for a
--       member whose report was lost), then
--       n_rows (member, units) pairs (rows: (member, units, replaces)
--       triples), n_removed (member, replaces) pairs (rows only),
--       n_health_set (member, state) pairs,
--       n_health_del member names, n_suspect_set (member, suspicion) pairs,
--       n_suspect_del member names, n_transit (field, value) pairs and
--       n_history (field, value) pairs.
-- A whole write replaces the table. A rows write sets and deletes only the
-- rows given, and only on the table its plan read: the stored digest must be
-- base_digest and each replaced row must still have the hash `replaces`
-- (`row_hash`, empty: no row); else it is refused ({-4, version, what}) and
-- nothing is written. `digest` is the table's digest after either.
-- With n_history > 0 (only with a table write), the change history (a
-- stream) gets one entry: generation, previous_generation, at_ms, epoch,
-- writer, rows (the members whose rows this write set or deleted,
-- comma-separated, or `*`: a whole write, over 1,000 rows or 64 KiB, or a
-- member named with a comma; what a lookup reads to follow the table) and
-- the pairs given, trimmed to the newest history_kept entries. A user
-- whose ACL lacks XADD still writes the table: the error is kept in meta's
-- `history_error` (`<generation> XADD: <error>`) until an entry is added again.
-- With write_transit, the transit hash is replaced whole (its entry count
-- is kept in meta's `transit`: a new holder that finds fewer knows that
-- entries were lost); a value that
-- starts with "0 " (a revocation this write makes) gets the new generation
-- instead of the 0, so revocations are numbered by the write that makes them.
-- Every write increments meta's `version`: a write whose plan was based on
-- another version (a write of the same holder that timed out and landed
-- later, an edit of the metadata) is refused, so no write ever lands on a
-- state its planner did not read.
-- Returns {1, generation, version} (generation -1 when only liveness was
-- written), {0, reason} when the caller no longer holds the lease (Redis
-- itself rejects a stale holder's write), {-4, version} when meta's version is
-- not the expected one, {-4, version, what} when a rows write's base is not
-- what Redis holds (what: `<key> <field>`), or {-2, key, field, value, expected} when a stored
-- value or an argument is unusable; then nothing was written.

-- Fencing.
local refused = fenced(KEYS[4], ARGV[1], KEYS[3], ARGV[2])
if refused then return refused end

-- Validate everything before the first write.
local argv_floor = count(ARGV[3])
if not argv_floor then return invalid('ARGV', 'generation_floor', ARGV[3], COUNT) end
if not count(ARGV[5]) then return invalid('ARGV', 'now_ms', ARGV[5], COUNT) end
local n_rows, n_set, n_del = count(ARGV[9]), count(ARGV[10]), count(ARGV[11])
local n_sus, n_unsus = count(ARGV[12]), count(ARGV[13])
local n_transit, n_history = count(ARGV[15]), count(ARGV[19])
local n_removed = count(ARGV[22])
local rows_only = ARGV[8] == '2'
local row_width = rows_only and 3 or 2
if not (n_rows and n_set and n_del and n_sus and n_unsus and n_transit and n_history
    and n_removed)
  or #ARGV ~= 25 + row_width * n_rows + 2 * n_removed + 2 * n_set + n_del + 2 * n_sus
    + n_unsus + 2 * n_transit + 2 * n_history then
  return invalid('ARGV', 'counts', table.concat({ARGV[9] or '', ARGV[10] or '', ARGV[11] or '',
    ARGV[12] or '', ARGV[13] or '', ARGV[15] or '', ARGV[19] or '', ARGV[22] or ''}, ' ')
    .. ' for ' .. #ARGV .. ' arguments', 'counts that match the arguments')
end
if not rows_only and (n_removed ~= 0 or ARGV[21] ~= '') then
  return invalid('ARGV', 'n_removed', ARGV[22] .. ' ' .. ARGV[21], '0 and no base_digest without a rows write')
end
if ARGV[23] ~= '' and not string.match(ARGV[23], '^' .. string.rep('%x', 40) .. '$') then
  return invalid('ARGV', 'server', ARGV[23], 'a run id (40 hex digits) or empty')
end
local n_reports = count(ARGV[24])
if not n_reports then return invalid('ARGV', 'reports', ARGV[24], COUNT) end
local deadline_max = count(ARGV[25])
if not deadline_max then return invalid('ARGV', 'deadline_max', ARGV[25], COUNT) end
local history_kept = count(ARGV[20])
if not history_kept or history_kept == 0 then
  return invalid('ARGV', 'history_kept', ARGV[20], 'an integer in 1..2^53-1')
end
local write_table = ARGV[8] == '1' or rows_only
if n_history > 0 and not write_table then
  return invalid('ARGV', 'n_history', ARGV[19], 'a history entry written with the table')
end
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
local generation, current = -1, 0
if write_table then
  local stored_floor = 0
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
local rows_at = 26
local removed_at = rows_at + row_width * n_rows
local set_at = removed_at + 2 * n_removed
local del_at = set_at + 2 * n_set
local sus_at = del_at + n_del
local unsus_at = sus_at + 2 * n_sus
local transit_at = unsus_at + n_unsus
local history_at = transit_at + 2 * n_transit

-- A rows write applies only to the table its plan read: the stored digest
-- is the plan's, the table has the row count stored with it (a field added
-- or removed by anyone else shows), and every row it replaces is as read.
local members_after = 0
if rows_only then
  local stored = meta_type == 'hash' and redis.call('HGET', KEYS[2], 'digest') or false
  if stored ~= ARGV[21] then
    return {-4, version, KEYS[2] .. ' digest'}
  end
  local table_type = type_of(KEYS[1])
  if table_type ~= 'hash' and table_type ~= 'none' then
    return {-4, version, KEYS[1] .. ' type'}
  end
  local members = count(redis.call('HGET', KEYS[2], 'members') or '')
  local rows = table_type == 'hash' and redis.call('HLEN', KEYS[1]) or 0
  if members ~= rows then
    return {-4, version, KEYS[2] .. ' members'}
  end
  members_after = rows - n_removed
  local function holds(member, replaces)
    local row = redis.call('HGET', KEYS[1], member)
    if not row then return replaces == '' end
    return redis.sha1hex(#member .. ':' .. member .. row) == replaces
  end
  for i = rows_at, removed_at - 1, 3 do
    if not holds(ARGV[i], ARGV[i + 2]) then return {-4, version, KEYS[1] .. ' ' .. ARGV[i]} end
    if ARGV[i + 2] == '' then members_after = members_after + 1 end
  end
  for i = removed_at, set_at - 1, 2 do
    if ARGV[i + 1] == '' or not holds(ARGV[i], ARGV[i + 1]) then
      return {-4, version, KEYS[1] .. ' ' .. ARGV[i]}
    end
  end
end
local liveness_type = type_of(KEYS[5])
local suspects_type = type_of(KEYS[6])
local transit_type = type_of(KEYS[7])
local changes_type = n_history > 0 and type_of(KEYS[8]) or 'none'


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
if changes_type ~= 'stream' and changes_type ~= 'none' then
  redis.call('DEL', KEYS[8])
end

-- HSET/HDEL in chunks: Lua's unpack() is limited to a few thousand values.
local CHUNK = 1000
local function apply(cmd, key, first, last, values)
  values = values or ARGV
  local s = first
  while s <= last do
    local e = math.min(s + CHUNK - 1, last)
    redis.call(cmd, key, unpack(values, s, e))
    s = e + 1
  end
end

if write_table then
  local members = n_rows
  if rows_only then
    for i = rows_at, removed_at - 1, 3 do
      redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
    end
    if n_removed > 0 then
      local gone = {}
      for i = removed_at, set_at - 1, 2 do gone[#gone + 1] = ARGV[i] end
      apply('HDEL', KEYS[1], 1, #gone, gone)
    end
    members = members_after
  else
    redis.call('DEL', KEYS[1])
    apply('HSET', KEYS[1], rows_at, removed_at - 1)
  end
  redis.call('HSET', KEYS[2], 'generation', generation, 'digest', ARGV[4],
    'epoch', ARGV[2], 'writer', ARGV[6], 'written_at_ms', ARGV[5], 'members', members,
    'assignment', ARGV[16])
  if ARGV[17] ~= '' then
    redis.call('HSET', KEYS[2], 'last_change', ARGV[17])
  end
  if n_history > 0 then
    local written = '*'
    if rows_only then
      local names, bytes = {}, 0
      for i = rows_at, removed_at - 1, 3 do names[#names + 1] = ARGV[i] end
      for i = removed_at, set_at - 1, 2 do names[#names + 1] = ARGV[i] end
      written = table.concat(names, ',')
      for _, n in ipairs(names) do
        bytes = bytes + #n + 1
        if #names > 1000 or bytes > 65536 or string.find(n, ',', 1, true) then
          written = '*'
          break
        end
      end
    end
    -- pcall: an ACL without XADD (written for an older version) refuses
    -- only this, and refuses it before it writes anything.
    local added = redis.pcall('XADD', KEYS[8], 'MAXLEN', history_kept, '*',
      'generation', decimal(generation), 'previous_generation', decimal(current),
      'at_ms', ARGV[5], 'epoch', ARGV[2], 'writer', ARGV[6], 'rows', written,
      unpack(ARGV, history_at, history_at + 2 * n_history - 1))
    if type(added) == 'table' and added.err then
      redis.call('HSET', KEYS[2], 'history_error', decimal(generation) .. ' XADD: ' .. added.err)
    else
      redis.call('HDEL', KEYS[2], 'history_error')
    end
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
if ARGV[23] ~= '' then
  redis.call('HSET', KEYS[2], 'server', ARGV[23])
else
  redis.call('HDEL', KEYS[2], 'server')
end
if write_transit then
  redis.call('HSET', KEYS[2], 'transit', n_transit)
end
redis.call('HSET', KEYS[2], 'reports', n_reports, 'deadline_max', deadline_max)
if write_table then
  redis.call('PUBLISH', ARGV[7], generation)
end
return {1, generation, version + 1}
