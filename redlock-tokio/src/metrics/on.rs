//! The metrics recorded through the `metrics` facade, with the `metrics`
//! feature on: metric names, their label keys built once, and the recording.

use std::sync::{Arc, LazyLock};
use std::time::Instant;

use ::metrics::{Key, Label, Level, Metadata, Unit};
use redlock_core::{
    ExtendError, Lock, LossReason, NodeErrorKind, NodeVote, ReleaseReport, RoundId,
};

use super::{End, Kind, Outcome, Voted};

pub(crate) const ACQUIRES: &str = "redlock_acquires_total";
pub(crate) const ACQUIRE_WAIT: &str = "redlock_acquire_wait_seconds";
pub(crate) const ACQUIRE_ATTEMPTS: &str = "redlock_acquire_attempts";
pub(crate) const HELD: &str = "redlock_lock_held_seconds";
pub(crate) const EXTENSIONS: &str = "redlock_extensions_total";
pub(crate) const LOSSES: &str = "redlock_locks_lost_total";
pub(crate) const RELEASES: &str = "redlock_releases_total";
pub(crate) const NODE_ERRORS: &str = "redlock_node_errors_total";
pub(crate) const NOTICES: &str = "redlock_release_notices_total";
pub(crate) const NODE_MISSES: &str = "redlock_release_node_misses_total";
pub(crate) const NODE_SLOW: &str = "redlock_node_slow";
pub(crate) const DRIVER_BUSY: &str = "redlock_driver_busy_microseconds_total";

static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

const KINDS: [&str; 5] = ["exclusive", "read", "write", "reentrant", "multi"];
const OUTCOMES: [&str; 9] = [
    "granted",
    "held_by_other",
    "no_quorum",
    "validity_exhausted",
    "wrong_type",
    "deadline",
    "cancelled",
    "config",
    "permits_mismatch",
];
const ENDS: [&str; 2] = ["released", "lost"];
const EXTEND_OUTCOMES: [&str; 5] = ["extended", "expired", "lost", "gone", "no_quorum"];
const LOSS_REASONS: [&str; 5] = ["expired", "lost", "gone", "no_quorum", "extension_limit"];
const RELEASE_OUTCOMES: [&str; 3] = ["released", "not_held", "incomplete"];
const NODE_ERROR_KINDS: [&str; 10] = [
    "timeout",
    "connection",
    "auth",
    "wrong_type",
    "server",
    "protocol",
    "tls",
    "slow",
    "restarted",
    "not_on_disk",
];

/// One key per (kind, outcome), built once.
struct AcquireKeys {
    count: Key,
    wait: Key,
    attempts: Key,
}

static ACQUIRE_KEYS: LazyLock<Vec<AcquireKeys>> = LazyLock::new(|| {
    let mut keys = Vec::with_capacity(KINDS.len() * OUTCOMES.len());
    for kind in KINDS {
        for outcome in OUTCOMES {
            let labels = || {
                vec![
                    Label::from_static_parts("kind", kind),
                    Label::from_static_parts("outcome", outcome),
                ]
            };
            keys.push(AcquireKeys {
                count: Key::from_parts(ACQUIRES, labels()),
                wait: Key::from_parts(ACQUIRE_WAIT, labels()),
                attempts: Key::from_parts(ACQUIRE_ATTEMPTS, labels()),
            });
        }
    }
    keys
});

static HELD_KEYS: LazyLock<Vec<Key>> = LazyLock::new(|| {
    KINDS
        .iter()
        .flat_map(|&kind| {
            ENDS.iter().map(move |&end| {
                Key::from_parts(
                    HELD,
                    vec![
                        Label::from_static_parts("kind", kind),
                        Label::from_static_parts("end", end),
                    ],
                )
            })
        })
        .collect()
});

/// Keys of a metric with one label over a fixed set of values.
fn one_label(name: &'static str, label: &'static str, values: &[&'static str]) -> Vec<Key> {
    values
        .iter()
        .map(|&value| Key::from_parts(name, vec![Label::from_static_parts(label, value)]))
        .collect()
}

static EXTENSION_KEYS: LazyLock<Vec<Key>> =
    LazyLock::new(|| one_label(EXTENSIONS, "outcome", &EXTEND_OUTCOMES));
static LOSS_KEYS: LazyLock<Vec<Key>> = LazyLock::new(|| one_label(LOSSES, "reason", &LOSS_REASONS));
static RELEASE_KEYS: LazyLock<Vec<Key>> =
    LazyLock::new(|| one_label(RELEASES, "outcome", &RELEASE_OUTCOMES));

static DRIVER_BUSY_KEY: LazyLock<Key> = LazyLock::new(|| Key::from_static_name(DRIVER_BUSY));

/// `driver`, the client's driver task, with the time it spends in its
/// polls counted (real time, not the simulation's), in whole microseconds
/// added once a millisecond of them is due and when it ends.
pub(crate) async fn timed<F: std::future::Future>(driver: F) -> F::Output {
    let mut driver = std::pin::pin!(driver);
    let mut busy = std::time::Duration::ZERO;
    std::future::poll_fn(|cx| {
        let started = Instant::now();
        let poll = driver.as_mut().poll(cx);
        busy += started.elapsed();
        if busy >= std::time::Duration::from_millis(1) || poll.is_ready() {
            let micros = busy.as_micros();
            busy -= std::time::Duration::from_micros(micros as u64);
            count_by(&DRIVER_BUSY_KEY, micros as u64);
        }
        poll
    })
    .await
}

fn count(key: &Key) {
    count_by(key, 1);
}

fn count_by(key: &Key, by: u64) {
    ::metrics::with_recorder(|recorder| recorder.register_counter(key, &METADATA).increment(by));
}

fn record(key: &Key, value: f64) {
    ::metrics::with_recorder(|recorder| recorder.register_histogram(key, &METADATA).record(value));
}

/// Help text and units for every metric, so that exporters can show
/// them. Cheap, and idempotent for the exporters: called at every build,
/// so a recorder installed after an earlier client was built gets them too.
pub(crate) fn describe() {
    use ::metrics::{describe_counter, describe_histogram};
    describe_counter!(
        ACQUIRES,
        Unit::Count,
        "Acquire calls by lock kind and outcome: granted, held_by_other, no_quorum, \
         validity_exhausted, wrong_type, deadline, cancelled (the future was dropped), \
         config (refused before anything was sent), permits_mismatch (a semaphore's \
         masters keep another number of permits)"
    );
    describe_histogram!(
        ACQUIRE_WAIT,
        Unit::Seconds,
        "Time from the start of an acquire call to the lock granted or given up, \
         retries included, by lock kind and outcome"
    );
    describe_histogram!(
        ACQUIRE_ATTEMPTS,
        Unit::Count,
        "Attempts (quorum rounds) one acquire call made, by lock kind and outcome"
    );
    describe_histogram!(
        HELD,
        Unit::Seconds,
        "How long a lock was held: from its winning round to its release, or to the \
         keep-alive declaring it lost; by lock kind and end (released, lost)"
    );
    describe_counter!(
        EXTENSIONS,
        Unit::Count,
        "Extensions by outcome: extended, expired, lost, gone, no_quorum"
    );
    describe_counter!(
        LOSSES,
        Unit::Count,
        "Locks a keep-alive declared lost, by reason: expired, lost, gone, no_quorum \
         (the failed extension) or extension_limit"
    );
    describe_counter!(
        RELEASES,
        Unit::Count,
        "Releases by outcome: released (the lock is free), not_held (the value was on no \
         node), incomplete (so many nodes failed that the value may hold the lock until \
         its TTL)"
    );
    describe_counter!(
        NODE_MISSES,
        Unit::Count,
        "Nodes where the release of a lock still valid found no value of ours although \
         the lock held that node: a master that restarted empty, or a release that ran \
         before its acquire (a broken per-node order); 0 when all is well"
    );
    describe_counter!(
        NODE_ERRORS,
        Unit::Count,
        "Failed votes by node (host:port/db) and error: timeout, connection, auth, \
         wrong_type, server, protocol, tls, slow (not asked: known slow)"
    );
    ::metrics::describe_gauge!(
        NODE_SLOW,
        Unit::Count,
        "1 while the node (host:port/db) is known slow: it left several requests in a row \
         unanswered past their timeout, and new acquires skip it (one probe at intervals) \
         until it answers; 0 once it answers again"
    );
    describe_counter!(
        DRIVER_BUSY,
        Unit::Microseconds,
        "Time the client's driver task spent working (in its polls, real time): one task \
         runs every operation of a client and its masters' connections, so a rate near \
         1 s per second means the client is at its limit"
    );
    describe_counter!(
        NOTICES,
        Unit::Count,
        "Release notices received on the pub/sub connection of each node (host:port/db)"
    );
}

/// One acquire call, reported once: with [`finish`](Self::finish), or
/// when dropped (before anything was sent: `config`; after: the call's
/// future was dropped, `cancelled`).
pub(crate) struct Acquire {
    kind: Kind,
    started: Instant,
    sent: bool,
    done: bool,
}

impl Acquire {
    pub(crate) fn start(kind: Kind, now: Instant) -> Self {
        Self {
            kind,
            started: now,
            sent: false,
            done: false,
        }
    }

    /// The first attempt is under way: a drop from now on is a cancel.
    pub(crate) fn sent(&mut self) {
        self.sent = true;
    }

    /// The acquisition's final event, with its attempt count.
    pub(crate) fn finish(mut self, outcome: Outcome, attempts: u32) {
        self.done = true;
        self.report(outcome, Some(attempts));
    }

    fn report(&self, outcome: Outcome, attempts: Option<u32>) {
        let keys = &ACQUIRE_KEYS[self.kind as usize * OUTCOMES.len() + outcome as usize];
        count(&keys.count);
        if outcome == Outcome::Config {
            return;
        }
        record(&keys.wait, self.started.elapsed().as_secs_f64());
        if let Some(attempts) = attempts {
            record(&keys.attempts, f64::from(attempts));
        }
    }
}

impl Drop for Acquire {
    fn drop(&mut self) {
        if !self.done {
            let outcome = if self.sent {
                Outcome::Cancelled
            } else {
                Outcome::Config
            };
            self.report(outcome, None);
        }
    }
}

/// A hold that ended now.
pub(crate) fn held(lock: &Lock, end: End) {
    let kind = Kind::of(lock.kind());
    let key = &HELD_KEYS[kind as usize * ENDS.len() + end as usize];
    record(key, lock.acquired_at().elapsed().as_secs_f64());
}

fn extend_index(error: &ExtendError) -> usize {
    match error {
        ExtendError::Expired { .. } => 1,
        ExtendError::Lost { .. } => 2,
        ExtendError::Gone { .. } => 3,
        _ => 4,
    }
}

/// An extension's result.
pub(crate) fn extended(result: Result<(), &ExtendError>) {
    count(&EXTENSION_KEYS[result.map_or_else(extend_index, |()| 0)]);
}

/// The keep-alive declared the lock lost.
pub(crate) fn lost(reason: &LossReason) {
    let index = match reason {
        LossReason::ExtendFailed(error) => extend_index(error) - 1,
        LossReason::Expired => 0,
        _ => 4,
    };
    count(&LOSS_KEYS[index]);
}

/// A node became known slow (`true`) or trusted again.
pub(crate) fn node_slow(node: &str, slow: bool) {
    let key = Key::from_parts(NODE_SLOW, vec![Label::new("node", node.to_owned())]);
    ::metrics::with_recorder(|recorder| {
        recorder
            .register_gauge(&key, &METADATA)
            .set(if slow { 1.0 } else { 0.0 })
    });
}

/// A release's report.
pub(crate) fn node_misses(misses: usize) {
    if misses > 0 {
        static KEY: LazyLock<Key> = LazyLock::new(|| Key::from_name(NODE_MISSES));
        ::metrics::with_recorder(|recorder| {
            recorder
                .register_counter(&KEY, &METADATA)
                .increment(misses as u64)
        });
    }
}

pub(crate) fn released(report: &ReleaseReport) {
    let index = if !report.frees_lock() {
        2
    } else if report.held_nowhere() {
        1
    } else {
        0
    };
    count(&RELEASE_KEYS[index]);
}

/// The node-labelled keys of one client, made once when it is built:
/// the label is the node's canonical name (`host:port/db`, never
/// credentials), shared, not copied, by every key.
#[derive(Clone)]
pub(crate) struct Nodes(Arc<[NodeKeys]>);

struct NodeKeys {
    errors: Vec<Key>,
    notices: Key,
}

impl Nodes {
    pub(crate) fn new<'a>(names: impl IntoIterator<Item = &'a str>) -> Self {
        Self(
            names
                .into_iter()
                .map(|name| {
                    let name: Arc<str> = name.into();
                    let node = || Label::new("node", Arc::clone(&name));
                    NodeKeys {
                        errors: NODE_ERROR_KINDS
                            .iter()
                            .map(|&error| {
                                Key::from_parts(
                                    NODE_ERRORS,
                                    vec![node(), Label::from_static_parts("error", error)],
                                )
                            })
                            .collect(),
                        notices: Key::from_parts(NOTICES, vec![node()]),
                    }
                })
                .collect(),
        )
    }

    /// A release notice came from node `index`.
    pub(crate) fn notice(&self, index: usize) {
        if let Some(node) = self.0.get(index) {
            count(&node.notices);
        }
    }

    fn vote(&self, index: usize, vote: &NodeVote) {
        let NodeVote::Failed(error) = vote else {
            return;
        };
        let error = match error.kind {
            NodeErrorKind::Timeout => 0,
            NodeErrorKind::Connection => 1,
            NodeErrorKind::Auth => 2,
            NodeErrorKind::WrongType => 3,
            NodeErrorKind::Protocol => 5,
            NodeErrorKind::Tls => 6,
            NodeErrorKind::Slow => 7,
            NodeErrorKind::Restarted => 8,
            NodeErrorKind::NotOnDisk => 9,
            _ => 4,
        };
        if let Some(node) = self.0.get(index) {
            count(&node.errors[error]);
        }
    }
}

/// Counts the failed votes of each round a driven machine reports,
/// once per round: a deadline error repeats the votes of an attempt
/// reported before it.
pub(crate) struct Rounds {
    last: Option<RoundId>,
}

impl Rounds {
    pub(crate) fn new() -> Self {
        Self { last: None }
    }

    pub(crate) fn event(&mut self, nodes: &Nodes, event: &impl Voted) {
        let Some(votes) = event.votes() else {
            return;
        };
        if self.last.replace(votes.round()) == Some(votes.round()) {
            return;
        }
        for (index, vote) in votes.votes().iter().enumerate() {
            nodes.vote(index, vote);
        }
    }
}
