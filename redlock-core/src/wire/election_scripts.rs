//! The scripts of an election ([`Term`](crate::Term), [`Operation::read_leader`](crate::Operation::read_leader)),
//! re-exported from [`scripts`](crate::scripts).
//!
//! An election is a fenced lock on its name: the lock key holds the
//! leader's value (its id), the fencing counter its term. The leader record
//! `{<name>}\0leader` (no TTL, like the counter) holds
//! `<term>\0<id>\0<value>`: the term in decimal, the leader's lock value,
//! then whatever value it proclaimed, which may hold any bytes.

/// Write a leader's value under its term on one node.
///
/// - `KEYS[1]`: the lock key. `KEYS[2]`: its fencing counter. `KEYS[3]`:
///   the leader record (`Settings::leader_key`).
/// - `ARGV[1]`: our lock value (the leader's id). `ARGV[2]`: our term.
///   `ARGV[3]`: the value to proclaim.
///
/// Returns:
/// - integer `1`: the lock key holds our value (marked as waited for or
///   not, [`waited`](crate::waited)), no higher term is stored in
///   the counter or the record: the record is now ours;
/// - integer `0`: the lock key holds another value or none; nothing changed;
/// - integer `-1`: a higher term is stored; nothing changed;
/// - error `WRONGTYPE ...`: the lock key exists and is not a string.
pub const PROCLAIM: &str = r#"local held = redis.call('GET', KEYS[1])
if held ~= ARGV[1] and not (held and string.sub(held, 1, #ARGV[1] + 1) == ARGV[1] .. '\0') then
  return 0
end
local term = tonumber(ARGV[2])
local counter = tonumber(redis.pcall('GET', KEYS[2]) or '0') or 0
if counter > term then
  return -1
end
local record = redis.pcall('GET', KEYS[3])
if type(record) == 'string' then
  local stored = tonumber(string.match(record, '^(%d+)')) or 0
  if stored > term then
    return -1
  end
end
redis.call('SET', KEYS[3], ARGV[2] .. '\0' .. ARGV[1] .. '\0' .. ARGV[3])
return 1
"#;

/// Read who holds an election on one node, atomically: sent by a
/// [`Operation::read_leader`](crate::Operation::read_leader). Not a vote; writes nothing.
///
/// - `KEYS[1]`: the lock key. `KEYS[2]`: its fencing counter. `KEYS[3]`:
///   the leader record.
///
/// Returns array `{value, counter, record}`: the lock key's value (nil: no
/// key), the counter and the record (each nil unless it is a string).
pub const READ_LEADER: &str = r#"local value = redis.call('GET', KEYS[1])
local counter = redis.pcall('GET', KEYS[2])
if type(counter) ~= 'string' then counter = false end
local record = redis.pcall('GET', KEYS[3])
if type(record) ~= 'string' then record = false end
return {value, counter, record}
"#;
