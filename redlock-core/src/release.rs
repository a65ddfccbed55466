//! Releasing a lock on every node.

use std::collections::VecDeque;
use std::time::Instant;

use crate::machine::Machine;
use crate::quorum::{Round, quorum};
use crate::wire::interpret;
use std::sync::Arc;

use crate::{
    Command, Key, LockKind, LockValue, NodeVote, Reply, Request, RoundId, Settings, Votes,
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
            .filter(|v| {
                matches!(
                    v,
                    NodeVote::Missing | NodeVote::NotOurs | NodeVote::HeldByOther(_)
                )
            })
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

    /// Nodes a lock needs: the quorum of the nodes released on.
    pub fn quorum(&self) -> usize {
        quorum(self.votes.votes().len())
    }

    /// True when the lock is free for others: fewer than a quorum of nodes
    /// failed, so even if our value stays on those until its TTL, it cannot
    /// hold the lock.
    pub fn frees_lock(&self) -> bool {
        self.failed() < self.quorum()
    }

    /// True when the value was deleted nowhere and too few nodes failed for
    /// it to hold the lock: it was not held (expired, released, mistyped or
    /// never held), so the release did nothing.
    pub fn held_nowhere(&self) -> bool {
        self.released() == 0 && self.frees_lock()
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
    /// `released on 3 of 3 nodes in 0.4 ms [a: released; b: released; c: released]`,
    /// in the words of a release: a node that deleted our key "released",
    /// never "granted".
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "released on {} of {} nodes",
            self.released(),
            self.votes.votes().len()
        )?;
        if self.not_held() > 0 {
            write!(f, ", not held on {}", self.not_held())?;
        }
        if self.failed() > 0 {
            write!(f, ", failed on {}", self.failed())?;
        }
        write!(f, " in {} [", crate::limits::Millis(self.votes.elapsed()))?;
        for (i, (name, vote)) in self.votes.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            match vote {
                NodeVote::Granted | NodeVote::Restored => write!(f, "{name}: released")?,
                NodeVote::Missing => write!(f, "{name}: not held (key already gone)")?,
                NodeVote::NotOurs | NodeVote::HeldByOther(_) => {
                    write!(f, "{name}: not held (another value; left alone)")?
                }
                other => write!(f, "{name}: {other}")?,
            }
        }
        f.write_str("]")
    }
}

/// Releasing one lock value on every node, made by [`Lock::release`](crate::Lock::release)
/// or [`Release::new`] (for a value known from elsewhere).
///
/// Driven like every [`Machine`]; [`poll_event`](Machine::poll_event) gives the
/// report once every node answered or the per-node timeout passed, so releasing
/// an expired lock, or one whose nodes are down, ends within one timeout.
#[cfg_attr(feature = "model-check", derive(Clone))]
#[derive(Debug)]
pub struct Release {
    round: Round,
    notices_refused: usize,
    requests: VecDeque<Request>,
    /// The key on whose channel the release hands over, until given
    /// ([`Machine::poll_hand_over`]).
    hand_over: Option<Key>,
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
        attempt: RoundId,
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
        id: RoundId,
        now: Instant,
    ) -> Self {
        let round = Round::new(id, settings, now, settings.release_timeout());
        let command = settings.release_command(&kind);
        let hand_over = (settings.release_notices() && hands_over(&kind)).then(|| keys[0].clone());
        let keys = settings.release_keys(keys, &kind, command);
        let requests = round
            .fan_out(&keys, &kind, &value, command, round.deadline)
            .collect();
        Self {
            round,
            notices_refused: 0,
            requests,
            hand_over,
            report: None,
            done: false,
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

/// Whether releasing a lock of `kind` hands it over to this client's
/// waiters: a fair lock's only. Its waiters attempt at once, and the
/// masters' queues decide who is next; a plain lock's first waiter told
/// first would always win before other clients' waiters, who hear of the
/// release from the masters (see [`WaitQueue`](crate::WaitQueue)).
fn hands_over(kind: &LockKind) -> bool {
    matches!(kind, LockKind::Fair { .. })
}

impl Machine for Release {
    /// The report, once every node answered or timed out.
    type Event = ReleaseReport;

    fn poll_request(&mut self) -> Option<Request> {
        self.requests.pop_front()
    }

    fn poll_event(&mut self) -> Option<ReleaseReport> {
        self.report.take()
    }

    /// The lock's channels, once the release is queued for every node: the
    /// client's waiters learn of it at once (who may attempt then is the
    /// [`WaitQueue`](crate::WaitQueue)'s rule), and an attempt sent from
    /// now on runs after the release on each node.
    fn poll_hand_over(&mut self) -> Option<Vec<Key>> {
        if !self.requests.is_empty() {
            return None;
        }
        let key = self.hand_over.take()?;
        Some(vec![crate::config::release_channel(&key)])
    }

    fn poll_timeout(&self) -> Option<Instant> {
        (!self.done).then_some(self.round.deadline)
    }

    fn handle_reply(&mut self, reply: Reply, now: Instant) {
        if self.done {
            return;
        }
        // Only the release script answers 2 (a refused notice).
        let refused = reply.native.is_none() && matches!(reply.result, Ok(crate::Response::Int(2)));
        let vote = interpret(Command::Release, reply.native, reply.result);
        let granted = matches!(vote, NodeVote::Granted);
        // Counted once per node: a repeated answer is not recorded again.
        if !self.round.record(reply.round, reply.node, vote) {
            return;
        }
        if refused && granted {
            self.notices_refused += 1;
        }
        if self.round.all_answered() {
            self.finish(now);
        }
    }

    /// Times out the nodes that have not answered.
    fn handle_timeout(&mut self, now: Instant) {
        if !self.done && now >= self.round.deadline {
            self.round.expire();
            self.finish(now);
        }
    }

    fn is_done(&self) -> bool {
        self.done
    }
}

impl crate::Lock {
    /// Starts releasing the lock on every node at `now`, with the per-node
    /// timeout of every release ([`Settings::release_timeout`]).
    pub fn release(&mut self, now: Instant) -> Release {
        let attempt = self.next_round();
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
