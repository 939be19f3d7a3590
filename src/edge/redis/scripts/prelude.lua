-- Prepended to every script of the distributor (see `edge/redis/scripts.rs`): the
-- checks each script makes on what it reads, before its first write. Redis
-- does not roll a script back on a runtime error, so a script must never
-- reach an error after it has written something.
--
-- Every number a script stores is an integer below 2^53 (larger ones lose
-- precision in Lua's doubles and in JSON readers), kept as decimal text.
local MAX_SAFE = 9007199254740992

-- {-2, key, field, value, expected}: a stored value (or an argument, key
-- 'ARGV') that a script refuses to use. The caller turns it into an error
-- naming the key and the value.
local function invalid(key, field, value, expected)
  return {-2, key, field or '', value or '', expected}
end

-- {-3, key, actual type, expected type}: a key of the wrong Redis type.
local function wrong_type(key, actual, expected)
  return {-3, key, actual, expected}
end

-- The integer held by `s` when it is canonical decimal text in 0..2^53-1,
-- else nil.
local function count(s)
  if type(s) ~= 'string' or #s == 0 or #s > 16 or not string.match(s, '^%d+$') then
    return nil
  end
  local n = tonumber(s)
  if n >= MAX_SAFE then
    return nil
  end
  return n
end

local COUNT = 'an integer in 0..2^53-1'

-- Whether `s` names a Redis connection as the lease record keeps it:
-- '<client id>' or '<client id>@<run id>' (40 hex digits).
local function connection(s)
  if type(s) ~= 'string' then return false end
  local id, run = string.match(s, '^(%d+)@(%x+)$')
  if id then return count(id) ~= nil and #run == 40 end
  return count(s) ~= nil
end

local CONNECTION = "'<client id>' or '<client id>@<run id>'"

-- A count as decimal text. Lua's tostring() writes 1e14 and above in
-- exponent form ("1.2345678901234e+14"), which no reader parses back.
local function decimal(n)
  return string.format('%d', n)
end

-- Redis' TYPE of a key, as a string.
local function type_of(key)
  return redis.call('TYPE', key).ok
end

-- The fencing check of a holder's write, before anything else: {0, 'lease'}
-- unless lease_key holds `token`, {0, 'epoch'} unless epoch_key holds
-- `epoch`, else nil.
local function fenced(lease_key, token, epoch_key, epoch)
  if type_of(lease_key) ~= 'string' or redis.call('GET', lease_key) ~= token then
    return {0, 'lease'}
  end
  if type_of(epoch_key) ~= 'string' or redis.call('GET', epoch_key) ~= epoch then
    return {0, 'epoch'}
  end
  return nil
end

-- The table's content digest: SHA-1 of each field (length-prefixed) and its
-- value, XOR-combined so that field order does not matter. The daemon
-- computes the same in Rust (`MatchingTable::digest`).
local function table_digest(flat)
  local a, b, c, d, e = 0, 0, 0, 0, 0
  local sha, sub, num, xor = redis.sha1hex, string.sub, tonumber, bit.bxor
  for i = 1, #flat, 2 do
    local f = flat[i]
    local h = sha(#f .. ':' .. f .. flat[i + 1])
    a = xor(a, num(sub(h, 1, 8), 16))
    b = xor(b, num(sub(h, 9, 16), 16))
    c = xor(c, num(sub(h, 17, 24), 16))
    d = xor(d, num(sub(h, 25, 32), 16))
    e = xor(e, num(sub(h, 33, 40), 16))
  end
  local hex = bit.tohex
  return hex(a, 8) .. hex(b, 8) .. hex(c, 8) .. hex(d, 8) .. hex(e, 8)
end
