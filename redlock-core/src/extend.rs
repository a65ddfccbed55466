//! Extending a held lock with the same quorum rule as acquiring it.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::machine::Machine;
use crate::quorum::{Round, Tally, quorum, remaining, valid_until};
use crate::wire::interpret;
use crate::{
    Command, ExtendError, Lock, NodeErrorKind, NodeVote, Reply, Request, RoundId, Ttl, Votes,
};

/// A successful extension, to pass to [`Lock::apply`].
#[derive(Clone, Debug, PartialEq)]
pub struct Extended {
    /// The new end of validity: start of the extend round + TTL - drift.
    pub valid_until: Instant,
    /// The TTL the nodes now hold.
    pub ttl: Ttl,
    /// Validity left at the decision.
    pub validity: Duration,
    /// Nodes whose key was missing and was set again (restarted empty).
    pub restored: usize,
    /// The votes.
    pub votes: Votes,
}

/// One extension round, made by [`Lock::extend`].
///
/// Driven like every [`Machine`] until
/// [`poll_event`](Machine::poll_event) gives the result; then
/// [`Lock::apply`] a success. Requests queued with the result are releases
/// to send without waiting for them (see below).
///
/// Each node runs [`scripts::EXTEND`](crate::scripts::EXTEND) (or its kin):
/// our key gets the new TTL; a key that is missing is set again, but a key
/// held by another value is never touched. The extension counts only with a
/// quorum of yes votes **before the current validity ends**: once it ends,
/// someone else may hold the lock, and extending where our key survives would
/// not make it ours again.
///
/// # Which missing keys may be re-set
///
/// With N nodes and a quorum Q, a lock is held while our value is on at least
/// Q nodes. Let *gone* be the nodes that answered that our value was not
/// there: missing (and re-set), held by another owner, or a key of another
/// type. Then:
///
/// - **gone ≤ N − Q, and still ours + re-set ≥ Q**: extended. Our value was
///   on at least N − gone ≥ Q nodes (counting those that did not answer as
///   possibly still holding it) until this round, so the lock never ended and
///   nobody else could have taken a quorum. A missing key here is a master
///   that restarted empty or expired it early; re-setting it repairs the
///   minority. The decision waits for the nodes not heard from yet (or their
///   timeout) whenever their answers could still push gone over N − Q.
/// - **gone > N − Q**: [`ExtendError::Gone`] (or [`ExtendError::Lost`] when
///   no key was missing, only held by others): our value was on fewer than Q
///   nodes, so the lock had ended, typically because someone released it by
///   its value on a quorum (an operator's `release --value`), and another
///   client could have acquired and even released it since. Re-creating the
///   keys would take the lock back without an acquire, so the extension
///   instead queues a release of our value on every node, sent after the
///   extend on each node's connection: the keys it re-set are deleted again.
///   Only our value is ever deleted.
/// - otherwise, with too few answers for a quorum, [`ExtendError::NoQuorum`]:
///   nothing is known to be gone, so a keep-alive retries while validity is
///   left.
///
/// Any other failed extension releases nothing: the caller should treat the
/// lock as lost and release it.
#[cfg_attr(feature = "model-check", derive(Clone))]
#[derive(Debug)]
pub struct Extension {
    round: Round,
    /// The lock's keys, kind and value, for the releases after a loss.
    keys: std::sync::Arc<[crate::Key]>,
    kind: crate::LockKind,
    value: crate::LockValue,
    release_timeout: Duration,
    release_command: Command,
    ttl: Ttl,
    drift: Duration,
    old_valid_until: Instant,
    requests: VecDeque<Request>,
    outcome: Option<Result<Extended, ExtendError>>,
    done: bool,
}

impl Extension {
    pub(crate) fn new(lock: &Lock, id: RoundId, ttl: Ttl, now: Instant) -> Self {
        let settings = lock.settings();
        let round = Round::new(id, settings, now, settings.node_timeout_for(ttl));
        let command = Command::Extend { ttl };
        let requests = round
            .fan_out(
                lock.keys(),
                lock.kind(),
                lock.value(),
                command,
                round.deadline,
            )
            .collect();
        Self {
            drift: settings.drift(ttl),
            keys: lock.keys().clone(),
            kind: lock.kind().clone(),
            value: lock.value().clone(),
            release_timeout: settings.release_timeout(),
            release_command: settings.release_command(),
            round,
            ttl,
            old_valid_until: lock.valid_until(),
            requests,
            outcome: None,
            done: false,
        }
    }

    /// The round's id.
    pub fn round(&self) -> RoundId {
        self.round.id
    }

    fn decide(&mut self, now: Instant) {
        let expired = remaining(self.old_valid_until, now).is_none();
        let n = self.round.nodes().len();
        let spare = n - quorum(n);
        let gone = self.round.count(|vote| match vote {
            NodeVote::Restored | NodeVote::HeldByOther(_) => true,
            NodeVote::Failed(error) => error.kind == NodeErrorKind::WrongType,
            _ => false,
        });
        let missing = self.round.count(|vote| matches!(vote, NodeVote::Restored));
        let pending = self.round.count(|vote| matches!(vote, NodeVote::Pending));
        let result = if expired {
            Err(ExtendError::Expired {
                expired_for: now.saturating_duration_since(self.old_valid_until),
                votes: Some(self.round.votes(now)),
            })
        } else if gone > spare {
            // Our value was on fewer than a quorum of nodes: see the type's docs.
            let votes = self.round.votes(now);
            Err(if missing == 0 {
                ExtendError::Lost { votes }
            } else {
                ExtendError::Gone { spare, votes }
            })
        } else {
            match self.round.tally() {
                // Nodes not heard from could still show our value gone.
                Tally::Won if gone + pending > spare => return,
                Tally::Open => return,
                Tally::Won => {
                    let votes = self.round.votes(now);
                    match valid_until(self.round.started, self.ttl, self.drift)
                        .and_then(|until| Some((until, remaining(until, now)?)))
                    {
                        Some((valid_until, validity)) => Ok(Extended {
                            valid_until,
                            ttl: self.ttl,
                            validity,
                            restored: missing,
                            votes,
                        }),
                        None => Err(ExtendError::Expired {
                            expired_for: Duration::ZERO,
                            votes: Some(votes),
                        }),
                    }
                }
                // No quorum is possible, and too little is gone to call the
                // lock lost: nodes failed or did not answer.
                Tally::Lost => Err(ExtendError::NoQuorum {
                    votes: self.round.votes(now),
                }),
            }
        };
        if matches!(
            result,
            Err(ExtendError::Gone { .. } | ExtendError::Lost { .. })
        ) {
            self.queue_releases(now);
        }
        self.done = true;
        self.outcome = Some(result);
    }

    /// Releases our value on every node: the keys this round re-set where
    /// the value was missing must not outlive the lock. Each node runs it
    /// after its extend (one connection per node keeps the order), so a key
    /// re-set by a late answer is deleted too.
    fn queue_releases(&mut self, now: Instant) {
        let deadline = now + self.release_timeout;
        let command = self.release_command;
        let requests = self
            .round
            .fan_out(&self.keys, &self.kind, &self.value, command, deadline);
        self.requests.extend(requests);
    }
}

impl Machine for Extension {
    /// The result, once decided.
    type Event = Result<Extended, ExtendError>;

    fn poll_request(&mut self) -> Option<Request> {
        self.requests.pop_front()
    }

    fn poll_event(&mut self) -> Option<Self::Event> {
        self.outcome.take()
    }

    /// The per-node timeout, or the end of the current validity if that
    /// comes first.
    fn poll_timeout(&self) -> Option<Instant> {
        (!self.done).then(|| self.round.deadline.min(self.old_valid_until))
    }

    fn handle_reply(&mut self, reply: Reply, now: Instant) {
        if self.done {
            return;
        }
        let vote = interpret(
            Command::Extend { ttl: self.ttl },
            reply.native,
            reply.result,
        );
        if self.round.record(reply.round, reply.node, vote) {
            self.decide(now);
        }
    }

    /// The validity may have ended, or silent nodes time out.
    fn handle_timeout(&mut self, now: Instant) {
        if self.done {
            return;
        }
        if now >= self.round.deadline {
            self.round.expire();
        }
        self.decide(now);
    }

    fn is_done(&self) -> bool {
        self.done
    }
}

impl Lock {
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
        let attempt = self.next_round();
        Ok(Extension::new(self, attempt, ttl, now))
    }

    /// Records a successful extension.
    pub fn apply(&mut self, extended: &crate::Extended) {
        self.valid_until = extended.valid_until;
        self.ttl = extended.ttl;
        self.extensions += 1;
    }
}
