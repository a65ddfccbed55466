//! What a [`Client`](super::Client) keeps of one node: its health, and the
//! releases owed to it.

use std::collections::VecDeque;
use std::time::Instant;

use crate::{HealthChange, NodeHealth, Request};

/// Releases and withdraws owed to one node at most: past this many, a key
/// left behind expires at its TTL. Reached only by a node away for long
/// under heavy load; bounds what it makes the client hold (about 200 bytes
/// a request).
pub const OWED_PER_NODE: usize = 4_096;

/// One node as the client knows it.
#[derive(Debug)]
pub(super) struct NodeState {
    pub(super) health: NodeHealth,
    /// Requests that must arrive ([`Command::must_arrive`](crate::Command::must_arrive))
    /// and met a broken connection, oldest first: maybe never sent, maybe
    /// run. Sent again when the node connects, or at `retry_at`, until each
    /// is given up ([`Request::give_up_at`]).
    pub(super) owed: VecDeque<Request>,
    /// When the owed requests are tried again while the node seems
    /// connected (a cluster node stays connected while a shard is down).
    pub(super) retry_at: Option<Instant>,
}

impl NodeState {
    pub(super) fn new(health: NodeHealth) -> Self {
        Self {
            health,
            owed: VecDeque::new(),
            retry_at: None,
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

    /// The earliest instant something owed needs the client.
    pub(super) fn next_timeout(&self) -> Option<Instant> {
        let give_up = self.owed.iter().map(|request| request.give_up_at).min();
        [give_up, self.retry_at].into_iter().flatten().min()
    }

    pub(super) fn answered(&mut self, now: Instant) -> Option<HealthChange> {
        self.health.handle_answer(now)
    }
}
