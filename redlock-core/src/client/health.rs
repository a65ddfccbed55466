//! What a client knows of one node's recent answers, and what it decides
//! from that: whether new requests still go to it.
//!
//! A paused or stalled master answers nothing, so every request sent to it
//! waits in its connection's queue until the per-node timeout, and every
//! acquire sent to it is owed a withdraw or a release later. The rounds
//! themselves do not wait for it (each decides once a quorum is certain
//! either way), but the queue behind it would grow for as long as it stays
//! silent. So a node that leaves [`SLOW_AFTER`] requests in a row unanswered
//! past their deadline is **known slow**: new acquires, extensions and
//! marks skip it ([`NodeHealth::admit`] says no, and the driver answers the
//! request itself with [`Reply::skipped`](crate::Reply::skipped), a vote
//! that counts as a failure), except for one probe per
//! [`probe interval`](NodeHealth::probe_every). Releases and withdraws are
//! never skipped: they must arrive. A lock whose acquire skipped a node
//! never had its value there, so it owes that node no release
//! ([`Lock`](crate::Lock) remembers which nodes it was never sent to).
//!
//! The first answer of any kind (a reply, an error reply; not a broken
//! connection) makes it trusted again.
//!
//! Skipping only removes votes, so it cannot make two clients hold a lock:
//! safety never depends on it. It trades one node's vote for the queue
//! behind it, while the other nodes can still form a quorum.
// Public with the `simulation` feature only (`machinery!` in lib.rs).
#![cfg_attr(not(feature = "simulation"), allow(unreachable_pub))]

use std::time::{Duration, Instant};

use crate::Request;

/// Requests in a row left unanswered past their deadline that make a node
/// known slow.
pub const SLOW_AFTER: u32 = 3;

/// One node's standing with its client: trusted, or known slow since an
/// instant and probed at intervals.
///
/// Driven by the adapter, which tells it every answer
/// ([`handle_answer`](Self::handle_answer)) and every request that passed its
/// deadline unanswered ([`handle_overdue`](Self::handle_overdue)), and asks
/// it before sending each request ([`admit`](Self::admit)). Each of these
/// returns a [`HealthChange`] when the standing changes, for the logs and
/// metrics.
///
/// ```
/// use std::time::{Duration, Instant};
/// use redlock_core::{HealthChange, NodeHealth, NodeId, SLOW_AFTER};
///
/// let t0 = Instant::now();
/// let mut health = NodeHealth::new(NodeId(4), Duration::from_millis(200));
/// for _ in 1..SLOW_AFTER {
///     assert_eq!(health.handle_overdue(t0), None);
/// }
/// assert!(matches!(health.handle_overdue(t0), Some(HealthChange::Slow { .. })));
/// assert!(health.is_slow());
/// assert!(matches!(
///     health.handle_answer(t0 + Duration::from_secs(1)),
///     Some(HealthChange::Trusted { .. })
/// ));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeHealth {
    node: crate::NodeId,
    probe_every: Duration,
    state: Standing,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Standing {
    /// Requests go to it; `overdue` in a row passed their deadline.
    Trusted { overdue: u32 },
    /// Known slow since `since`; the next probe may go at `next_probe`.
    Slow { since: Instant, next_probe: Instant },
}

/// A change of a node's standing.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HealthChange {
    /// The node left [`SLOW_AFTER`] requests in a row unanswered past their
    /// deadline: new requests that may be skipped skip it until it answers.
    Slow {
        /// The node.
        node: crate::NodeId,
        /// How often it is probed while known slow: one request that may be
        /// skipped goes to it per interval.
        probe_every: Duration,
    },
    /// The node answered again after being known slow for `after`.
    Trusted {
        /// The node.
        node: crate::NodeId,
        /// How long it was known slow.
        after: Duration,
    },
    /// The server restarted while the client was connected (its run id
    /// changed): its votes do not count for `wait`, the longest TTL the
    /// client knows of (with the drift allowance), since it may have lost
    /// locks it granted before and could grant them again while their
    /// holders still count it ([`NodeErrorKind::Restarted`](crate::NodeErrorKind::Restarted)).
    Restarted {
        /// The node.
        node: crate::NodeId,
        /// How long its votes do not count, from now.
        wait: Duration,
    },
    /// The node connected to a server that may evict lock keys under
    /// memory pressure, which the client does not allow
    /// ([`Config::allow_eviction`](crate::Config::allow_eviction)): a lock
    /// evicted there is granted again while its holder still counts it.
    /// Said at each such connection (at start, such a server is refused:
    /// [`Settings::check_servers`](crate::Settings::check_servers)).
    MayEvict {
        /// The node.
        node: crate::NodeId,
        /// Its `maxmemory-policy`.
        policy: String,
    },
    /// The node's server may lose the locks it granted when it restarts,
    /// and grant them again while their holders still count it. Said once
    /// per node, unless [`WeakPersistence::Accept`](crate::WeakPersistence::Accept).
    MayLoseLocks {
        /// The node.
        node: crate::NodeId,
        /// What it lacks, in words.
        reason: String,
    },
}

impl NodeHealth {
    /// A trusted node, probed every `probe_every` once known slow.
    pub fn new(node: crate::NodeId, probe_every: Duration) -> Self {
        Self {
            node,
            probe_every,
            state: Standing::Trusted { overdue: 0 },
        }
    }

    /// For a client of `settings`: probed every four per-node timeouts, so
    /// a paused node is owed at most one probe's clean-up per interval.
    pub fn for_node(settings: &crate::Settings, node: crate::NodeId) -> Self {
        Self::new(node, settings.node_timeout() * 4)
    }

    #[cfg(feature = "simulation")]
    /// The node this is.
    pub fn node(&self) -> crate::NodeId {
        self.node
    }

    #[cfg(feature = "simulation")]
    /// Whether the node is known slow.
    pub fn is_slow(&self) -> bool {
        matches!(self.state, Standing::Slow { .. })
    }

    #[cfg(feature = "simulation")]
    /// How long a known slow node waits between probes.
    pub fn probe_every(&self) -> Duration {
        self.probe_every
    }

    /// The node answered a request at `now` (any reply, error replies
    /// included; a broken connection is no answer).
    pub fn handle_answer(&mut self, now: Instant) -> Option<HealthChange> {
        match self.state {
            Standing::Trusted { overdue: 0 } => None,
            Standing::Trusted { .. } => {
                self.state = Standing::Trusted { overdue: 0 };
                None
            }
            Standing::Slow { since, .. } => {
                self.state = Standing::Trusted { overdue: 0 };
                Some(HealthChange::Trusted {
                    node: self.node,
                    after: now.saturating_duration_since(since),
                })
            }
        }
    }

    /// A request to the node passed its deadline unanswered at `now`.
    pub fn handle_overdue(&mut self, now: Instant) -> Option<HealthChange> {
        let Standing::Trusted { overdue } = self.state else {
            return None;
        };
        let overdue = overdue.saturating_add(1);
        if overdue < SLOW_AFTER {
            self.state = Standing::Trusted { overdue };
            return None;
        }
        self.state = Standing::Slow {
            since: now,
            next_probe: now + self.probe_every,
        };
        Some(HealthChange::Slow {
            node: self.node,
            probe_every: self.probe_every,
        })
    }

    /// Whether to send `request` to the node at `now`. Always for a
    /// trusted node, and for a request that must arrive (a release, a
    /// withdraw, a queue leave) or only reads ([`Command::only_reads`](crate::Command::only_reads): an
    /// inspection, who leads an election). A known slow
    /// node gets any other request only as a probe, one per
    /// [`probe_every`](Self::probe_every); the driver answers a request
    /// not admitted with [`Reply::skipped`](crate::Reply::skipped).
    pub fn admit(&mut self, request: &Request, now: Instant) -> bool {
        let Standing::Slow { since, next_probe } = self.state else {
            return true;
        };
        if request.command.must_arrive() || request.command.only_reads() {
            return true;
        }
        if now < next_probe {
            return false;
        }
        self.state = Standing::Slow {
            since,
            next_probe: now + self.probe_every,
        };
        true
    }
}
