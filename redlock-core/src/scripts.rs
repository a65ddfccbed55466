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
/// - bulk string: the key is held, by the value returned (which may be ours
///   only if the same value was sent twice, which the core never does);
/// - error `WRONGTYPE ...`: the key exists and is not a string.
pub const ACQUIRE: &str = r#"local held = redis.call('GET', KEYS[1])
if held then
  return held
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
