//! The scripts of a fair lock ([`LockSpec::Fair`](crate::LockSpec::Fair)),
//! re-exported from [`scripts`](crate::scripts).
//!
//! KEYS = [key, queue, queue expiry]: the key holds the holder's
//! value (a string, as for an exclusive lock); `{<key>}\0queue` is a sorted
//! set of waiter ids scored by their arrival (one more than the last
//! entry's score, or the waiter's ticket if higher: the order of the queue,
//! ties by id, none that clocks could decide); `{<key>}\0queue-expiry`
//! scores the same ids by
//! when their entry dies unless the waiter asks again. Both are in the key's
//! hash slot (`Key::derived`), every call drops the dead entries first, and
//! both keys expire with their last entry (Redis deletes an emptied sorted
//! set), so nothing stays behind a queue that emptied.

/// Acquire a fair lock on one node: granted only to the head of the queue.
///
/// - `ARGV[1]`: our lock value. `ARGV[2]`: the TTL in milliseconds.
///   `ARGV[3]`: our waiter id. `ARGV[4]`: how long our queue entry lives
///   from now, in milliseconds. `ARGV[5]`: `1` to wait for our turn, `0`
///   to take a free key by the plain rule (the bounded fall-back).
///   `ARGV[6]`: our ticket, the highest score a master gave us (`0` for
///   none yet).
///
/// Every call first adds our entry (scored one more than the last entry,
/// or our ticket if that is higher) or renews it (raised to our ticket if
/// that is higher), so masters that saw waiters arrive in different orders
/// come to rank them alike once each has asked with its ticket. The entry
/// stays while we hold the lock: a withdraw (a lost attempt) keeps our
/// place, and the release takes it.
///
/// Returns:
/// - integer `1`: the key was free and we are the head of the live queue,
///   or `ARGV[5]` is `0`: the key is ours;
/// - bulk string: the key is held by another value (its first 64 bytes);
/// - array `{0, position, score}`: the key is free but another waiter is
///   ahead of us; `position` (from 1) and `score` are ours;
/// - error `WRONGTYPE ...`: a key exists with another type.
pub const FAIR_ACQUIRE: &str = r#"local held = redis.call('GET', KEYS[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for _, dead in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)) do
  redis.call('ZREM', KEYS[2], dead)
  redis.call('ZREM', KEYS[3], dead)
end
local ticket = tonumber(ARGV[6])
local score = tonumber(redis.call('ZSCORE', KEYS[2], ARGV[3]))
if not score then
  local tail = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2]
  score = math.max((tonumber(tail) or 0) + 1, ticket)
  redis.call('ZADD', KEYS[2], score, ARGV[3])
elseif ticket > score then
  score = ticket
  redis.call('ZADD', KEYS[2], score, ARGV[3])
end
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[4]), ARGV[3])
local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[2], last[2])
redis.call('PEXPIREAT', KEYS[3], last[2])
if held then
  return string.sub(held, 1, 64)
end
if ARGV[5] == '0' or redis.call('ZRANGE', KEYS[2], 0, 0)[1] == ARGV[3] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return {0, redis.call('ZRANK', KEYS[2], ARGV[3]) + 1, score}
"#;

/// Release a fair lock, withdraw a failed attempt, or leave the queue, on
/// one node.
///
/// - `ARGV[1]`: our lock value. `ARGV[2]`: `1` to publish a release notice.
///   `ARGV[3]`: our waiter id. `ARGV[4]`: `0` to keep our place in the queue
///   (the withdraw of an attempt), `1` to leave it as well (a release), `2`
///   to leave it and leave the lock key alone
///   ([`Command::Leave`](crate::Command::Leave): a winner leaving the queues
///   of the masters that did not grant, where a late grant of ours may
///   still count).
///
/// Returns, with `ARGV[4]` = `0` or `1`, as [`RELEASE`](crate::scripts::RELEASE) does for the lock
/// key (`1`, `2`, `0`, `-1`); with `2`, `1` when our entry was removed and
/// `-1` when there was none. Another waiter's entry is never touched.
pub const FAIR_RELEASE: &str = r#"if ARGV[4] ~= '0' then
  redis.call('ZREM', KEYS[3], ARGV[3])
  local left = redis.call('ZREM', KEYS[2], ARGV[3])
  if ARGV[4] == '2' then
    return left == 1 and 1 or -1
  end
end
local held = redis.call('GET', KEYS[1])
if held == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[2] == '1' and type(redis.pcall('PUBLISH', KEYS[1] .. '\0released', '')) == 'table' then
    return 2
  end
  return 1
end
if held then
  return 0
end
return -1
"#;
