//! Releasing a lock on every node.

use std::collections::VecDeque;
use std::time::Instant;

use crate::acquire::interpret;
use crate::quorum::Round;
use std::sync::Arc;

use crate::{
    AttemptId, Command, Key, LockKind, LockValue, NodeVote, Reply, Request, Settings, Votes,
};

/// What a release did on each node.
#[derive(Clone, Debug, PartialEq)]
pub struct ReleaseReport {
    votes: Votes,
    notices_refused: usize,
}

impl ReleaseReport {
    /// Nodes where our key was deleted.
    pub fn released(&self) -> usize {
        self.votes.granted()
    }

    /// Nodes where our value was no longer there: the key had expired, or
    /// another owner holds it (and was left alone).
    pub fn not_held(&self) -> usize {
        self.votes
            .votes()
            .iter()
            .filter(|v| matches!(v, NodeVote::Missing | NodeVote::HeldByOther(_)))
            .count()
    }

    /// Nodes that failed or timed out; our key may remain there until its TTL.
    pub fn failed(&self) -> usize {
        self.votes.failed()
    }

    /// True when no node failed: the key is gone from every node (or was never
    /// ours there).
    pub fn is_complete(&self) -> bool {
        self.failed() == 0
    }

    /// The per-node results.
    pub fn votes(&self) -> &Votes {
        &self.votes
    }

    /// Nodes where the key was deleted but the server refused to publish the
    /// release notice (an ACL user without rights on the `<key>\0released`
    /// channel). The release counts there all the same; waiting clients
    /// just retry on their timer. Switch notices off
    /// ([`Config::release_notices`](crate::Config::release_notices)) for such
    /// users.
    pub fn notices_refused(&self) -> usize {
        self.notices_refused
    }
}

impl std::fmt::Display for ReleaseReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "released on {} node(s), not held on {}, failed on {}: {}",
            self.released(),
            self.not_held(),
            self.failed(),
            self.votes
        )
    }
}

/// Releasing one lock value on every node, made by [`Lock::release`](crate::Lock::release)
/// or [`Release::new`] (for a value known from elsewhere).
///
/// Driven like the other machines; [`poll_outcome`](Self::poll_outcome) gives the
/// report once every node answered or the per-node timeout passed, so releasing
/// an expired lock, or one whose nodes are down, ends within one timeout.
#[derive(Debug)]
pub struct Release {
    round: Round,
    notices_refused: usize,
    requests: VecDeque<Request>,
    report: Option<ReleaseReport>,
    done: bool,
}

impl Release {
    /// Releases `value` on `key` on every node, starting at `now`, with the
    /// per-node timeout of every release,
    /// [`Settings::release_timeout`].
    pub fn new(
        settings: &Settings,
        key: Key,
        value: LockValue,
        attempt: AttemptId,
        now: Instant,
    ) -> Self {
        Self::of(
            settings,
            Arc::from([key]),
            LockKind::Exclusive,
            value,
            attempt,
            now,
        )
    }

    pub(crate) fn of(
        settings: &Settings,
        keys: Arc<[Key]>,
        kind: LockKind,
        value: LockValue,
        attempt: AttemptId,
        now: Instant,
    ) -> Self {
        let round = Round::new(
            attempt,
            settings.node_names(),
            now,
            settings.release_timeout(),
        );
        let requests = round
            .nodes()
            .map(|node| Request {
                attempt,
                node,
                keys: keys.clone(),
                value: value.clone(),
                kind: kind.clone(),
                command: settings.release_command(),
                deadline: round.deadline,
            })
            .collect();
        Self {
            round,
            notices_refused: 0,
            requests,
            report: None,
            done: false,
        }
    }

    /// The next request to send.
    pub fn poll_request(&mut self) -> Option<Request> {
        self.requests.pop_front()
    }

    /// When to call [`handle_timeout`](Self::handle_timeout).
    pub fn poll_timeout(&self) -> Option<Instant> {
        (!self.done).then_some(self.round.deadline)
    }

    /// The report, once every node answered or timed out (returned once).
    pub fn poll_outcome(&mut self) -> Option<ReleaseReport> {
        self.report.take()
    }

    /// Feeds one node's answer.
    pub fn handle_reply(&mut self, reply: Reply, now: Instant) {
        if self.done {
            return;
        }
        let refused = matches!(reply.result, Ok(crate::Response::Int(2)));
        let vote = interpret(Command::Release, reply.result);
        if refused && matches!(vote, NodeVote::Granted) && reply.attempt == self.round.attempt {
            self.notices_refused += 1;
        }
        if self.round.record(reply.attempt, reply.node, vote) && self.round.all_answered() {
            self.finish(now);
        }
    }

    /// Times out the nodes that have not answered.
    pub fn handle_timeout(&mut self, now: Instant) {
        if !self.done && now >= self.round.deadline {
            self.round.expire();
            self.finish(now);
        }
    }

    fn finish(&mut self, now: Instant) {
        self.done = true;
        self.report = Some(ReleaseReport {
            votes: self.round.votes(now),
            notices_refused: self.notices_refused,
        });
    }
}
