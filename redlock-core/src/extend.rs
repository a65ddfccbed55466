//! Extending a held lock with the same quorum rule as acquiring it.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::acquire::interpret;
use crate::quorum::{Round, Tally, remaining, valid_until};
use crate::{AttemptId, Command, ExtendError, Lock, Reply, Request, Ttl, Votes};

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
/// Driven like an [`Acquisition`](crate::Acquisition): drain
/// [`poll_request`](Self::poll_request), feed
/// [`handle_reply`](Self::handle_reply) and
/// [`handle_timeout`](Self::handle_timeout) at
/// [`poll_timeout`](Self::poll_timeout), until
/// [`poll_outcome`](Self::poll_outcome) gives the result; then
/// [`Lock::apply`] a success.
///
/// Each node runs [`scripts::EXTEND`](crate::scripts::EXTEND): our key gets the
/// new TTL; a key that is missing (its node restarted empty) is set again, but a
/// key held by another value is never touched. The extension counts only with a
/// quorum of yes votes **before the current validity ends**: once it ends,
/// someone else may hold the lock, and extending where our key survives would
/// not make it ours again. A failed extension releases nothing: the caller
/// should treat the lock as lost and release it.
#[derive(Debug)]
pub struct Extension {
    round: Round,
    ttl: Ttl,
    drift: Duration,
    old_valid_until: Instant,
    requests: VecDeque<Request>,
    outcome: Option<Result<Extended, ExtendError>>,
    done: bool,
}

impl Extension {
    pub(crate) fn new(lock: &Lock, attempt: AttemptId, ttl: Ttl, now: Instant) -> Self {
        let settings = lock.settings();
        let round = Round::new(
            attempt,
            settings.node_names(),
            now,
            settings.node_timeout_for(ttl),
        );
        let command = Command::Extend { ttl };
        let requests = round
            .nodes()
            .map(|node| Request {
                attempt,
                node,
                keys: lock.keys().clone(),
                value: lock.value().clone(),
                kind: lock.kind().clone(),
                command,
                deadline: round.deadline,
            })
            .collect();
        Self {
            drift: settings.drift(ttl),
            round,
            ttl,
            old_valid_until: lock.valid_until(),
            requests,
            outcome: None,
            done: false,
        }
    }

    /// The round's id.
    pub fn attempt(&self) -> AttemptId {
        self.round.attempt
    }

    /// The next request to send.
    pub fn poll_request(&mut self) -> Option<Request> {
        self.requests.pop_front()
    }

    /// When to call [`handle_timeout`](Self::handle_timeout): the per-node
    /// timeout, or the end of the current validity if that comes first.
    pub fn poll_timeout(&self) -> Option<Instant> {
        (!self.done).then(|| self.round.deadline.min(self.old_valid_until))
    }

    /// The result, once decided (returned once).
    pub fn poll_outcome(&mut self) -> Option<Result<Extended, ExtendError>> {
        self.outcome.take()
    }

    /// Feeds one node's answer.
    pub fn handle_reply(&mut self, reply: Reply, now: Instant) {
        if self.done {
            return;
        }
        let vote = interpret(Command::Extend { ttl: self.ttl }, reply.result);
        if self.round.record(reply.attempt, reply.node, vote) {
            self.decide(now);
        }
    }

    /// Advances time: the validity may have ended, or silent nodes time out.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.done {
            return;
        }
        if now >= self.round.deadline {
            self.round.expire();
        }
        self.decide(now);
    }

    fn decide(&mut self, now: Instant) {
        let expired = remaining(self.old_valid_until, now).is_none();
        let result = match self.round.tally() {
            _ if expired => Err(ExtendError::Expired {
                expired_for: now.saturating_duration_since(self.old_valid_until),
                votes: Some(self.round.votes(now)),
            }),
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
                        restored: votes
                            .votes()
                            .iter()
                            .filter(|v| matches!(v, crate::NodeVote::Restored))
                            .count(),
                        votes,
                    }),
                    None => Err(ExtendError::Expired {
                        expired_for: Duration::ZERO,
                        votes: Some(votes),
                    }),
                }
            }
            Tally::Lost if self.round.failures_rule_out_quorum() => Err(ExtendError::NoQuorum {
                votes: self.round.votes(now),
            }),
            Tally::Lost => Err(ExtendError::Lost {
                votes: self.round.votes(now),
            }),
        };
        self.done = true;
        self.outcome = Some(result);
    }
}
