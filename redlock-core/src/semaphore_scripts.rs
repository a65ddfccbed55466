//! The scripts of a counting semaphore ([`LockSpec::Semaphore`](crate::LockSpec::Semaphore)),
//! re-exported from [`scripts`](crate::scripts).
//!
//! A semaphore of k permits is k slot locks (`{<name>}\0permit0` ..
//! `{<name>}\0permit<k-1>`, one hash slot). A permit is one slot held on a
//! quorum, like any lock; these two scripts only let one round trip try
//! every slot of a node and undo it. Beside the slots, the permits key
//! (`{<name>}\0permits`) keeps k on each node, so that users who count
//! different permits are refused instead of holding side by side.

/// Take one free slot of a semaphore on one node.
///
/// - `KEYS`: the k slot keys, in slot order; for a fenced semaphore, then
///   the k slots' fencing counters, in the same order (each the slot key's
///   [`Settings::fencing_key`](crate::Settings::fencing_key)); last, the
///   semaphore's permits key ([`Settings::permits_key`](crate::Settings::permits_key)),
///   which keeps its k.
/// - `ARGV[1]`: our lock value. `ARGV[2]`: the TTL in milliseconds.
///   `ARGV[3]`: the slot to try first (from 0); the others follow in
///   order, wrapping around. Every node of one attempt gets the same one,
///   so nodes that agree on which slots are taken grant the same slot.
///   `ARGV[4]`: k, in decimal.
///
/// The permits key decides first: holding another k, the node refuses and
/// writes nothing, so that users who count different permits never hold
/// slots side by side. A grant writes k there (or keeps it), with a TTL
/// no shorter than it had nor than the slot's: it outlives every slot it
/// covers, since an extension of a permit keeps it so too
/// ([`EXTEND`](crate::scripts::EXTEND) with the permit's k).
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
/// - `{0, theirs}`: the node keeps another k for this semaphore, `theirs`
///   (0 if what it keeps is not a number); nothing was written;
/// - bulk string: every slot is held; the first 64 bytes of the holder of
///   the slot tried first;
/// - error `WRONGTYPE ...`: the permits key, or a slot key read before a
///   free one, is not a string, or (fenced) the granted slot's counter is
///   not (nothing was written then: every read comes before the first
///   write).
pub const SEMAPHORE_ACQUIRE: &str = r#"local n = tonumber(ARGV[4])
local permits = KEYS[#KEYS]
local kept = redis.call('GET', permits)
if kept and kept ~= ARGV[4] then return {0, tonumber(kept) or 0} end
local start = tonumber(ARGV[3]) % n
local function grant(slot)
  local granted = {1, slot}
  if #KEYS > n + 1 then
    local now = redis.call('TIME')
    granted = {1, slot, tonumber(redis.call('GET', KEYS[n + slot + 1]) or '0') or 0,
      tonumber(now[1]) * 1000000 + tonumber(now[2])}
  end
  local ttl = math.max(redis.call('PTTL', permits), tonumber(ARGV[2]))
  redis.call('SET', permits, ARGV[4], 'PX', ttl)
  return granted
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
/// attempt may have set. The permits key goes too when no slot is left
/// held on the node and it keeps our k: nothing of the semaphore is left.
///
/// - `KEYS`: the k slot keys, then the semaphore's permits key.
///   `ARGV[1]`: our lock value.
///
/// Returns `1` if some slot held our value (now deleted), `-1` if none did.
/// Every slot is read before the first delete. Our value counts marked as
/// waited for too ([`waited`](crate::waited)): a waiter of any client
/// marks every slot's holder, ours while this withdraw is on its way
/// (without this, the marked value stayed until its TTL).
pub const SEMAPHORE_WITHDRAW: &str = r#"local n = #KEYS - 1
local ours, others = {}, false
for i = 1, n do
  local held = redis.call('GET', KEYS[i])
  if held == ARGV[1] or (held and string.sub(held, 1, #ARGV[1] + 1) == ARGV[1] .. '\0') then
    ours[#ours + 1] = KEYS[i]
  elseif held then
    others = true
  end
end
local gone = not others and redis.call('GET', KEYS[#KEYS]) == tostring(n)
if gone then ours[#ours + 1] = KEYS[#KEYS] end
if #ours > 0 then redis.call('DEL', unpack(ours)) end
if #ours == 0 or (gone and #ours == 1) then return -1 end
return 1
"#;
