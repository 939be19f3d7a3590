-- The only writer of the matching table: a fenced, atomic replace.
-- KEYS: table, meta, epoch, lease, liveness
-- ARGV: token, epoch, generation_floor, digest, now_ms, holder_id, channel,
--       write_table (0|1), n_rows, n_health_set, n_health_del,
--       then n_rows (member, units) pairs, n_health_set (member, state) pairs,
--       and n_health_del member names.
-- Returns {1, generation} (generation -1 when only liveness was written),
-- or {0, reason} when the caller no longer holds the lease: Redis itself
-- rejects a stale holder's write.
if redis.call('GET', KEYS[4]) ~= ARGV[1] then
  return {0, 'lease'}
end
if redis.call('GET', KEYS[3]) ~= ARGV[2] then
  return {0, 'epoch'}
end

-- The metadata and liveness hashes are ours and derived: a wrong type (an
-- operator's mistake) is reset here, so the writes below cannot fail halfway.
-- The table itself is deleted before it is written, whatever its type.
for _, key in ipairs({KEYS[2], KEYS[5]}) do
  local t = redis.call('TYPE', key).ok
  if t ~= 'hash' and t ~= 'none' then
    redis.call('DEL', key)
  end
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

local n_rows, n_set, n_del = tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])
local rows_at = 12
local set_at = rows_at + 2 * n_rows
local del_at = set_at + 2 * n_set

local generation = -1
if ARGV[8] == '1' then
  redis.call('DEL', KEYS[1])
  apply('HSET', KEYS[1], rows_at, set_at - 1)
  local current = tonumber(redis.call('HGET', KEYS[2], 'generation') or '0')
  generation = math.max(current, tonumber(ARGV[3])) + 1
  redis.call('HSET', KEYS[2], 'generation', generation, 'digest', ARGV[4],
    'epoch', ARGV[2], 'writer', ARGV[6], 'written_at_ms', ARGV[5], 'members', n_rows)
end
apply('HSET', KEYS[5], set_at, del_at - 1)
apply('HDEL', KEYS[5], del_at, del_at + n_del - 1)
if generation ~= -1 then
  redis.call('PUBLISH', ARGV[7], generation)
end
return {1, generation}
