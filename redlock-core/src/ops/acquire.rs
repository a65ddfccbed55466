//! Acquiring a lock: attempts, quorum decision, release on failure, retries.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand_core::Rng;

mod attempt;
mod failed;
mod fence;
mod leave;
mod machine;
mod waiting;

pub(crate) use fence::floor;
use leave::skipped_by_lock_round;

use crate::ops::machine::{HandOver, Machine, Notice};
use crate::ops::retry::{Next, Notices, Retries};
use crate::quorum::{Round, Tally, remaining, valid_until};
use crate::wire::interpret_acquire;
use crate::{
    AcquireError, Attempts, Command, ConfigError, Key, Lock, LockKind, LockSpec, LockValue, NodeId,
    NodeVote, Reply, Request, Response, RoundId, Settings, Ttl, Votes,
};

/// What an acquisition ([`Operation::acquire`](crate::Operation::acquire)) reports.
#[cfg_attr(feature = "model-check", derive(Clone))]
#[derive(Debug)]
#[must_use = "an acquired lock is held on the nodes until it is released or expires"]
pub enum AcquireEvent {
    /// The lock is ours. Last event.
    Acquired(Lock),
    /// An attempt failed and another will start at `retry_at` at the
    /// latest (a release notice starts one sooner). Its release requests
    /// are already queued.
    AttemptFailed {
        /// Why the attempt failed.
        error: AcquireError,
        /// When the next attempt starts, unless a release notice starts one
        /// before. At the overall deadline, the wait ends the acquisition
        /// ([`AcquireError::DeadlineExceeded`]) instead.
        retry_at: Instant,
    },
    /// No lock; no more attempts. Last event. Its release requests are queued.
    Failed(AcquireError),
}

// One per acquisition, never in a collection: boxing would only add an
// allocation per attempt.
#[allow(clippy::large_enum_variant)]
#[cfg_attr(feature = "model-check", derive(Clone))]
#[derive(Debug)]
enum State {
    Attempting {
        round: Round,
        value: LockValue,
        phase: Phase,
        /// For an extra attempt started by a release notice: the scheduled
        /// retry it jumped ahead of, to wait for again if it fails.
        scheduled: Option<Instant>,
    },
    Waiting {
        until: Instant,
    },
    Done,
}

/// The rounds of one attempt.
#[cfg_attr(feature = "model-check", derive(Clone))]
#[derive(Debug)]
enum Phase {
    /// Setting the key on the nodes (and, fenced, reading their counters).
    Lock,
    /// Fenced only: storing the token on a quorum before handing it out.
    Fence {
        token: u64,
        lock_started: Instant,
        lock_votes: Votes,
        /// The fenced lock's keys (a permit's: its slot and its counter).
        keys: Arc<[Key]>,
    },
}

/// One blocking or non-blocking acquire of one resource, as a state machine.
///
/// # Calling order
///
/// 1. [`Operation::acquire`](crate::Operation::acquire) starts the first attempt at `now`.
/// 2. Drain `poll_request` and send every request (the
///    first attempt's are N script calls, one per node, to send concurrently).
/// 3. Feed each answer to `handle_reply`, in any order;
///    at `poll_timeout` call
///    `handle_timeout`.
/// 4. After each `handle_*`, drain `poll_request` again (a failed attempt queues
///    its releases, a retry its new requests) and `poll_event`.
/// 5. Stop after [`AcquireEvent::Acquired`] or [`AcquireEvent::Failed`].
///    Requests still queued then are releases that must be sent.
///
/// If the caller gives up early (a cancelled future), it calls
/// `abandon` and sends the release requests it queues.
///
/// The decision comes as soon as it is certain: a quorum of yes votes with
/// validity left, or enough no votes and failures that a quorum is impossible.
/// An answer handled at or after the overall deadline
/// ([`Config::acquire_deadline`](crate::Config::acquire_deadline), or the
/// call's own [`Attempts::Within`]) decides
/// nothing but the end: [`AcquireError::DeadlineExceeded`], and the attempt's
/// keys are released, even if that answer completed a quorum.
/// Replies from earlier attempts and replies after the decision are ignored.
///
/// ```
/// use std::time::{Duration, Instant};
/// use rand::{SeedableRng, rngs::StdRng};
/// use redlock_core::{AcquireEvent, Acquisition, Attempts, Config, Machine, Reply, Response};
///
/// let settings = std::sync::Arc::new(Config::new(["a", "b", "c"]).validate().unwrap());
/// let start = Instant::now(); // the adapter's clock; tests use any Instant
/// let mut acquire = Acquisition::new(
///     settings.clone(), b"report", settings.default_ttl(), Attempts::Once, start, StdRng::seed_from_u64(1),
/// );
/// let requests: Vec<_> = std::iter::from_fn(|| acquire.poll_request()).collect();
/// assert_eq!(requests.len(), 3);
/// // Two of three nodes say yes after 1 ms: the lock is ours, no need to wait for the third.
/// let now = start + Duration::from_millis(1);
/// acquire.handle_reply(Reply::to(&requests[0], Ok(Response::Int(1))), now);
/// acquire.handle_reply(Reply::to(&requests[2], Ok(Response::Int(1))), now);
/// match acquire.poll_event() {
///     Some(AcquireEvent::Acquired(lock)) => {
///         // validity = 10 s TTL - 1 ms elapsed - (100 ms + 2 ms) drift
///         assert_eq!(lock.validity(now), Duration::from_millis(9_897));
///     }
///     other => panic!("expected the lock, got {other:?}"),
/// }
/// ```
#[cfg_attr(feature = "model-check", derive(Clone))]
#[derive(Debug)]
#[cfg_attr(not(feature = "simulation"), allow(unreachable_pub))]
pub struct Acquisition<R> {
    settings: Arc<Settings>,
    ttl: Ttl,
    drift: Duration,
    node_timeout: Duration,
    rng: R,
    retries: Retries,
    /// The script keys, the lock key first.
    keys: Arc<[Key]>,
    /// The keys of the lock round's acquire: [`keys`](Self::keys), and for
    /// a fenced semaphore its slots' counters after them.
    acquire_keys: Arc<[Key]>,
    kind: LockKind,
    fenced: bool,
    /// Fencing counters the nodes returned in the current lock round.
    counters: Vec<Option<u64>>,
    state: State,
    requests: VecDeque<Request>,
    events: VecDeque<AcquireEvent>,
    last_error: Option<AcquireError>,
    /// Release notices since the current attempt started.
    notices: Notices,
    /// Fair locks: failed attempts in a row that found the key free on some
    /// master but another waiter's turn there, held by no quorum, and us no
    /// nearer the head than the attempt before.
    stalls: u32,
    /// Fair locks: our place in each master's queue (from 1) as the current
    /// attempt's answers say, where the key was free but not ours.
    positions: Vec<Option<u64>>,
    /// Fair locks: our best place in the last attempt that was told one.
    best_position: Option<u64>,
    /// Fair locks: the highest score a master gave us in the current
    /// attempt (see the `ticket` of [`LockKind::Fair`]).
    scores: u64,
    /// Until when this acquisition's last mark, or the client's mark it
    /// relies on (`queue_behind`), surely lives on the nodes it reached
    /// ([`Command::MarkWaiting`], see `mark_waiting`).
    marked_until: Option<Instant>,
    /// The current attempt went without a mark of its own.
    unmarked: bool,
    /// Semaphores: the slot each master granted in the current attempt.
    slots: Vec<Option<u64>>,
    /// Semaphores: the number of permits a master of the current attempt
    /// keeps, where it is not ours (it refused).
    theirs: Option<u32>,
    /// Semaphores: the semaphore's own key (the prefix and its name), for
    /// the error that names it.
    semaphore: Option<Key>,
    /// The release channels on which the withdraws of an acquisition that
    /// ended during an attempt hand over, until given
    /// ([`Machine::poll_hand_over`]).
    hand_over: Option<Vec<Key>>,
}

/// Fair locks ([`LockSpec::Fair`]): after this many attempts in a row that
/// failed on a key no quorum held, with some master saying another waiter's
/// turn and our place in the queues no better than the attempt before, an
/// acquisition takes the lock by the plain rule until an attempt finds it
/// held by a quorum or our place improves. The queue does not move then:
/// the masters' queues disagree (each head is first on too few masters), or
/// their head died; either way the waiters would wait for nothing. A queue
/// that moves (each release serves its head, and we come nearer) never
/// counts, however many releases we wait through.
#[cfg_attr(not(feature = "simulation"), allow(unreachable_pub))]
pub const FAIR_PATIENCE: u32 = 3;

#[cfg_attr(not(feature = "simulation"), allow(unreachable_pub))]
impl<R: Rng> Acquisition<R> {
    #[cfg(feature = "simulation")]
    /// Starts the first attempt at `now`. `rng` supplies the lock values and the
    /// retry jitter: a CSPRNG in production, a seeded one in tests.
    pub fn new(
        settings: Arc<Settings>,
        resource: &[u8],
        ttl: Ttl,
        attempts: Attempts,
        now: Instant,
        rng: R,
    ) -> Self {
        Self::start(
            settings,
            LockSpec::Exclusive(resource),
            ttl,
            attempts,
            now,
            rng,
        )
        .expect("an exclusive lock on one resource is always a valid spec")
    }

    #[cfg(feature = "simulation")]
    /// Like [`new`](Self::new), for a lock that comes with a fencing token.
    ///
    /// Each attempt then takes two rounds. The first sets the key and reads
    /// every node's fencing counter for the resource; the token is the largest
    /// counter among the nodes that granted, plus one. The second stores
    /// `max(counter, token)` on the nodes where the key is still ours
    /// ([`scripts::STORE_TOKEN`](crate::scripts::STORE_TOKEN)), and the lock
    /// is handed out only once a quorum stored it.
    ///
    /// Why tokens only grow: a later holder's quorum shares at least one node
    /// with the quorum that stored this token, and it could set its key there
    /// only after ours was gone, so after the store: it reads a counter of at
    /// least this token and hands out a larger one. Like the lock itself this
    /// assumes nodes keep their data: a node that restarts empty forgets its
    /// counter (run Redis with AOF and `appendfsync always`).
    pub fn fenced(
        settings: Arc<Settings>,
        resource: &[u8],
        ttl: Ttl,
        attempts: Attempts,
        now: Instant,
        rng: R,
    ) -> Self {
        Self::start(
            settings,
            LockSpec::Fenced(resource),
            ttl,
            attempts,
            now,
            rng,
        )
        .expect("a fenced lock on one resource is always a valid spec")
    }

    /// Starts acquiring any kind of lock: read, write, reentrant,
    /// multi-resource, exclusive, fenced. Fails only for a spec that cannot
    /// work (a multi-resource lock of no resource, an empty owner id; on
    /// settings with a Redis Cluster node, keys in different hash slots:
    /// [`ConfigError::CrossSlot`], see
    /// [`Settings::with_cluster_nodes`]) and for a zero wait limit
    /// ([`Attempts::Within`]: [`ConfigError::ZeroDeadline`]). Nothing is
    /// sent for a refused spec.
    pub fn with_spec(
        settings: Arc<Settings>,
        spec: LockSpec<'_>,
        ttl: Ttl,
        attempts: Attempts,
        now: Instant,
        rng: R,
    ) -> Result<Self, ConfigError> {
        if attempts == Attempts::Within(Duration::ZERO) {
            return Err(ConfigError::ZeroDeadline);
        }
        let this = Self::start(settings, spec, ttl, attempts, now, rng)?;
        // Refused before a request is polled: nothing was sent.
        this.settings.check_slots(&this.keys)?;
        Ok(this)
    }

    fn start(
        settings: Arc<Settings>,
        spec: LockSpec<'_>,
        ttl: Ttl,
        attempts: Attempts,
        now: Instant,
        rng: R,
    ) -> Result<Self, ConfigError> {
        let (keys, mut kind) = settings.lock_keys(spec, ttl)?;
        if let (LockKind::Write { readers_hold_off }, Attempts::Once) = (&mut kind, attempts) {
            // A writer that will not retry must not hold readers off.
            *readers_hold_off = Ttl::NONE;
        }
        let fenced = matches!(spec, LockSpec::Fenced(_) | LockSpec::FencedSemaphore { .. });
        let acquire_keys = match spec {
            LockSpec::FencedSemaphore { .. } => {
                crate::ops::semaphore::with_counters(&settings, &keys)
            }
            _ => keys.clone(),
        };
        let mut rng = rng;
        if let LockKind::Fair { waiter, .. } = &mut kind {
            *waiter = LockValue::random(&mut rng, 10).as_str().into();
        }
        let retries = Retries::new(&settings, attempts, now);
        let notices = Notices::new(&settings, now);
        let semaphore = match spec {
            LockSpec::Semaphore { resource, .. } | LockSpec::FencedSemaphore { resource, .. } => {
                Some(settings.key(resource))
            }
            _ => None,
        };
        let mut this = Self {
            keys,
            acquire_keys,
            kind,
            fenced,
            counters: Vec::new(),
            drift: settings.drift(ttl),
            node_timeout: settings.node_timeout_for(ttl),
            settings,
            ttl,
            rng,
            retries,
            state: State::Done,
            requests: VecDeque::new(),
            events: VecDeque::new(),
            last_error: None,
            notices,
            stalls: 0,
            positions: Vec::new(),
            scores: 0,
            marked_until: None,
            hand_over: None,
            unmarked: false,
            best_position: None,
            slots: Vec::new(),
            theirs: None,
            semaphore,
        };
        this.start_attempt(now, None);
        Ok(this)
    }

    /// The key being locked (the first one, for a multi-resource lock).
    pub fn key(&self) -> &Key {
        &self.keys[0]
    }

    #[cfg(feature = "simulation")]
    /// Every key the lock's scripts touch (the lock keys first).
    pub fn keys(&self) -> &Arc<[Key]> {
        &self.keys
    }

    /// The kind of lock being acquired.
    pub fn kind(&self) -> &LockKind {
        &self.kind
    }

    /// Attempts started so far.
    pub fn attempts(&self) -> u32 {
        self.retries.started()
    }

    #[cfg(feature = "simulation")]
    /// The id of the attempt in flight, if one is.
    pub fn current_attempt(&self) -> Option<RoundId> {
        match &self.state {
            State::Attempting { round, .. } => Some(round.id),
            _ => None,
        }
    }
}
