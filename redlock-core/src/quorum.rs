//! Quorum size, validity arithmetic, and the tally of one round of votes.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::limits::{FIXED_DRIFT, Millis};
use crate::{
    Command, Key, LockKind, LockValue, NodeError, NodeId, NodeVote, Request, RoundId, Ttl,
};

/// Votes needed among `nodes` nodes: a strict majority, N/2 + 1.
///
/// ```
/// assert_eq!(redlock_core::quorum(1), 1);
/// assert_eq!(redlock_core::quorum(4), 3);
/// assert_eq!(redlock_core::quorum(5), 3);
/// ```
pub fn quorum(nodes: usize) -> usize {
    if planted!(QuorumHalf) {
        return (nodes / 2).max(1);
    }
    nodes / 2 + 1
}

/// The clock drift allowance for a TTL: `ttl * factor + 2 ms`, rounded up to
/// whole microseconds so that it never errs on the generous side.
pub fn drift(ttl: Ttl, factor: f64) -> Duration {
    let scaled = (ttl.as_millis() as f64 * factor * 1000.0).ceil();
    Duration::from_micros(scaled as u64) + FIXED_DRIFT
}

/// When a lock set at `start` stops being valid: `start + ttl - drift`.
///
/// `None` when drift eats the whole TTL. Settings validation rejects such TTLs,
/// so callers only see `None` with hand-made values.
pub fn valid_until(start: Instant, ttl: Ttl, drift: Duration) -> Option<Instant> {
    let usable = ttl.as_duration().checked_sub(drift)?;
    if usable.is_zero() {
        return None;
    }
    start.checked_add(usable)
}

/// The validity left at `now`: `valid_until - now`, or `None` once it is zero
/// or less. A lock with no validity left is never handed out.
pub fn remaining(valid_until: Instant, now: Instant) -> Option<Duration> {
    let left = valid_until.checked_duration_since(now)?;
    (!left.is_zero()).then_some(left)
}

/// Every node's vote in one round, with the node names, for errors and logs.
#[derive(Clone, PartialEq, Eq)]
pub struct Votes {
    names: Arc<[String]>,
    votes: Vec<NodeVote>,
    round: RoundId,
    elapsed: Duration,
}

impl Votes {
    /// The votes, indexed like the nodes.
    pub fn votes(&self) -> &[NodeVote] {
        &self.votes
    }

    /// `(node name, vote)` pairs in node order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &NodeVote)> {
        self.names.iter().map(String::as_str).zip(&self.votes)
    }

    /// The vote of one node.
    pub fn get(&self, node: NodeId) -> Option<&NodeVote> {
        self.votes.get(node.0)
    }

    /// Replaces the vote of `node` (a semaphore's permit tells apart the
    /// masters that granted another slot).
    pub(crate) fn set(&mut self, node: NodeId, vote: NodeVote) {
        if let Some(slot) = self.votes.get_mut(node.0) {
            *slot = vote;
        }
    }

    /// The round these votes belong to.
    pub fn round(&self) -> RoundId {
        self.round
    }

    /// Time from the start of the round to its decision.
    pub fn elapsed(&self) -> Duration {
        self.elapsed
    }

    /// Nodes that said yes.
    pub fn granted(&self) -> usize {
        self.votes.iter().filter(|v| v.is_yes()).count()
    }

    /// Nodes that answered that another value holds the key.
    pub fn held_by_other(&self) -> usize {
        self.votes
            .iter()
            .filter(|v| matches!(v, NodeVote::HeldByOther(_)))
            .count()
    }

    /// Nodes that had not answered when the round was decided: the decision
    /// came without them (a quorum reached, or made impossible, by the others).
    pub fn pending(&self) -> usize {
        self.votes
            .iter()
            .filter(|v| matches!(v, NodeVote::Pending))
            .count()
    }

    /// Nodes that failed or timed out.
    pub fn failed(&self) -> usize {
        self.votes
            .iter()
            .filter(|v| matches!(v, NodeVote::Failed(_)))
            .count()
    }

    /// Names of the nodes that failed or timed out, with their errors.
    pub fn failures(&self) -> impl Iterator<Item = (&str, &NodeError)> {
        self.iter().filter_map(|(name, vote)| match vote {
            NodeVote::Failed(error) => Some((name, error)),
            _ => None,
        })
    }

    /// Names of the nodes that reported another holder.
    pub fn holders(&self) -> impl Iterator<Item = &str> {
        self.iter()
            .filter(|(_, vote)| matches!(vote, NodeVote::HeldByOther(_)))
            .map(|(name, _)| name)
    }
}

impl fmt::Display for Votes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of {} nodes granted (quorum {}) in {} [",
            self.granted(),
            self.votes.len(),
            quorum(self.votes.len()),
            Millis(self.elapsed)
        )?;
        for (i, (name, vote)) in self.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{name}: {vote}")?;
        }
        f.write_str("]")
    }
}

impl fmt::Debug for Votes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Votes({self})")
    }
}

/// Where a round stands after a vote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tally {
    /// Neither outcome is certain yet.
    Open,
    /// A quorum said yes.
    Won,
    /// Too many nodes said no or failed for a quorum to be possible.
    Lost,
}

/// One fan-out to every node and the votes that came back.
#[derive(Clone, Debug)]
pub(crate) struct Round {
    pub(crate) id: RoundId,
    pub(crate) started: Instant,
    pub(crate) deadline: Instant,
    pub(crate) timeout: Duration,
    names: Arc<[String]>,
    /// Whether this round's requests may go out as plain commands.
    native: bool,
    /// Whether its votes that write wait for the nodes' AOF.
    aof: bool,
    votes: Vec<NodeVote>,
    answered: usize,
}

impl Round {
    pub(crate) fn new(
        id: RoundId,
        settings: &crate::Settings,
        started: Instant,
        timeout: Duration,
    ) -> Self {
        let names = settings.node_names();
        let votes = vec![NodeVote::Pending; names.len()];
        Self {
            id,
            started,
            // Validation bounds the timeout far below any Instant overflow.
            deadline: started + timeout,
            timeout,
            names,
            native: settings.native_commands(),
            aof: settings.wait_for_aof(),
            votes,
            answered: 0,
        }
    }

    pub(crate) fn nodes(&self) -> impl ExactSizeIterator<Item = NodeId> + Clone + use<> {
        (0..self.votes.len()).map(NodeId)
    }

    /// This round's request to every node: `command` on the lock's `keys`
    /// with our `value`, answered by `deadline`. The one fan-out of the core.
    pub(crate) fn fan_out<'a>(
        &self,
        keys: &'a Arc<[Key]>,
        kind: &'a LockKind,
        value: &'a LockValue,
        command: Command,
        deadline: Instant,
    ) -> impl Iterator<Item = Request> + use<'a> {
        let round = self.id;
        let native = self.native;
        let aof = self.aof && command.must_persist();
        self.nodes().map(move |node| Request {
            round,
            node,
            keys: keys.clone(),
            value: value.clone(),
            kind: kind.clone(),
            command,
            client: None,
            native,
            aof,
            form: Default::default(),
            deadline,
            give_up_at: deadline,
            payload: None,
        })
    }

    /// Records a vote. Returns false (and records nothing) for a reply from
    /// another round, an unknown node, or a node that already answered.
    pub(crate) fn record(&mut self, round: RoundId, node: NodeId, vote: NodeVote) -> bool {
        if round != self.id {
            return false;
        }
        if planted!(DuplicateVoteCounted) && self.repeat_as_new(node, &vote) {
            return true;
        }
        match self.votes.get_mut(node.0) {
            Some(slot @ NodeVote::Pending) => {
                *slot = vote;
                self.answered += 1;
                true
            }
            _ => false,
        }
    }

    /// Planted bug: a repeated answer of `node` fills another node's empty
    /// slot, as if that node had said the same.
    #[cfg(feature = "planted-bugs")]
    fn repeat_as_new(&mut self, node: NodeId, vote: &NodeVote) -> bool {
        let repeated = self
            .votes
            .get(node.0)
            .is_some_and(|v| !matches!(v, NodeVote::Pending));
        let empty = self
            .votes
            .iter_mut()
            .find(|v| matches!(v, NodeVote::Pending));
        match empty {
            Some(slot) if repeated => {
                *slot = vote.clone();
                self.answered += 1;
                true
            }
            _ => false,
        }
    }

    #[cfg(not(feature = "planted-bugs"))]
    fn repeat_as_new(&mut self, _: NodeId, _: &NodeVote) -> bool {
        false
    }

    /// Whether `node` timed out in this round (for a planted bug).
    #[cfg(feature = "planted-bugs")]
    pub(crate) fn timed_out(&self, node: NodeId) -> bool {
        matches!(self.votes.get(node.0), Some(NodeVote::Failed(e)) if e.kind == crate::NodeErrorKind::Timeout)
    }

    #[cfg(not(feature = "planted-bugs"))]
    pub(crate) fn timed_out(&self, _: NodeId) -> bool {
        false
    }

    /// Marks every node that has not answered as timed out.
    pub(crate) fn expire(&mut self) {
        for slot in &mut self.votes {
            if matches!(slot, NodeVote::Pending) {
                *slot = NodeVote::Failed(NodeError::timeout(self.timeout));
                self.answered += 1;
            }
        }
    }

    /// Whether `node` was not asked in this round: known slow, its request
    /// was answered by the driver ([`Reply::skipped`](crate::Reply::skipped)),
    /// so nothing of this round reached it.
    pub(crate) fn skipped(&self, node: NodeId) -> bool {
        matches!(self.votes.get(node.0), Some(NodeVote::Failed(e)) if e.kind == crate::NodeErrorKind::Slow)
    }

    /// The nodes [`skipped`](Self::skipped) in this round.
    pub(crate) fn skipped_nodes(&self) -> Vec<NodeId> {
        self.nodes().filter(|&node| self.skipped(node)).collect()
    }

    /// Records `vote` for every node of `nodes` before anything is sent:
    /// nodes a round does not ask.
    pub(crate) fn settle(&mut self, nodes: &[NodeId], vote: &NodeVote) {
        for node in nodes {
            if let Some(slot @ NodeVote::Pending) = self.votes.get_mut(node.0) {
                *slot = vote.clone();
                self.answered += 1;
            }
        }
    }

    pub(crate) fn vote(&self, node: NodeId) -> Option<&NodeVote> {
        self.votes.get(node.0)
    }

    pub(crate) fn granted(&self, node: NodeId) -> bool {
        self.votes.get(node.0).is_some_and(NodeVote::is_yes)
    }

    pub(crate) fn all_answered(&self) -> bool {
        self.answered == self.votes.len()
    }

    pub(crate) fn tally(&self) -> Tally {
        let n = self.votes.len();
        let q = quorum(n);
        let yes = self.votes.iter().filter(|v| v.is_yes()).count();
        let no = self
            .votes
            .iter()
            .filter(|v| !v.is_yes() && !matches!(v, NodeVote::Pending))
            .count();
        if yes >= q {
            Tally::Won
        } else if n - no < q {
            Tally::Lost
        } else {
            Tally::Open
        }
    }

    /// How many nodes voted `vote`-like (`Pending` counts nodes not heard from).
    pub(crate) fn count(&self, matches: impl Fn(&NodeVote) -> bool) -> usize {
        self.votes.iter().filter(|v| matches(v)).count()
    }

    /// Whether node failures alone (not other holders) rule out a quorum.
    pub(crate) fn failures_rule_out_quorum(&self) -> bool {
        let n = self.votes.len();
        let failed = self
            .votes
            .iter()
            .filter(|v| matches!(v, NodeVote::Failed(_)))
            .count();
        n - failed < quorum(n)
    }

    /// Whether nodes whose key has another type alone rule out a quorum: no
    /// retry can succeed until someone changes that key.
    pub(crate) fn wrong_type_rules_out_quorum(&self) -> bool {
        let n = self.votes.len();
        let wrong_type = self
            .votes
            .iter()
            .filter(
                |v| matches!(v, NodeVote::Failed(e) if e.kind == crate::NodeErrorKind::WrongType),
            )
            .count();
        n - wrong_type < quorum(n)
    }

    pub(crate) fn votes(&self, now: Instant) -> Votes {
        Votes {
            names: self.names.clone(),
            votes: self.votes.clone(),
            round: self.id,
            elapsed: now.saturating_duration_since(self.started),
        }
    }
}
