//! Extending a held lock with the same quorum rule as acquiring it.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::ops::machine::Machine;
use crate::quorum::{Round, quorum, remaining, valid_until};
use crate::wire::interpret_extend;
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
    /// Nodes where our value was missing (restarted empty), sent a
    /// [`Command::Restore`] with the result.
    pub restored: usize,
    /// The votes.
    pub votes: Votes,
}

/// One extension round, made by [`Lock::extend`].
///
/// Driven like every `Machine` until
/// `poll_event` gives the result; then
/// [`Lock::apply`] a success. Requests queued with the result are sent
/// without waiting for them (see below).
///
/// Each node runs [`scripts::EXTEND`](crate::scripts::EXTEND) (or its kin):
/// where our value is there, it gets the new TTL; where it is missing or
/// held by another value, nothing changes. The extension counts only with a
/// quorum of nodes that still held our value, **before the current validity
/// ends**: once it ends, someone else may hold the lock, and extending where
/// our key survives would not make it ours again.
///
/// # Missing keys, and why they are set again only afterwards
///
/// With N nodes and a quorum Q, the lock is held while our value is on at
/// least Q nodes. So:
///
/// - **Q nodes still held our value**: extended. The lock never ended. A
///   node where it was missing (a master that restarted empty, or expired it
///   early) is then sent a [`Command::Restore`], which sets our value again
///   unless someone else's is there: the minority is repaired, and
///   [`Extended::restored`] counts those nodes.
/// - **our value is gone from more than N − Q nodes** (missing, another
///   owner's, a key of another type): [`ExtendError::Gone`], or
///   [`ExtendError::Lost`] when another owner holds it. The lock had ended,
///   typically because someone released it by its value on a quorum (an
///   operator's `release --value`), and another client could have acquired
///   and even released it since. Nothing is set again, and our value is
///   released where it is left, after the extend on each node's connection.
///   Only our value is ever deleted.
/// - otherwise, once no quorum of confirmations is possible (nodes failed or
///   did not answer), [`ExtendError::NoQuorum`]: nothing is known to be gone,
///   so a keep-alive retries while validity is left.
///
/// Why not set a missing key again in the same script, as soon as it is
/// seen: then a lock an operator released on a bare quorum could come back.
/// Say the operator deleted our value on n0 and n1 while n2 was out of its
/// reach, and our extension then finds n1 missing, n2 ours, and n0 silent: one
/// missing node is within what a quorum can spare, yet our value was on one
/// node only. Re-set on n1 (and on n0, when the silent request lands), the
/// lock would be held again without an acquire. Only confirmations count,
/// and a late request to a silent node finds nothing to extend.
///
/// Any other failed extension releases nothing: the caller should treat the
/// lock as lost and release it.
#[cfg_attr(feature = "model-check", derive(Clone))]
#[derive(Debug)]
#[cfg_attr(not(feature = "simulation"), allow(unreachable_pub))]
pub struct Extension {
    round: Round,
    /// The lock's keys, kind and value, for the releases after a loss.
    keys: std::sync::Arc<[crate::Key]>,
    kind: crate::LockKind,
    value: crate::LockValue,
    release_timeout: Duration,
    release_command: Command,
    /// A permit's semaphore k, in decimal: every extend and restore names
    /// it, to keep the semaphore's permits key alive as long as the slot
    /// ([`Request::payload`]).
    permits: Option<std::sync::Arc<[u8]>>,
    /// The keys its clean-up release sends (the waiters mark in place of
    /// a fenced lock's counter, a permit's semaphore keys: see
    /// `Settings::release_keys`), and what it names beside them (a
    /// permit's k, [`Request::payload`]).
    release_keys: std::sync::Arc<[crate::Key]>,
    release_payload: Option<std::sync::Arc<[u8]>>,
    /// Nodes the lock's value was never sent to ([`Lock::untouched`]): its
    /// clean-up release does not ask them.
    untouched: Vec<crate::NodeId>,
    ttl: Ttl,
    drift: Duration,
    old_valid_until: Instant,
    requests: VecDeque<Request>,
    outcome: Option<Result<Extended, ExtendError>>,
    done: bool,
}

#[cfg_attr(not(feature = "simulation"), allow(unreachable_pub))]
impl Extension {
    pub(crate) fn new(lock: &Lock, id: RoundId, ttl: Ttl, now: Instant) -> Self {
        let settings = lock.settings();
        let round = Round::new(id, settings, now, settings.node_timeout_for(ttl));
        let command = Command::Extend { ttl };
        let permits = lock
            .permits()
            .filter(|_| !planted!(PermitsNotKeptAlive))
            .map(|permits| std::sync::Arc::from(permits.to_string().as_bytes()));
        // Its clean-up release, a permit's, names the semaphore's keys.
        let release_semaphore = lock
            .semaphore
            .clone()
            .filter(|_| !planted!(PermitReleaseKeepsPermits));
        let requests = round
            .fan_out(
                lock.keys(),
                lock.kind(),
                lock.value(),
                command,
                round.deadline,
            )
            .map(|request| Request {
                payload: permits.clone(),
                ..request
            })
            .collect();
        Self {
            permits,
            drift: settings.drift(ttl),
            keys: lock.keys().clone(),
            kind: lock.kind().clone(),
            value: lock.value().clone(),
            release_timeout: settings.release_timeout(),
            release_command: settings.release_command(lock.kind()),
            release_keys: settings.release_keys(
                lock.keys().clone(),
                lock.kind(),
                settings.release_command(lock.kind()),
                release_semaphore.as_deref(),
            ),
            release_payload: release_semaphore
                .as_deref()
                .map(crate::ops::release::permits_payload),
            untouched: lock.untouched.clone(),
            round,
            ttl,
            old_valid_until: lock.valid_until(),
            requests,
            outcome: None,
            done: false,
        }
    }

    #[cfg(feature = "simulation")]
    /// The round's id.
    pub fn round(&self) -> RoundId {
        self.round.id
    }

    fn decide(&mut self, now: Instant) {
        let expired = remaining(self.old_valid_until, now).is_none();
        let n = self.round.nodes().len();
        let needed = quorum(n);
        let spare = n - needed;
        let ours = self.round.count(|vote| matches!(vote, NodeVote::Granted));
        let missing = self.round.count(|vote| matches!(vote, NodeVote::Missing));
        let gone = self.round.count(|vote| match vote {
            NodeVote::Missing | NodeVote::HeldByOther(_) => true,
            NodeVote::Failed(error) => error.kind == NodeErrorKind::WrongType,
            _ => false,
        });
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
        } else if ours >= needed {
            let votes = self.round.votes(now);
            match valid_until(self.round.started, self.ttl, self.drift)
                .and_then(|until| Some((until, remaining(until, now)?)))
            {
                Some((valid_until, validity)) => {
                    self.queue_restores(now);
                    Ok(Extended {
                        valid_until,
                        ttl: self.ttl,
                        validity,
                        restored: missing,
                        votes,
                    })
                }
                None => Err(ExtendError::Expired {
                    expired_for: Duration::ZERO,
                    votes: Some(votes),
                }),
            }
        } else if ours + pending >= needed {
            // Nodes not heard from yet could still confirm.
            return;
        } else {
            // No quorum of confirmations is possible, and too little is gone
            // to call the lock lost: nodes failed or did not answer.
            Err(ExtendError::NoQuorum {
                votes: self.round.votes(now),
            })
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

    /// Sets our value again where it was missing, now that a quorum
    /// confirmed the lock. Best effort: the next extension tries again.
    fn queue_restores(&mut self, now: Instant) {
        let deadline = now + self.round.timeout;
        let command = Command::Restore { ttl: self.ttl };
        let missing: Vec<_> = self
            .round
            .fan_out(&self.keys, &self.kind, &self.value, command, deadline)
            .filter(|request| matches!(self.round.vote(request.node), Some(NodeVote::Missing)))
            .map(|request| Request {
                payload: self.permits.clone(),
                ..request
            })
            .collect();
        self.requests.extend(missing);
    }

    /// Releases our value on every node where it is left, now that the lock
    /// is lost. Each node runs it after its extend (one connection per node
    /// keeps the order).
    fn queue_releases(&mut self, now: Instant) {
        let deadline = now + self.release_timeout;
        let command = self.release_command;
        let requests = self.round.fan_out(
            &self.release_keys,
            &self.kind,
            &self.value,
            command,
            deadline,
        );
        let untouched = &self.untouched;
        // The script: the lock is gone here, so others likely waited and
        // marked our value, which a plain `DELIFEQ` leaves; the script would
        // then follow it (`Request::follow_up`), a round trip later.
        self.requests.extend(
            requests
                .filter(|request| !untouched.contains(&request.node))
                .map(|request| Request {
                    native: false,
                    payload: self.release_payload.clone(),
                    ..request
                }),
        );
    }

    /// The request to send again after `reply`, if it is a plain extend
    /// (`SET ... IFEQ`) that found our value marked as waited for
    /// ([`waited`](crate::waited)) and so set nothing: the extend script,
    /// which extends it marked, keeping the mark.
    fn as_script(&self, reply: &Reply) -> Option<Request> {
        let Ok(crate::Response::Data(held)) = &reply.result else {
            return None;
        };
        let marked = reply.native == Some(crate::native::Native::SetIfEqGet)
            && reply.round == self.round.id
            && held.as_slice() != self.value.as_bytes()
            && crate::waited::is_ours(held, self.value.as_bytes());
        if !marked {
            return None;
        }
        let command = Command::Extend { ttl: self.ttl };
        let mut requests = self.round.fan_out(
            &self.keys,
            &self.kind,
            &self.value,
            command,
            self.round.deadline,
        );
        let again = requests.find(|request| request.node == reply.node)?;
        Some(Request {
            native: false,
            payload: self.permits.clone(),
            ..again
        })
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
        if let Some(again) = self.as_script(&reply) {
            self.requests.push_back(again);
            return;
        }
        let vote = interpret_extend(
            Command::Extend { ttl: self.ttl },
            reply.native,
            reply.result,
            self.value.as_bytes(),
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
    machinery_fn! {
        /// Starts extending the lock to `ttl` from `now`.
        ///
        /// Fails at once with [`ExtendError::Expired`] when no validity is left:
        /// an expired lock may already belong to someone else.
        fn extend(&mut self, ttl: Ttl, now: Instant) -> Result<Extension, ExtendError> {
            if !self.is_valid(now) {
                return Err(ExtendError::Expired {
                    expired_for: now.saturating_duration_since(self.valid_until),
                    votes: None,
                });
            }
            let attempt = self.next_round();
            self.longest_ttl = self.longest_ttl.max(ttl);
            Ok(Extension::new(self, attempt, ttl, now))
        }
    }

    /// Records a successful extension.
    pub fn apply(&mut self, extended: &crate::Extended) {
        // Our value reaches a node only by a restore, sent where the
        // extension found it missing.
        self.untouched
            .retain(|node| !matches!(extended.votes.get(*node), Some(NodeVote::Missing)));
        self.valid_until = extended.valid_until;
        self.ttl = extended.ttl;
        self.extensions += 1;
    }
}
