//! A holder's value marked as waited for: how a release learns, in the one
//! command it sends, that nobody waited.
//!
//! A waiter that listens for release notices marks the value of the lock
//! it finds held, in the same step as its check: its attempt
//! ([`scripts::ACQUIRE`](crate::scripts::ACQUIRE), or `ACQUIRE_FENCED`,
//! `MULTI_ACQUIRE`, with its client) and its mark
//! ([`scripts::MARK_WAITING`](crate::scripts::MARK_WAITING)) append to the
//! holder's value, keeping its TTL:
//!
//! | found | becomes | read as |
//! |---|---|---|
//! | `v` | `v\0c` | waited for by client `c` alone |
//! | `v\0c` (marked by `c`) | unchanged | |
//! | `v\0d` (another client) | `v\0d\0` | waited for by several clients |
//! | `v\0d\0` | unchanged | |
//!
//! So the holder's plain compare-and-delete (`DELIFEQ key v`, Valkey 9)
//! deletes exactly when nobody waited, and then publishes nothing: one
//! command per release, as the safe floor sends. Where it answers `0`, the
//! release sends the release script to that node
//! ([`Operation::release`](crate::Operation::release)), which deletes `v` marked or not, and
//! publishes unless only the holder's own client waited (its client tells
//! those itself, `HandOver`).
//!
//! Every script that compares the holder's value takes a marked value as
//! the holder's (extend, release, the fencing token's store, the
//! multi-resource scripts, the semaphore's acquire and withdraw: a
//! semaphore's waiter marks every slot's holder); a plain extend
//! (`SET ... IFEQ v`) does not set a marked value, answers it, and the
//! extension sends the extend script to that node instead
//! ([`Operation::extend`](crate::Operation::extend)). A mark lives as long as the value it
//! marks: a holder that is gone (a key absent) is not marked
//! (`SET ... KEEPTTL` happens only on a value read there), so a mark never
//! creates a lock, and it dies with the lock, released or expired. Values
//! that contain a NUL byte are not lock values
//! ([`LockValue::random`](crate::LockValue::random) gives hex): one passed
//! to a release by value may be read as marked.

/// The byte that starts a mark.
const MARK: u8 = 0;

/// The lock value in `held`, a value read at a lock key, without a mark:
/// what [`status`](crate::LockStatus) and an acquire's "held by" show.
///
/// ```
/// # use redlock_core::waited::unmarked;
/// assert_eq!(unmarked(b"v"), b"v");
/// assert_eq!(unmarked(b"v\0c"), b"v");
/// assert_eq!(unmarked(b"v\0c\0"), b"v");
/// ```
pub fn unmarked(held: &[u8]) -> &[u8] {
    match held.iter().position(|&byte| byte == MARK) {
        Some(end) => &held[..end],
        None => held,
    }
}

/// Whether `held`, a value read at a lock key, is `ours`, marked or not.
///
/// ```
/// # use redlock_core::waited::is_ours;
/// assert!(is_ours(b"v", b"v") && is_ours(b"v\0c", b"v") && is_ours(b"v\0c\0", b"v"));
/// assert!(!is_ours(b"vw", b"v") && !is_ours(b"w\0v", b"v"));
/// ```
pub fn is_ours(held: &[u8], ours: &[u8]) -> bool {
    held.strip_prefix(ours)
        .is_some_and(|rest| rest.is_empty() || rest[0] == MARK)
}
