//! What a [`Client`](super::Client) keeps of one node: its link, its
//! health, and the releases owed to it.

use std::collections::VecDeque;
use std::time::Instant;

use crate::{Backoff, HealthChange, NodeError, NodeHealth, Request};

/// Releases and withdraws owed to one node at most: past this many, a key
/// left behind expires at its TTL. Reached only by a node away for long
/// under heavy load; bounds what it makes the client hold (about 200 bytes
/// a request).
#[cfg_attr(not(feature = "simulation"), allow(unreachable_pub))]
pub const OWED_PER_NODE: usize = 4_096;

/// A node's connection, as the driver last said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Link {
    /// Connected ([`Client::handle_connected`](super::Client::handle_connected)).
    Up,
    /// A connection is being made ([`Output::Connect`](super::Output::Connect)
    /// was emitted); its outcome comes next.
    Connecting,
    /// No connection; the next attempt is due at `retry_at`.
    Down { retry_at: Instant },
}

/// One node as the client knows it.
#[derive(Debug)]
pub(super) struct NodeState {
    pub(super) link: Link,
    /// The wait before each connection attempt after a failed one: reset
    /// by a connection made.
    pub(super) backoff: Backoff,
    pub(super) health: NodeHealth,
    /// Requests that must arrive ([`Command::must_arrive`](crate::Command::must_arrive))
    /// and met a broken connection, oldest first: maybe never sent, maybe
    /// run. Sent again when the node connects, or at `retry_at`, until each
    /// is given up ([`Request::give_up_at`]).
    pub(super) owed: VecDeque<Request>,
    /// When the owed requests are tried again while the node seems
    /// connected (a cluster node stays connected while a shard is down).
    pub(super) retry_at: Option<Instant>,
    /// The run ids the server gave at its last connection (a cluster node:
    /// one per master); empty before the first, or where it did not say.
    run_ids: Vec<String>,
    /// Until when its votes do not count: it restarted under the client.
    restarted_until: Option<Instant>,
}

impl NodeState {
    pub(super) fn new(health: NodeHealth) -> Self {
        Self {
            link: Link::Up,
            backoff: Backoff::reconnect(),
            health,
            owed: VecDeque::new(),
            retry_at: None,
            run_ids: Vec::new(),
            restarted_until: None,
        }
    }

    /// The node connected at `now` with a server of `run_ids`: a run id it
    /// had before and no longer has means a restart (or, for a cluster
    /// node, a master replaced), and its votes do not count for `wait`.
    /// Returns that wait when it starts one.
    pub(super) fn connected(
        &mut self,
        run_ids: &[String],
        wait: std::time::Duration,
        now: Instant,
    ) -> Option<std::time::Duration> {
        let restarted = !self.run_ids.is_empty()
            && !run_ids.is_empty()
            && self.run_ids.iter().any(|id| !run_ids.contains(id));
        if !run_ids.is_empty() {
            self.run_ids = run_ids.to_vec();
        }
        if !restarted || planted!(RestartedNodeVotes) {
            return None;
        }
        self.restarted_until = Some(now + wait);
        Some(wait)
    }

    /// Why a request that votes may not count from this node at `now`: it
    /// restarted under the client less than its wait ago.
    pub(super) fn not_counted(&self, request: &Request, now: Instant) -> Option<NodeError> {
        let votes = !(request.command.must_arrive() || request.command.only_reads());
        self.not_counted_now(now).filter(|_| votes)
    }

    /// Why no vote of this node counts at `now`, if none does.
    pub(super) fn not_counted_now(&self, now: Instant) -> Option<NodeError> {
        let until = self.restarted_until?;
        (until > now).then(|| NodeError::restarted(until - now))
    }

    /// Whether `request` goes to the node at `now`: an error when it may
    /// not ([`not_counted`](Self::not_counted), or known slow: [`NodeHealth::admit`]).
    pub(super) fn admit(&mut self, request: &Request, now: Instant) -> Result<(), NodeError> {
        if let Some(error) = self.not_counted(request, now) {
            return Err(error);
        }
        if self.health.admit(request, now) {
            Ok(())
        } else {
            Err(NodeError::slow())
        }
    }

    /// Owes `request` again; false when the node owes too many.
    pub(super) fn owe(&mut self, request: Request) -> bool {
        if self.owed.len() >= OWED_PER_NODE {
            return false;
        }
        self.owed.push_back(request);
        true
    }

    /// Drops what is owed past its give-up instant at `now`.
    pub(super) fn forget_given_up(&mut self, now: Instant) {
        self.owed.retain(|request| request.give_up_at > now);
        if self.owed.is_empty() {
            self.retry_at = None;
        }
    }

    /// The earliest instant something owed, or a connection attempt,
    /// needs the client.
    pub(super) fn next_timeout(&self) -> Option<Instant> {
        let give_up = self.owed.iter().map(|request| request.give_up_at).min();
        let connect = match self.link {
            Link::Down { retry_at } => Some(retry_at),
            Link::Up | Link::Connecting => None,
        };
        [give_up, self.retry_at, connect]
            .into_iter()
            .flatten()
            .min()
    }

    pub(super) fn answered(&mut self, now: Instant) -> Option<HealthChange> {
        self.health.handle_answer(now)
    }
}
