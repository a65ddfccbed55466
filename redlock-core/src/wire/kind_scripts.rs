//! The scripts of the read-write, reentrant and multi-resource locks,
//! with their contracts (see [`scripts`](crate::scripts) for what every
//! script shares).

#[cfg(doc)]
use crate::scripts::{ACQUIRE, EXTEND};

/// Acquire a read lock on one node.
///
/// - `ARGV[1]`: our reader value. `ARGV[2]`: the TTL in milliseconds.
///
/// Returns integer `1` when our reader entry is added; a bulk string when a
/// writer holds the lock (its value, at most 64 bytes) or waits for readers
/// (`writer-waiting`); error `WRONGTYPE ...` when a key has another type.
pub const READ_ACQUIRE: &str = r#"local writer = redis.call('GET', KEYS[1])
if writer then
  return string.sub(writer, 1, 64)
end
if redis.call('GET', KEYS[3]) then
  return 'writer-waiting'
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), ARGV[1])
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[2], last[2])
return 1
"#;

/// Extend a read lock on one node.
///
/// - `ARGV[1]`: our reader value. `ARGV[2]`: the new TTL in milliseconds.
///
/// `ARGV[3]`: restore flag, as for [`EXTEND`].
///
/// Returns `1` when our entry was there and now expires after the TTL, `2`
/// when it was missing (the node restarted empty) and no writer holds the
/// lock, so it was added again, `-1` the same without the restore flag
/// (nothing changed), `0` when it was missing and a writer holds the lock.
pub const READ_EXTEND: &str = r#"local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local code = 1
if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  if redis.call('GET', KEYS[1]) then
    return 0
  end
  if ARGV[3] ~= '1' then
    return -1
  end
  code = 2
end
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), ARGV[1])
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[2], last[2])
return code
"#;

/// Release a read lock on one node: `1` when our entry was removed (and a
/// message published on `<key>\0released`), `-1` when it was already gone.
/// Other readers and writers are never touched.
pub const READ_RELEASE: &str = r#"if redis.call('ZREM', KEYS[2], ARGV[1]) == 1 then
  if ARGV[2] == '1' and type(redis.pcall('PUBLISH', KEYS[1] .. '\0released', '')) == 'table' then
    return 2
  end
  return 1
end
return -1
"#;

/// Acquire the write lock on one node.
///
/// - `ARGV[1]`: our value. `ARGV[2]`: the TTL in milliseconds. `ARGV[3]`: how
///   long new readers are held off while we wait for current readers, in
///   milliseconds (a little more than our retry interval; `0` for a writer
///   that will not retry, which then sets no mark).
///
/// Returns integer `1` when the writer key is ours (and any writer-waiting
/// mark is cleared); a bulk string when another writer holds it (its value,
/// at most 64 bytes) or when readers hold it (`readers`: the writer-waiting
/// mark is then set, so that the readers drain and no new ones start).
pub const WRITE_ACQUIRE: &str = r#"local writer = redis.call('GET', KEYS[1])
if writer then
  return string.sub(writer, 1, 64)
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if redis.call('ZCARD', KEYS[2]) > 0 then
  if tonumber(ARGV[3]) > 0 then
    redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[3])
  end
  return 'readers'
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('DEL', KEYS[3])
return 1
"#;

/// Extend the write lock on one node: `1` extended, `2` re-set where the key
/// was missing and no reader holds the lock (with the restore flag
/// `ARGV[3]`, as for [`EXTEND`]; `-1` without it, nothing changed), `0` held
/// by another writer or by readers (nothing changed).
pub const WRITE_EXTEND: &str = r#"local writer = redis.call('GET', KEYS[1])
if writer == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if writer then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if redis.call('ZCARD', KEYS[2]) > 0 then
  return 0
end
if ARGV[3] ~= '1' then
  return -1
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 2
"#;

// ---------------------------------------------------------------------------
// Reentrant locks. KEYS = [key]: a hash whose field `owner` names the owner
// and which has one field per acquisition value. Counting acquisitions by
// their values (instead of one counter) makes every call idempotent: the
// release of a failed attempt removes only that attempt, even if its acquire
// reply was lost, so a lost reply can never unbalance the count.

/// Acquire a reentrant lock on one node.
///
/// - `ARGV[1]`: this acquisition's value. `ARGV[2]`: the TTL in
///   milliseconds. `ARGV[3]`: the owner id.
///
/// Returns `1` when the key was free or already the owner's (the acquisition
/// is added and the TTL raised to at least `ARGV[2]`); a bulk string (the
/// other owner's id, at most 64 bytes) when another owner holds it; error
/// `WRONGTYPE ...` when the key is not a hash.
pub const REENTRANT_ACQUIRE: &str = r#"local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'none' then
  redis.call('HSET', KEYS[1], 'owner', ARGV[3], ARGV[1], '1')
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end
local owner = redis.call('HGET', KEYS[1], 'owner')
if owner ~= ARGV[3] then
  return string.sub(owner or '?', 1, 64)
end
redis.call('HSET', KEYS[1], ARGV[1], '1')
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
"#;

/// Extend one acquisition of a reentrant lock: `1` extended, `2` restored
/// (the key or our field was missing; only with the restore flag `ARGV[4]`,
/// as for [`EXTEND`], else `-1` and nothing changed), `0` another owner
/// holds it. The whole hash's TTL is raised to at least `ARGV[2]`.
pub const REENTRANT_EXTEND: &str = r#"local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'none' then
  if ARGV[4] ~= '1' then
    return -1
  end
  redis.call('HSET', KEYS[1], 'owner', ARGV[3], ARGV[1], '1')
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 2
end
if kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[3] then
  return 0
end
local code = 1
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  if ARGV[4] ~= '1' then
    return -1
  end
  redis.call('HSET', KEYS[1], ARGV[1], '1')
  code = 2
end
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return code
"#;

/// Release one acquisition of a reentrant lock: `1` removed (the key is
/// deleted with the last acquisition, and a message published on
/// `<key>\0released`), `-1` already gone, `0` another owner
/// holds the key (nothing changed).
pub const REENTRANT_RELEASE: &str = r#"local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'none' then
  return -1
end
if kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[3] then
  return 0
end
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then
  return -1
end
if redis.call('HLEN', KEYS[1]) <= 1 then
  redis.call('DEL', KEYS[1])
  if ARGV[2] == '1' and type(redis.pcall('PUBLISH', KEYS[1] .. '\0released', '')) == 'table' then
    return 2
  end
end
return 1
"#;

// ---------------------------------------------------------------------------
// Multi-resource locks. KEYS = every resource's key (sorted, no repeats):
// all are set to the same value at once, or none. Each key is an ordinary
// exclusive lock key, so a multi-resource lock and a single lock on one of
// its resources exclude each other.

/// Acquire every key on one node, or none: `1` all set; a bulk string (the
/// first holder's value, at most 64 bytes) when any key is held, which a
/// waiter's attempt (its client in `ARGV[3]`) marks as waited for, as
/// [`ACQUIRE`] does.
pub const MULTI_ACQUIRE: &str = r#"for _, key in ipairs(KEYS) do
  local held = redis.call('GET', key)
  if held then
    if ARGV[3] then
      local tag = string.match(held, '%z([^%z]*)$')
      if not tag or (tag ~= '' and tag ~= ARGV[3]) then
        redis.call('SET', key, held .. '\0' .. (tag and '' or ARGV[3]), 'KEEPTTL')
      end
    end
    return string.sub(held, 1, 64)
  end
end
for _, key in ipairs(KEYS) do
  redis.call('SET', key, ARGV[1], 'PX', ARGV[2])
end
return 1
"#;

/// Extend every key on one node: `1` all were ours and are extended, `2` some
/// were missing and were set again (with the restore flag `ARGV[3]`, as for
/// [`EXTEND`]; `-1` without it, and nothing changed), `0` some key is held
/// by another value (nothing changed).
pub const MULTI_EXTEND: &str = r#"local function ours(held)
  return held == ARGV[1] or (held and string.sub(held, 1, #ARGV[1] + 1) == ARGV[1] .. '\0')
end
local missing = false
for _, key in ipairs(KEYS) do
  local held = redis.call('GET', key)
  if held and not ours(held) then
    return 0
  end
  if not held then
    missing = true
  end
end
if missing and ARGV[3] ~= '1' then
  return -1
end
local code = 1
for _, key in ipairs(KEYS) do
  if ours(redis.call('GET', key)) then
    redis.call('PEXPIRE', key, ARGV[2])
  else
    redis.call('SET', key, ARGV[1], 'PX', ARGV[2])
    code = 2
  end
end
return code
"#;

/// Release every key holding our value on one node (publishing on
/// `<key>\0released` for each): `1` when at least one was deleted, `0` when none was ours but some are held by others, `-1` when
/// all are gone. Keys held by others are never touched.
pub const MULTI_RELEASE: &str = r#"local released, others, refused = 0, 0, false
for _, key in ipairs(KEYS) do
  local held = redis.call('GET', key)
  if held == ARGV[1] or (held and string.sub(held, 1, #ARGV[1] + 1) == ARGV[1] .. '\0') then
    redis.call('DEL', key)
    if ARGV[2] == '1' and type(redis.pcall('PUBLISH', key .. '\0released', '')) == 'table' then
      refused = true
    end
    released = released + 1
  elseif held then
    others = others + 1
  end
end
if released > 0 then
  return refused and 2 or 1
end
if others > 0 then
  return 0
end
return -1
"#;
