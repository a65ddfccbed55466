//! Acquiring a lock: attempts, quorum decision, release on failure, retries.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand_core::Rng;

use crate::extend::Extension;
use crate::quorum::{Round, Tally, remaining, valid_until};
use crate::release::Release;
use crate::{
    AcquireError, AttemptId, Command, ConfigError, ExtendError, Key, LockKind, LockValue,
    NodeErrorKind, NodeVote, Reply, Request, Response, Settings, Ttl, Votes,
};

/// What to lock, for [`Acquisition::with_spec`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockSpec<'a> {
    /// An exclusive lock on one resource.
    Exclusive(&'a [u8]),
    /// An exclusive lock with a fencing token ([`Acquisition::fenced`]).
    Fenced(&'a [u8]),
    /// A read lock: many readers at once, no writer.
    ///
    /// Policy: a writer that finds readers marks the lock as writer-waiting
    /// on those nodes; new readers are then refused there until the writer
    /// has its lock (or stops retrying and the mark expires, after the retry
    /// interval plus two per-node timeouts). Readers already in finish
    /// normally. So a stream of readers cannot starve a writer, and a writer
    /// waits at most for the readers that came before it.
    Read(&'a [u8]),
    /// The write lock of a read-write lock: one writer, no reader.
    Write(&'a [u8]),
    /// A lock that `owner` may take again while holding it. Each acquisition
    /// has its own value and must be released on its own; the lock is free
    /// once every acquisition is released or expired. The owner id is what
    /// makes acquisitions reentrant, so it must be unique per logical owner
    /// (a job id, a UUID per worker): anyone who knows it can enter.
    Reentrant {
        /// The resource.
        resource: &'a [u8],
        /// The owner id.
        owner: &'a str,
    },
    /// All of these resources at once, atomically on each node, or none.
    /// Each resource's key is an ordinary exclusive lock key, so a
    /// multi-resource lock excludes single locks on any of its resources.
    Multi(&'a [&'a [u8]]),
}

/// How many attempts an [`Acquisition`] may make.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attempts {
    /// One attempt, no retry (a `try_lock`).
    Once,
    /// The first attempt and up to [`RetryConfig::count`](crate::RetryConfig::count)
    /// retries, within the acquire deadline if one is set.
    Retry,
}

/// What an [`Acquisition`] reports, drained with [`Acquisition::poll_event`].
#[derive(Debug)]
#[must_use = "an acquired lock is held on the nodes until it is released or expires"]
pub enum AcquireEvent {
    /// The lock is ours. Last event.
    Acquired(Lock),
    /// An attempt failed and another will start at `retry_at`. Its release
    /// requests are already queued.
    AttemptFailed {
        /// Why the attempt failed.
        error: AcquireError,
        /// When the next attempt starts.
        retry_at: Instant,
    },
    /// No lock; no more attempts. Last event. Its release requests are queued.
    Failed(AcquireError),
}

// One per acquisition, never in a collection: boxing would only add an
// allocation per attempt.
#[allow(clippy::large_enum_variant)]
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
#[derive(Debug)]
enum Phase {
    /// Setting the key on the nodes (and, fenced, reading their counters).
    Lock,
    /// Fenced only: storing the token on a quorum before handing it out.
    Fence {
        token: u64,
        lock_started: Instant,
        lock_votes: Votes,
    },
}

/// One blocking or non-blocking acquire of one resource, as a state machine.
///
/// # Calling order
///
/// 1. [`Acquisition::new`] starts the first attempt at `now`.
/// 2. Drain [`poll_request`](Self::poll_request) and send every request (the
///    first attempt's are N script calls, one per node, to send concurrently).
/// 3. Feed each answer to [`handle_reply`](Self::handle_reply), in any order;
///    at [`poll_timeout`](Self::poll_timeout) call
///    [`handle_timeout`](Self::handle_timeout).
/// 4. After each `handle_*`, drain `poll_request` again (a failed attempt queues
///    its releases, a retry its new requests) and [`poll_event`](Self::poll_event).
/// 5. Stop after [`AcquireEvent::Acquired`] or [`AcquireEvent::Failed`].
///    Requests still queued then are releases that must be sent.
///
/// If the caller gives up early (a cancelled future), it calls
/// [`abandon`](Self::abandon) and sends the release requests it queues.
///
/// The decision comes as soon as it is certain: a quorum of yes votes with
/// validity left, or enough no votes and failures that a quorum is impossible.
/// An answer handled at or after the overall deadline
/// ([`Config::acquire_deadline`](crate::Config::acquire_deadline)) decides
/// nothing but the end: [`AcquireError::DeadlineExceeded`], and the attempt's
/// keys are released, even if that answer completed a quorum.
/// Replies from earlier attempts and replies after the decision are ignored.
///
/// ```
/// use std::time::{Duration, Instant};
/// use rand::{SeedableRng, rngs::StdRng};
/// use redlock_core::{AcquireEvent, Acquisition, Attempts, Config, Reply, Response};
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
#[derive(Debug)]
pub struct Acquisition<R> {
    settings: Arc<Settings>,
    ttl: Ttl,
    drift: Duration,
    node_timeout: Duration,
    rng: R,
    max_attempts: u32,
    /// Attempts started, extra ones after release notices included.
    attempts: u32,
    /// Attempts that count against `max_attempts` (the first and the retries).
    attempts_scheduled: u32,
    deadline: Option<Instant>,
    /// The script keys, the lock key first.
    keys: Arc<[Key]>,
    kind: LockKind,
    fenced: bool,
    /// Fencing counters the nodes returned in the current lock round.
    counters: Vec<Option<u64>>,
    state: State,
    requests: VecDeque<Request>,
    events: VecDeque<AcquireEvent>,
    last_error: Option<AcquireError>,
}

impl<R: Rng> Acquisition<R> {
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
        Self::with_spec(
            settings,
            LockSpec::Exclusive(resource),
            ttl,
            attempts,
            now,
            rng,
        )
        .expect("an exclusive lock on one resource is always a valid spec")
    }

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
        Self::with_spec(
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
    /// work (a multi-resource lock of no resource, an empty owner id).
    pub fn with_spec(
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
        let fenced = matches!(spec, LockSpec::Fenced(_));
        let max_attempts = match attempts {
            Attempts::Once => 1,
            Attempts::Retry => settings.retry().count.saturating_add(1),
        };
        let deadline = match attempts {
            Attempts::Once => None,
            Attempts::Retry => settings.acquire_deadline().map(|d| now + d),
        };
        let mut this = Self {
            keys,
            kind,
            fenced,
            counters: Vec::new(),
            drift: settings.drift(ttl),
            node_timeout: settings.node_timeout_for(ttl),
            settings,
            ttl,
            rng,
            max_attempts,
            attempts: 0,
            attempts_scheduled: 1,
            deadline,
            state: State::Done,
            requests: VecDeque::new(),
            events: VecDeque::new(),
            last_error: None,
        };
        this.start_attempt(now, None);
        Ok(this)
    }

    /// The key being locked (the first one, for a multi-resource lock).
    pub fn key(&self) -> &Key {
        &self.keys[0]
    }

    /// The kind of lock being acquired.
    pub fn kind(&self) -> &LockKind {
        &self.kind
    }

    /// Attempts started so far.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The id of the attempt in flight, if one is.
    pub fn current_attempt(&self) -> Option<AttemptId> {
        match &self.state {
            State::Attempting { round, .. } => Some(round.attempt),
            _ => None,
        }
    }

    /// True once the final event is queued: no more attempts will start.
    pub fn is_done(&self) -> bool {
        matches!(self.state, State::Done)
    }

    /// The next request to send, if any.
    pub fn poll_request(&mut self) -> Option<Request> {
        self.requests.pop_front()
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<AcquireEvent> {
        self.events.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) must be called next:
    /// the per-node timeout of the attempt in flight, the end of a retry wait,
    /// or the overall deadline, whichever comes first. `None` when done.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let own = match &self.state {
            State::Attempting { round, .. } => round.deadline,
            State::Waiting { until } => *until,
            State::Done => return None,
        };
        Some(match self.deadline {
            Some(deadline) => own.min(deadline),
            None => own,
        })
    }

    /// Feeds one node's answer. Answers from other attempts, unknown nodes or
    /// nodes that already answered are ignored.
    pub fn handle_reply(&mut self, reply: Reply, now: Instant) {
        let State::Attempting { round, phase, .. } = &mut self.state else {
            return;
        };
        let command = match phase {
            Phase::Lock if self.fenced => Command::AcquireFenced { ttl: self.ttl },
            Phase::Lock => Command::Acquire { ttl: self.ttl },
            Phase::Fence { token, .. } => Command::StoreToken { token: *token },
        };
        let counter = match (&command, &reply.result) {
            (Command::AcquireFenced { .. }, Ok(Response::Array(items))) => match items.as_slice() {
                [Response::Int(1), Response::Int(counter)] => u64::try_from(*counter).ok(),
                _ => None,
            },
            _ => None,
        };
        let vote = interpret(command, reply.result);
        if round.record(reply.attempt, reply.node, vote) {
            if let Some(slot) = self.counters.get_mut(reply.node.0) {
                *slot = counter;
            }
            self.decide(now);
        }
    }

    /// Advances time: times out silent nodes, starts the next attempt after a
    /// retry wait, or gives up at the overall deadline.
    pub fn handle_timeout(&mut self, now: Instant) {
        if let Some(deadline) = self.deadline
            && now >= deadline
            && !self.is_done()
        {
            self.give_up_at_deadline(now);
            return;
        }
        match &mut self.state {
            State::Attempting { round, .. } if now >= round.deadline => {
                round.expire();
                self.decide(now);
            }
            State::Waiting { until } if now >= *until => {
                self.attempts_scheduled += 1;
                self.start_attempt(now, None);
            }
            _ => {}
        }
    }

    /// Tells the acquisition that a holder of the lock just released it (for
    /// example a pub/sub message from a node's release script). While it
    /// waits between attempts, it tries again at once instead of at the end
    /// of the retry delay, so a released lock passes to a waiter in about one
    /// round trip.
    ///
    /// Such an extra attempt does not use up the retry count: if it fails,
    /// the acquisition goes back to waiting for the retry it had scheduled.
    /// A notice while an attempt is in flight, or after the end, is ignored.
    pub fn handle_release_notice(&mut self, now: Instant) {
        if let State::Waiting { until } = self.state {
            if self.deadline.is_some_and(|deadline| now >= deadline) {
                return self.handle_timeout(now);
            }
            self.start_attempt(now, Some(until));
        }
    }

    /// Gives up: queues a release of the attempt in flight (if any) on every
    /// node and ends with no event. Call it when the caller stops driving this
    /// acquisition before its final event, then send the queued requests: an
    /// attempt in flight may already hold some nodes.
    pub fn abandon(&mut self, now: Instant) {
        if let State::Attempting { round, value, .. } =
            std::mem::replace(&mut self.state, State::Done)
        {
            self.queue_releases(&round, &value, now);
        }
    }

    fn start_attempt(&mut self, now: Instant, scheduled: Option<Instant>) {
        self.attempts += 1;
        // Random ids: a late reply to any earlier round, of this machine or of
        // another one the caller routes to us by mistake, is never counted.
        let attempt = AttemptId(self.rng.next_u64());
        let value = LockValue::random(&mut self.rng, self.settings.value_len());
        let round = Round::new(attempt, self.settings.node_names(), now, self.node_timeout);
        let command = if self.fenced {
            Command::AcquireFenced { ttl: self.ttl }
        } else {
            Command::Acquire { ttl: self.ttl }
        };
        self.counters = vec![None; round.nodes().len()];
        self.send_round(&round, &value, command);
        self.state = State::Attempting {
            round,
            value,
            phase: Phase::Lock,
            scheduled,
        };
    }

    fn send_round(&mut self, round: &Round, value: &LockValue, command: Command) {
        for node in round.nodes() {
            self.requests.push_back(Request {
                attempt: round.attempt,
                node,
                keys: self.keys.clone(),
                value: value.clone(),
                kind: self.kind.clone(),
                command,
                deadline: round.deadline,
            });
        }
    }

    /// The lock round was won on a fenced lock: store the token on a quorum.
    fn start_fence_round(&mut self, now: Instant) {
        let State::Attempting {
            round,
            value,
            scheduled,
            ..
        } = std::mem::replace(&mut self.state, State::Done)
        else {
            unreachable!("only called while attempting");
        };
        let token = round
            .nodes()
            .filter(|node| round.granted(*node))
            .filter_map(|node| self.counters[node.0])
            .max()
            .unwrap_or(0)
            .saturating_add(1);
        let fence = Round::new(
            AttemptId(self.rng.next_u64()),
            self.settings.node_names(),
            now,
            self.node_timeout,
        );
        self.send_round(&fence, &value, Command::StoreToken { token });
        self.state = State::Attempting {
            round: fence,
            value,
            phase: Phase::Fence {
                token,
                lock_started: round.started,
                lock_votes: round.votes(now),
            },
            scheduled,
        };
    }

    fn decide(&mut self, now: Instant) {
        if !matches!(self.state, State::Attempting { .. }) {
            return;
        }
        // The deadline is hard: a quorum counted at or after it (replies and
        // the timer became ready together, or the caller was slow to call
        // `handle_timeout`) is no lock. Its keys are released.
        if self.deadline.is_some_and(|deadline| now >= deadline) {
            self.give_up_at_deadline(now);
            return;
        }
        let State::Attempting { round, phase, .. } = &self.state else {
            return;
        };
        let error = match round.tally() {
            Tally::Open => return,
            Tally::Won => {
                // Validity always counts from the start of the lock round.
                let started = match phase {
                    Phase::Lock => round.started,
                    Phase::Fence { lock_started, .. } => *lock_started,
                };
                let until = valid_until(started, self.ttl, self.drift);
                if let Some(until) = until.filter(|&until| remaining(until, now).is_some()) {
                    if matches!(phase, Phase::Lock) && self.fenced {
                        self.start_fence_round(now);
                        return;
                    }
                    let State::Attempting {
                        round,
                        value,
                        phase,
                        ..
                    } = std::mem::replace(&mut self.state, State::Done)
                    else {
                        unreachable!("matched Attempting above");
                    };
                    let (votes, fencing_token) = match phase {
                        Phase::Lock => (round.votes(now), None),
                        Phase::Fence {
                            token, lock_votes, ..
                        } => (lock_votes, Some(token)),
                    };
                    let lock = Lock {
                        settings: self.settings.clone(),
                        keys: self.keys.clone(),
                        kind: self.kind.clone(),
                        value,
                        ttl: self.ttl,
                        acquired_at: started,
                        valid_until: until,
                        votes,
                        fencing_token,
                        next_attempt: self.rng.next_u64(),
                        extensions: 0,
                    };
                    self.events.push_back(AcquireEvent::Acquired(lock));
                    return;
                }
                AcquireError::ValidityExhausted {
                    votes: round.votes(now),
                    ttl: self.ttl.as_duration(),
                    attempts: self.attempts,
                }
            }
            Tally::Lost if round.wrong_type_rules_out_quorum() => AcquireError::WrongType {
                keys: match self.kind {
                    LockKind::Multi => self.keys.to_vec(),
                    _ => vec![self.keys[0].clone()],
                },
                votes: round.votes(now),
                attempts: self.attempts,
            },
            Tally::Lost if round.failures_rule_out_quorum() => AcquireError::NoQuorum {
                votes: round.votes(now),
                attempts: self.attempts,
            },
            Tally::Lost => AcquireError::Held {
                votes: round.votes(now),
                attempts: self.attempts,
            },
        };
        self.fail_attempt(error, now);
    }

    fn fail_attempt(&mut self, error: AcquireError, now: Instant) {
        let State::Attempting {
            round,
            value,
            scheduled,
            ..
        } = std::mem::replace(&mut self.state, State::Done)
        else {
            return;
        };
        // Release everywhere, also where the node seemed to say no or timed
        // out: a reply can be lost after the node set the key.
        self.queue_releases(&round, &value, now);
        if error.is_wrong_type() {
            // Permanent: every retry would find the same key.
            self.events.push_back(AcquireEvent::Failed(error));
            return;
        }
        if let Some(until) = scheduled {
            if until > now {
                // An extra attempt after a release notice: back to the retry
                // that was scheduled anyway.
                self.state = State::Waiting { until };
                self.events.push_back(AcquireEvent::AttemptFailed {
                    error: error.clone(),
                    retry_at: until,
                });
                self.last_error = Some(error);
                return;
            }
            // The scheduled retry's time passed while the extra attempt ran:
            // the extra attempt took its place and uses it up, so notices can
            // never keep an acquisition retrying past its count.
            self.attempts_scheduled += 1;
        }
        if self.attempts_scheduled < self.max_attempts {
            let until = now + crate::retry_delay(&self.settings.retry(), &mut self.rng);
            if self.deadline.is_none_or(|deadline| until < deadline) {
                self.state = State::Waiting { until };
                self.events.push_back(AcquireEvent::AttemptFailed {
                    error: error.clone(),
                    retry_at: until,
                });
                self.last_error = Some(error);
                return;
            }
            self.last_error = Some(error);
            let error = self.deadline_error();
            self.events.push_back(AcquireEvent::Failed(error));
            return;
        }
        self.events.push_back(AcquireEvent::Failed(error));
    }

    fn give_up_at_deadline(&mut self, now: Instant) {
        if let State::Attempting { round, value, .. } =
            std::mem::replace(&mut self.state, State::Done)
        {
            self.queue_releases(&round, &value, now);
        }
        let error = self.deadline_error();
        self.events.push_back(AcquireEvent::Failed(error));
    }

    fn deadline_error(&mut self) -> AcquireError {
        AcquireError::DeadlineExceeded {
            deadline: self.settings.acquire_deadline().unwrap_or_default(),
            attempts: self.attempts,
            last: self.last_error.take().map(Box::new),
        }
    }

    fn queue_releases(&mut self, round: &Round, value: &LockValue, now: Instant) {
        for node in round.nodes() {
            self.requests.push_back(Request {
                attempt: round.attempt,
                node,
                keys: self.keys.clone(),
                value: value.clone(),
                kind: self.kind.clone(),
                command: Command::Withdraw,
                deadline: now + self.settings.release_timeout(),
            });
        }
    }
}

/// Reads a node's answer to a command as a vote. Anything a script never
/// returns becomes a protocol error, so garbage is never counted as a yes.
pub(crate) fn interpret(command: Command, result: Result<Response, crate::NodeError>) -> NodeVote {
    let response = match result {
        Ok(response) => response,
        Err(error) => return NodeVote::Failed(error),
    };
    let vote = match (command, &response) {
        (Command::Acquire { .. }, Response::Int(1)) => Some(NodeVote::Granted),
        (Command::AcquireFenced { .. }, Response::Array(items)) if matches!(items.as_slice(), [Response::Int(1), Response::Int(c)] if *c >= 0) => {
            Some(NodeVote::Granted)
        }
        (Command::Acquire { .. } | Command::AcquireFenced { .. }, Response::Data(holder)) => {
            Some(NodeVote::HeldByOther(Some(holder.clone())))
        }
        (Command::StoreToken { .. }, Response::Int(1)) => Some(NodeVote::Granted),
        (Command::StoreToken { .. }, Response::Int(0)) => Some(NodeVote::HeldByOther(None)),
        (Command::StoreToken { .. }, Response::Int(-1)) => Some(NodeVote::Missing),
        (Command::Extend { .. }, Response::Int(1)) => Some(NodeVote::Granted),
        (Command::Extend { .. }, Response::Int(2)) => Some(NodeVote::Restored),
        (Command::Extend { .. } | Command::Release | Command::Withdraw, Response::Int(0)) => {
            Some(NodeVote::HeldByOther(None))
        }
        // 2: released, but the server refused the notice (PUBLISH).
        (Command::Release | Command::Withdraw, Response::Int(1 | 2)) => Some(NodeVote::Granted),
        (Command::Release | Command::Withdraw, Response::Int(-1)) => Some(NodeVote::Missing),
        _ => None,
    };
    vote.unwrap_or_else(|| {
        NodeVote::Failed(crate::NodeError::new(
            NodeErrorKind::Protocol,
            format!(
                "the {} script never returns {response:?}; is this a Redis server?",
                command.name()
            ),
        ))
    })
}

/// A lock held on a quorum of nodes, as the core sees it: no I/O, just the key,
/// our value and how long the lock stays valid.
///
/// Made by an [`Acquisition`]. Extend it with [`Lock::extend`] and release it
/// with [`Lock::release`], each a state machine driven like the acquisition.
#[derive(Debug, Clone)]
pub struct Lock {
    settings: Arc<Settings>,
    keys: Arc<[Key]>,
    kind: LockKind,
    value: LockValue,
    ttl: Ttl,
    acquired_at: Instant,
    valid_until: Instant,
    votes: Votes,
    fencing_token: Option<u64>,
    next_attempt: u64,
    extensions: u64,
}

impl Lock {
    /// The locked key (the first one, for a multi-resource lock).
    pub fn key(&self) -> &Key {
        &self.keys[0]
    }

    /// Every key the lock's scripts use: the locked keys, then helper keys
    /// (fencing counter, readers, writer-waiting mark).
    pub fn keys(&self) -> &Arc<[Key]> {
        &self.keys
    }

    /// The kind of lock.
    pub fn kind(&self) -> &LockKind {
        &self.kind
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

    /// The votes of the acquiring round.
    pub fn votes(&self) -> &Votes {
        &self.votes
    }

    /// The fencing token, for a lock acquired with
    /// [`Acquisition::fenced`]: larger than the token of every earlier holder
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

    fn next_attempt(&mut self) -> AttemptId {
        // Starts at a random id drawn at acquisition, like attempt ids.
        self.next_attempt = self.next_attempt.wrapping_add(1);
        AttemptId(self.next_attempt)
    }

    /// Starts extending the lock to `ttl` from `now`.
    ///
    /// Fails at once with [`ExtendError::Expired`] when no validity is left:
    /// an expired lock may already belong to someone else.
    pub fn extend(&mut self, ttl: Ttl, now: Instant) -> Result<Extension, ExtendError> {
        if !self.is_valid(now) {
            return Err(ExtendError::Expired {
                expired_for: now.saturating_duration_since(self.valid_until),
                votes: None,
            });
        }
        let attempt = self.next_attempt();
        Ok(Extension::new(self, attempt, ttl, now))
    }

    /// Records a successful extension.
    pub fn apply(&mut self, extended: &crate::Extended) {
        self.valid_until = extended.valid_until;
        self.ttl = extended.ttl;
        self.extensions += 1;
    }

    /// Starts releasing the lock on every node at `now`, with the per-node
    /// timeout of every release ([`Settings::release_timeout`]).
    pub fn release(&mut self, now: Instant) -> Release {
        let attempt = self.next_attempt();
        // The release timeout does not depend on the TTL: see
        // `Settings::release_timeout`.
        Release::of(
            &self.settings,
            self.keys.clone(),
            self.kind.clone(),
            self.value.clone(),
            attempt,
            now,
        )
    }
}
