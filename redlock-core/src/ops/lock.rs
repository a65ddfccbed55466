//! A held lock: its keys, value and validity, as the core sees it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::quorum::remaining;
use crate::{Key, LockKind, LockValue, RoundId, Settings, Ttl, Votes};

/// A lock held on a quorum of nodes, as the core sees it: no I/O, just the key,
/// our value and how long the lock stays valid.
///
/// Made by an acquisition ([`Operation::acquire`](crate::Operation::acquire)).
/// Extend it with [`Operation::extend`](crate::Operation::extend) and
/// release it with [`Operation::release`](crate::Operation::release), each
/// an operation of its own.
#[derive(Debug, Clone)]
pub struct Lock {
    pub(crate) settings: Arc<Settings>,
    pub(crate) keys: Arc<[Key]>,
    pub(crate) kind: LockKind,
    pub(crate) value: LockValue,
    pub(crate) ttl: Ttl,
    /// The longest TTL any request of this lock asked a node for (an
    /// extension that failed may still have set it on some): what its
    /// release undoes expires by one of these after its last request.
    pub(crate) longest_ttl: Ttl,
    pub(crate) acquired_at: Instant,
    pub(crate) valid_until: Instant,
    pub(crate) votes: Votes,
    pub(crate) fencing_token: Option<u64>,
    pub(crate) next_round: u64,
    pub(crate) extensions: u64,
    /// Nodes no request of this lock was ever sent to (its acquire skipped
    /// them, known slow, and no extension reached them since): our value
    /// was never there, so a release does not ask them.
    pub(crate) untouched: Vec<crate::NodeId>,
    /// A semaphore's permit: the semaphore's keys (its k slot keys, then
    /// its permits key). Each extension names k so that the masters keep
    /// the permits key (the last of [`keys`](Self::keys) too) alive as
    /// long as the slot, and the release names them all so that the
    /// masters delete it with the last slot held
    /// ([`scripts::SEMAPHORE_RELEASE`](crate::scripts::SEMAPHORE_RELEASE)).
    pub(crate) semaphore: Option<Arc<[Key]>>,
}

impl Lock {
    /// A semaphore's permit: the semaphore's k.
    pub(crate) fn permits(&self) -> Option<u32> {
        let semaphore = self.semaphore.as_ref()?;
        Some(u32::try_from(semaphore.len() - 1).expect("at most MAX_PERMITS slots"))
    }

    /// The locked key (the first one, for a multi-resource lock).
    pub fn key(&self) -> &Key {
        &self.keys[0]
    }

    /// Every key the lock's scripts use: the locked keys, then helper keys
    /// (fencing counter, readers, writer-waiting mark, a permit's
    /// semaphore's permits key).
    pub fn keys(&self) -> &Arc<[Key]> {
        &self.keys
    }

    /// The kind of lock.
    pub fn kind(&self) -> &LockKind {
        &self.kind
    }

    machinery_fn! {
        /// Whether holding it excludes every other holder: any kind but a read
        /// lock. A waiter served such a lock ends its client's turn for it
        /// (`WaitQueue::handle_leave` with
        /// `served`): the next release, its own, is the next waiter's. A
        /// reader served leaves that turn open, since the next may share.
        fn excludes_next(&self) -> bool {
            !matches!(self.kind, LockKind::Read)
        }
    }

    /// Our value on the nodes.
    pub fn value(&self) -> &LockValue {
        &self.value
    }

    /// The TTL of the last successful acquire or extend.
    pub fn ttl(&self) -> Ttl {
        self.ttl
    }

    /// The start of the round that acquired the lock.
    pub fn acquired_at(&self) -> Instant {
        self.acquired_at
    }

    /// The instant the validity ends: start of the last successful round plus
    /// TTL minus drift.
    pub fn valid_until(&self) -> Instant {
        self.valid_until
    }

    /// Validity left at `now`; zero once expired. Never more than the truth as
    /// far as this client's clock can tell.
    pub fn validity(&self, now: Instant) -> Duration {
        remaining(self.valid_until, now).unwrap_or_default()
    }

    /// Whether any validity is left at `now`.
    pub fn is_valid(&self, now: Instant) -> bool {
        remaining(self.valid_until, now).is_some()
    }

    /// Nodes where `report`, of a release started at `started`, found no
    /// value of ours although the node said yes in the round that decided
    /// this lock (a node that answered after the decision is not counted)
    /// and the lock was still valid then: the node lost the key (it restarted empty), or the release ran
    /// there before the acquire it undoes (a broken per-node order). Zero
    /// when all is well; a lock released after its validity ended may find
    /// its keys expired and counts nothing.
    pub fn node_misses(&self, report: &crate::ReleaseReport, started: Instant) -> usize {
        if !self.is_valid(started) {
            return 0;
        }
        self.votes
            .votes()
            .iter()
            .zip(report.votes().votes())
            .filter(|(held, released)| {
                matches!(held, crate::NodeVote::Granted)
                    && matches!(released, crate::NodeVote::Missing)
            })
            .count()
    }

    /// Nodes our value was never sent to: the acquire skipped them (known
    /// slow, see `NodeHealth`) and no extension
    /// reached them since. A release does not ask them.
    #[cfg(feature = "simulation")]
    pub fn untouched(&self) -> &[crate::NodeId] {
        &self.untouched
    }

    /// The votes of the acquiring round.
    pub fn votes(&self) -> &Votes {
        &self.votes
    }

    /// The fencing token, for a lock acquired with
    /// [`Operation::acquire`](crate::Operation::acquire): larger than the token of every earlier holder
    /// of this resource. Pass it to the protected resource with every write
    /// (see [`scripts::CHECK_TOKEN`](crate::scripts::CHECK_TOKEN)).
    pub fn fencing_token(&self) -> Option<u64> {
        self.fencing_token
    }

    /// Successful extensions so far.
    pub fn extensions(&self) -> u64 {
        self.extensions
    }

    /// The settings this lock was taken with.
    pub fn settings(&self) -> &Arc<Settings> {
        &self.settings
    }

    pub(crate) fn next_round(&mut self) -> RoundId {
        // Starts at a random id drawn at acquisition, like round ids.
        self.next_round = self.next_round.wrapping_add(1);
        RoundId(self.next_round)
    }
}
