//! The scripts of a counting semaphore ([`LockSpec::Semaphore`](crate::LockSpec::Semaphore)),
//! re-exported from [`scripts`](crate::scripts).
//!
//! A semaphore of k permits is k slot locks (`{<name>}\0permit0` ..
//! `{<name>}\0permit<k-1>`, one hash slot). A permit is one slot held on a
//! quorum, like any lock; the acquire and the withdraw only let one round
//! trip try every slot of a node and undo it. Beside the slots, the permits
//! key (`{<name>}\0permits`) keeps k on each node, so that users who count
//! different permits are refused instead of holding side by side; a
//! permit's release ([`SEMAPHORE_RELEASE`]) deletes it with the last slot
//! held on the node, as the withdraw does.

/// Take one free slot of a semaphore on one node.
///
/// - `KEYS`: the k slot keys, in slot order; for a fenced semaphore, then
///   the k slots' fencing counters, in the same order (each the slot key's
///   `Settings::fencing_key`); last, the
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
/// attempt may have set, or (with a slot to keep) what a won attempt's
/// master not heard from yet set beside the permit. The permits key goes
/// too when no slot is left held on the node and it keeps our k: nothing
/// of the semaphore is left.
///
/// - `KEYS`: the k slot keys, then the semaphore's permits key.
///   `ARGV[1]`: our lock value. `ARGV[2]` (optional): a slot (from 0) to
///   keep: our value stays there (and so does the permits key, a slot
///   being held), and goes from every other slot. Sent by a won attempt to
///   the masters it had not heard from, behind their acquire: a late grant
///   of the permit's slot is kept, a late grant of another slot is not.
///   Without it, our value goes from every slot.
///
/// Returns `1` if some slot held our value (now deleted), `-1` if none did
/// (the kept slot is not counted). Every slot is read before the first
/// delete. Our value counts marked as waited for too
/// ([`waited`](crate::waited)): a waiter of any client marks every slot's
/// holder, ours while this withdraw is on its way (without this, the
/// marked value stayed until its TTL).
pub const SEMAPHORE_WITHDRAW: &str = r#"local n = #KEYS - 1
local keep = ARGV[2] and tonumber(ARGV[2])
local ours, others = {}, false
for i = 1, n do
  local held = redis.call('GET', KEYS[i])
  if held == ARGV[1] or (held and string.sub(held, 1, #ARGV[1] + 1) == ARGV[1] .. '\0') then
    if keep == i - 1 then others = true else ours[#ours + 1] = KEYS[i] end
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

/// Release our permit on one node: delete our slot as
/// [`RELEASE_IF_WAITED`](crate::scripts::RELEASE_IF_WAITED) does (the same
/// compare, the same waiters' marks and release notice), and with it the
/// semaphore's permits key when no slot is left held on the node and it
/// keeps our k: a release leaves nothing of the semaphore behind.
///
/// - `KEYS[1]`: our slot key. `KEYS[2]`: its waiters mark
///   (`Settings::waiters_key` of the slot
///   key). `KEYS[3]`: its others mark. Then the k slot keys of the
///   semaphore, in slot order (ours among them), and last its permits key
///   ([`Settings::permits_key`](crate::Settings::permits_key)). Every key
///   is in the semaphore's hash slot. k is `#KEYS - 4`.
/// - `ARGV[1]`: our lock value. `ARGV[2]`: `1` to publish when a waiter is
///   marked, `0` never to publish (a release without notices). `ARGV[3]`:
///   our client, if it has one.
///
/// Every slot and the permits key are read before the first write, so a
/// key of another type among them stops it with nothing written. The
/// permits key goes whether or not our slot was still there (expired, or
/// never set on this node): what decides is that no slot is held now.
/// Our value counts marked as waited for too ([`waited`](crate::waited)).
///
/// Returns what [`RELEASE_IF_WAITED`](crate::scripts::RELEASE_IF_WAITED)
/// returns (the permits key's fate is not told):
/// - `1`: our slot was deleted, and no waiter of another client is marked
///   (nothing published);
/// - `3`: our slot was deleted, a waiter of another client may be marked,
///   and a notice was published on `<slot key>\0released`;
/// - `2`: the same, but the server refused the `PUBLISH`;
/// - `0`: our slot is held by another value, left as it is (and so is the
///   permits key: a slot is held);
/// - `-1`: our slot is absent;
/// - error `WRONGTYPE ...`: a slot key or the permits key exists and is
///   not a string (nothing was written).
pub const SEMAPHORE_RELEASE: &str = r#"local n = #KEYS - 4
local held = redis.call('GET', KEYS[1])
local ours = held == ARGV[1] or (held and string.sub(held, 1, #ARGV[1] + 1) == ARGV[1] .. '\0')
local others = held and not ours
for i = 4, n + 3 do
  if KEYS[i] ~= KEYS[1] and redis.call('GET', KEYS[i]) then
    others = true
  end
end
local gone = redis.call('GET', KEYS[#KEYS]) == tostring(n) and not others
if not ours then
  if gone then redis.call('DEL', KEYS[#KEYS]) end
  if held then return 0 end
  return -1
end
local unmarked = true
if ARGV[2] == '1' then
  local mark = redis.pcall('GET', KEYS[2])
  unmarked = not mark or (mark == ARGV[3] and redis.pcall('EXISTS', KEYS[3]) == 0)
end
if gone then
  redis.call('DEL', KEYS[1], KEYS[#KEYS])
else
  redis.call('DEL', KEYS[1])
end
if ARGV[2] ~= '1' then
  return 1
end
if unmarked and (held == ARGV[1] or string.sub(held, #ARGV[1] + 2) == ARGV[3]) then
  return 1
end
if type(redis.pcall('PUBLISH', KEYS[1] .. '\0released', '')) == 'table' then
  return 2
end
return 3
"#;
