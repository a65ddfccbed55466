//! What a [`Client`](super::Client) keeps of one node: its link, its
//! health, and the releases owed to it.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use crate::native::NodeFacts;
use crate::{Backoff, HealthChange, Key, NodeError, NodeHealth, Request};

use super::{OpId, RequestId};

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
    /// Each lock key with a request in flight on this node: the one sent
    /// last, and how many are in flight. Requests reach the node in the
    /// order they were sent, so a request may be sent again after its
    /// answer (`NOSCRIPT`) only while it is the last for its key: it then
    /// runs after everything sent before it, as it would have.
    keys: HashMap<Key, Latest>,
    /// Whether the node is a Redis Cluster, whose connection keeps no order
    /// between requests (it routes each on its own, and sends it again on
    /// MOVED, ASK or TRYAGAIN): it is sent one request per lock key at a
    /// time, the next once the one before is answered or forgotten.
    cluster: bool,
    /// A cluster node's requests that wait for their key's turn, with the
    /// operation each is for, in the order they were sent.
    held: HashMap<Key, VecDeque<(Option<OpId>, Request)>>,
    /// What its server can do, as its last connection found
    /// (`Client::handle_connected`): each request's form is picked by it
    /// as the request is sent. Scripts only before the first.
    pub(super) facts: NodeFacts,
    /// Whether its server was said to be one that may lose locks at a
    /// restart ([`HealthChange::MayLoseLocks`]): once per node.
    pub(super) weak_told: bool,
}

/// The request for one lock key sent last to a node, and how many for
/// that key are in flight there.
#[derive(Debug)]
struct Latest {
    id: RequestId,
    open: usize,
}

impl NodeState {
    pub(super) fn new(health: NodeHealth, cluster: bool) -> Self {
        Self {
            link: Link::Up,
            backoff: Backoff::reconnect(),
            health,
            owed: VecDeque::new(),
            retry_at: None,
            run_ids: Vec::new(),
            restarted_until: None,
            keys: HashMap::new(),
            cluster,
            held: HashMap::new(),
            facts: NodeFacts::default(),
            weak_told: false,
        }
    }

    /// Holds `request`, for `op`, if it must wait for its key's turn: the
    /// node is a cluster node and a request for its key is in flight or
    /// waits already. Gives it back otherwise.
    pub(super) fn hold(&mut self, op: Option<OpId>, request: Request) -> Option<Request> {
        let key = request.key();
        if !self.cluster || !(self.keys.contains_key(key) || self.held.contains_key(key)) {
            return Some(request);
        }
        self.held
            .entry(key.clone())
            .or_default()
            .push_back((op, request));
        None
    }

    /// The next request for `key` whose turn came, with its operation: the
    /// one before it left flight. One that need not arrive and whose
    /// deadline passed at `now` while it waited is dropped instead: its
    /// operation timed the node out.
    pub(super) fn next_turn(&mut self, key: &Key, now: Instant) -> Option<(Option<OpId>, Request)> {
        if self.keys.contains_key(key) {
            return None;
        }
        let queue = self.held.get_mut(key)?;
        let next = loop {
            match queue.pop_front() {
                Some((_, request)) if !request.command.must_arrive() && request.deadline <= now => {
                }
                other => break other,
            }
        };
        if queue.is_empty() {
            self.held.remove(key);
        }
        next
    }

    /// Whether some request waits for its key's turn (on a cluster node
    /// only).
    pub(super) fn holds(&self) -> bool {
        !self.held.is_empty()
    }

    /// The requests that wait for their key's turn, with their operations.
    pub(super) fn held(&self) -> impl Iterator<Item = &(Option<OpId>, Request)> {
        self.held.values().flatten()
    }

    /// The requests that wait for their key's turn and must arrive, taken
    /// out; the others are dropped.
    pub(super) fn take_held(&mut self) -> impl Iterator<Item = Request> + use<> {
        std::mem::take(&mut self.held)
            .into_values()
            .flatten()
            .map(|(_, request)| request)
            .filter(|request| request.command.must_arrive())
    }

    /// Request `id`, for lock key `key`, is sent: the last for its key.
    pub(super) fn sent(&mut self, key: &Key, id: RequestId) {
        let latest = self
            .keys
            .entry(key.clone())
            .or_insert(Latest { id, open: 0 });
        latest.id = id;
        latest.open += 1;
    }

    /// A request for `key` left flight (answered or forgotten).
    pub(super) fn landed(&mut self, key: &Key) {
        if let Some(latest) = self.keys.get_mut(key) {
            latest.open -= 1;
            if latest.open == 0 {
                self.keys.remove(key);
            }
        }
    }

    /// Whether request `id` for `key`, still in flight, is the last sent
    /// for its key.
    pub(super) fn is_last(&self, key: &Key, id: RequestId) -> bool {
        self.keys.get(key).is_some_and(|latest| latest.id == id)
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
