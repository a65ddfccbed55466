//! The scripts of a counting semaphore ([`LockSpec::Semaphore`](crate::LockSpec::Semaphore)),
//! re-exported from [`scripts`](crate::scripts).
//!
//! A semaphore of k permits is k slot locks (`{<name>}\0permit0` ..
//! `{<name>}\0permit<k-1>`, one hash slot). A permit is one slot held on a
//! quorum, like any lock; these two scripts only let one round trip try
//! every slot of a node and undo it.

/// Take one free slot of a semaphore on one node.
///
/// - `KEYS`: the k slot keys, in slot order; for a fenced semaphore, then
///   the k slots' fencing counters, in the same order (each the slot key's
///   [`Settings::fencing_key`](crate::Settings::fencing_key)).
/// - `ARGV[1]`: our lock value. `ARGV[2]`: the TTL in milliseconds.
///   `ARGV[3]`: the slot to try first (from 0); the others follow in
///   order, wrapping around. Every node of one attempt gets the same one,
///   so nodes that agree on which slots are taken grant the same slot.
///   `ARGV[4]`, fenced only: k.
///
/// Every slot is read, so that a request run twice (a duplicated message)
/// answers with the slot it took the first time instead of taking another;
/// our value counts marked as waited for too ([`waited`](crate::waited):
/// a waiter marks every slot's holder).
///
/// Returns:
/// - `{1, slot}`: that slot (from 0) was free and now holds our value, or
///   already held it; fenced, `{1, slot, counter, clock}` with that slot's
///   fencing counter (0 if it never had one) and the node's clock in
///   microseconds, as [`ACQUIRE_FENCED`](crate::scripts::ACQUIRE_FENCED);
/// - bulk string: every slot is held; the first 64 bytes of the holder of
///   the slot tried first;
/// - error `WRONGTYPE ...`: a slot key read before a free one is not a
///   string, or (fenced) the granted slot's counter is not (nothing was
///   written then: every read comes before the one write).
pub const SEMAPHORE_ACQUIRE: &str = r#"local n = tonumber(ARGV[4]) or #KEYS
local start = tonumber(ARGV[3]) % n
local function grant(slot)
  if n == #KEYS then return {1, slot} end
  local now = redis.call('TIME')
  return {1, slot, tonumber(redis.call('GET', KEYS[n + slot + 1]) or '0') or 0,
    tonumber(now[1]) * 1000000 + tonumber(now[2])}
end
local function ours(held)
  return held == ARGV[1] or (held and string.sub(held, 1, #ARGV[1] + 1) == ARGV[1] .. '\0')
end
local free, first = false, false
for i = 0, n - 1 do
  local slot = (start + i) % n
  local held = redis.call('GET', KEYS[slot + 1])
  if ours(held) then return grant(slot) end
  if not held then
    if not free then free = slot end
  elseif not first then
    first = held
  end
end
if free then
  local granted = grant(free)
  redis.call('SET', KEYS[free + 1], ARGV[1], 'PX', ARGV[2])
  return granted
end
return string.sub(first, 1, 64)
"#;

/// Remove our value from whichever slots of a semaphore hold it on one
/// node, without a release notice: what a failed, abandoned or disagreeing
/// attempt may have set.
///
/// - `KEYS`: the k slot keys. `ARGV[1]`: our lock value.
///
/// Returns `1` if some slot held our value (now deleted), `-1` if none did.
/// Every slot is read before the first delete. Our value counts marked as
/// waited for too ([`waited`](crate::waited)): a waiter of any client
/// marks every slot's holder, ours while this withdraw is on its way
/// (without this, the marked value stayed until its TTL).
pub const SEMAPHORE_WITHDRAW: &str = r#"local ours = {}
for i, key in ipairs(KEYS) do
  local held = redis.call('GET', key)
  if held == ARGV[1] or (held and string.sub(held, 1, #ARGV[1] + 1) == ARGV[1] .. '\0') then
    ours[#ours + 1] = key
  end
end
if #ours == 0 then return -1 end
redis.call('DEL', unpack(ours))
return 1
"#;
