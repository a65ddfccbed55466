//! The Lua scripts each node runs, as text, with their contracts.
//!
//! Every operation on a node is one script call (`EVALSHA` once the script is
//! loaded), so each node does its check-and-write atomically and each
//! operation costs one round trip. The scripts read the key with `GET` first:
//! on a key of another type `GET` raises Redis' `WRONGTYPE` error, which the
//! adapter reports as [`NodeErrorKind::WrongType`](crate::NodeErrorKind::WrongType)
//! instead of mistaking the key for someone else's lock.
//!
//! All three scripts take one key and only touch that key, so they also work
//! where keys are routed by hash slot.

/// Acquire one node.
///
/// - `KEYS[1]`: the lock key.
/// - `ARGV[1]`: our lock value. `ARGV[2]`: the TTL in milliseconds.
///
/// Returns:
/// - integer `1`: the key was absent and is now ours with that TTL;
/// - bulk string: the key is held by another value; its first 64 bytes are
///   returned (a lock value is 40 hex characters; a foreign string at the key
///   must not travel over the wire whole);
/// - error `WRONGTYPE ...`: the key exists and is not a string.
pub const ACQUIRE: &str = r#"local held = redis.call('GET', KEYS[1])
if held then
  return string.sub(held, 1, 64)
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"#;

/// Extend our lock on one node.
///
/// - `KEYS[1]`: the lock key.
/// - `ARGV[1]`: our lock value. `ARGV[2]`: the new TTL in milliseconds.
///
/// Returns:
/// - integer `1`: the key held our value; its TTL is now `ARGV[2]`;
/// - integer `2`: the key was absent (the node restarted empty or expired it
///   early) and was set again to our value with that TTL. A key held by
///   another value is never touched, so this cannot take a lock from anyone;
/// - integer `0`: the key is held by another value, left as it is;
/// - error `WRONGTYPE ...`: the key exists and is not a string.
pub const EXTEND: &str = r#"local held = redis.call('GET', KEYS[1])
if held == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if held then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 2
"#;

/// Release our lock on one node (compare-and-delete).
///
/// - `KEYS[1]`: the lock key.
/// - `ARGV[1]`: our lock value.
///
/// Returns:
/// - integer `1`: the key held our value and is deleted;
/// - integer `0`: the key is held by another value, left as it is;
/// - integer `-1`: the key is absent (expired, or never set on this node);
/// - error `WRONGTYPE ...`: the key exists and is not a string.
pub const RELEASE: &str = r#"local held = redis.call('GET', KEYS[1])
if held == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
if held then
  return 0
end
return -1
"#;

/// Acquire one node and read its fencing counter (fenced locks).
///
/// - `KEYS[1]`: the lock key. `KEYS[2]`: the resource's fencing counter
///   (see [`Settings::fencing_key`](crate::Settings::fencing_key)).
/// - `ARGV[1]`: our lock value. `ARGV[2]`: the TTL in milliseconds.
///
/// Returns:
/// - array `{1, counter}`: the key was absent and is now ours; `counter` is the
///   node's fencing counter (0 if it never had one);
/// - bulk string: the key is held by another value (its first 64 bytes);
/// - error `WRONGTYPE ...`: a key exists and is not a string.
///
/// The counter key has no TTL: it must outlive every lock of the resource.
pub const ACQUIRE_FENCED: &str = r#"local held = redis.call('GET', KEYS[1])
if held then
  return string.sub(held, 1, 64)
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
local counter = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
return {1, counter}
"#;

/// Store a fencing token on one node where we hold the lock.
///
/// - `KEYS[1]`: the lock key. `KEYS[2]`: the fencing counter.
/// - `ARGV[1]`: our lock value. `ARGV[2]`: the token.
///
/// Returns:
/// - integer `1`: the key holds our value; the counter is now
///   `max(counter, token)`;
/// - integer `0`: the key is held by another value; nothing changed;
/// - integer `-1`: the key is absent (expired); nothing changed;
/// - error `WRONGTYPE ...`: a key exists and is not a string.
pub const STORE_TOKEN: &str = r#"local held = redis.call('GET', KEYS[1])
if held == ARGV[1] then
  local counter = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
  local token = tonumber(ARGV[2])
  if token > counter then
    redis.call('SET', KEYS[2], ARGV[2])
  end
  return 1
end
if held then
  return 0
end
return -1
"#;

/// For a protected resource kept in Redis: accept a write only with a token at
/// least as large as any seen before (fencing on the resource's side).
///
/// - `KEYS[1]`: where the resource keeps the highest token it accepted.
/// - `ARGV[1]`: the writer's token.
///
/// Returns integer `1` when the token is accepted (and recorded), `0` when it
/// is stale: a writer with a larger token came first, so this writer's lock
/// must have expired. Run the write itself in the same script, or guard it
/// with this check in a `MULTI`/`WATCH` transaction.
pub const CHECK_TOKEN: &str = r#"local highest = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
local token = tonumber(ARGV[1])
if token < highest then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1])
return 1
"#;
