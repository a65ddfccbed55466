//! The operations a [`Client`](super::Client) runs: every machine of the
//! core behind one type, and what each reports.

use std::time::Instant;

use rand_core::Rng;

use crate::{
    AcquireEvent, Acquisition, ExtendError, Extended, Extension, HandOver, InspectReport,
    Inspection, KeptLock, KeptLockEvent, Key, LeaderRead, LeaderReport, Machine, Notice, Proclaim,
    Release, ReleaseReport, Reply, Request, Term, TermEvent,
};

/// One operation of a [`Client`](super::Client): any machine of the core.
/// Build the machine as usual ([`Acquisition::with_spec`],
/// [`Lock::release`](crate::Lock::release), ...) and hand it to
/// [`Client::start`](super::Client::start); the client gives it back with
/// its final event.
#[derive(Debug)]
#[non_exhaustive]
pub enum Operation<R> {
    /// A lock of any kind, a semaphore's permit or a campaign.
    Acquire(Box<Acquisition<R>>),
    /// An extension by hand.
    Extend(Box<Extension>),
    /// A release, a resignation.
    Release(Box<Release>),
    /// A lock kept alive until it is lost or released.
    KeepAlive(Box<KeptLock>),
    /// A leader's term, renewed until lost.
    Term(Box<Term>),
    /// A leader's proclamation.
    Proclaim(Box<Proclaim>),
    /// Who leads an election.
    ReadLeader(Box<LeaderRead>),
    /// What every node holds of a lock (`redlock status`).
    Inspect(Box<Inspection>),
}

/// What an operation reports, as its machine's event.
#[derive(Debug)]
#[non_exhaustive]
pub enum OpEvent {
    /// An [`Operation::Acquire`]'s.
    Acquire(AcquireEvent),
    /// An [`Operation::Extend`]'s.
    Extend(Result<Extended, ExtendError>),
    /// An [`Operation::Release`]'s.
    Release(ReleaseReport),
    /// An [`Operation::KeepAlive`]'s.
    KeepAlive(KeptLockEvent),
    /// An [`Operation::Term`]'s.
    Term(TermEvent),
    /// An [`Operation::Proclaim`]'s.
    Proclaim(Result<u64, ExtendError>),
    /// An [`Operation::ReadLeader`]'s.
    ReadLeader(LeaderReport),
    /// An [`Operation::Inspect`]'s.
    Inspect(InspectReport),
    /// The final event of an operation that takes or holds a lock (an
    /// acquisition, an extension, a keep-alive, a term, a proclamation)
    /// when its client is [closed](super::Client::close): it was undone,
    /// and a lock it kept alive was released.
    Closed,
}

impl OpEvent {
    /// Whether this final event hands out a lock that excludes the next
    /// waiter of its channels ([`Lock::excludes_next`](crate::Lock::excludes_next)):
    /// the waiter was served.
    pub(crate) fn serves_waiter(&self) -> bool {
        matches!(self, OpEvent::Acquire(AcquireEvent::Acquired(lock)) if lock.excludes_next())
    }
}

/// Calls `$body` with `$machine` bound to the operation's machine.
macro_rules! each {
    ($operation:expr, $machine:ident => $body:expr) => {
        match $operation {
            Operation::Acquire($machine) => $body,
            Operation::Extend($machine) => $body,
            Operation::Release($machine) => $body,
            Operation::KeepAlive($machine) => $body,
            Operation::Term($machine) => $body,
            Operation::Proclaim($machine) => $body,
            Operation::ReadLeader($machine) => $body,
            Operation::Inspect($machine) => $body,
        }
    };
}

impl<R: Rng> Operation<R> {
    /// Abandons it at `now` with no client to run it: what must reach the
    /// nodes to undo it (an attempt's withdraws, a queue's leaves), for a
    /// caller that sends it by other means (blocking connections as the
    /// process exits).
    pub fn undo(mut self, now: Instant) -> Vec<Request> {
        self.abandon(now);
        std::iter::from_fn(|| self.poll_request())
            .filter(|request| request.command.must_arrive())
            .collect()
    }

    /// Whether it leaves nothing on the nodes, so it runs on a closed
    /// client: a release, a read.
    pub(crate) fn leaves_nothing(&self) -> bool {
        matches!(
            self,
            Operation::Release(_) | Operation::ReadLeader(_) | Operation::Inspect(_)
        )
    }

    /// The lock a keep-alive or a term holds, as it stands now (its
    /// extensions applied, the nodes its restores filled).
    pub(crate) fn held_lock(&self) -> Option<&crate::Lock> {
        match self {
            Operation::KeepAlive(kept) => Some(kept.lock()),
            Operation::Term(term) => Some(term.lock()),
            _ => None,
        }
    }

    pub(crate) fn poll_request(&mut self) -> Option<Request> {
        each!(self, machine => machine.poll_request())
    }

    pub(crate) fn poll_event(&mut self) -> Option<OpEvent> {
        match self {
            Operation::Acquire(machine) => machine.poll_event().map(OpEvent::Acquire),
            Operation::Extend(machine) => machine.poll_event().map(OpEvent::Extend),
            Operation::Release(machine) => machine.poll_event().map(OpEvent::Release),
            Operation::KeepAlive(machine) => machine.poll_event().map(OpEvent::KeepAlive),
            Operation::Term(machine) => machine.poll_event().map(OpEvent::Term),
            Operation::Proclaim(machine) => machine.poll_event().map(OpEvent::Proclaim),
            Operation::ReadLeader(machine) => machine.poll_event().map(OpEvent::ReadLeader),
            Operation::Inspect(machine) => machine.poll_event().map(OpEvent::Inspect),
        }
    }

    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        each!(self, machine => machine.poll_timeout())
    }

    pub(crate) fn poll_listen(&mut self) -> Option<Vec<Key>> {
        each!(self, machine => machine.poll_listen())
    }

    pub(crate) fn ordered_by_masters(&self) -> bool {
        each!(self, machine => machine.ordered_by_masters())
    }

    pub(crate) fn poll_hand_over(&mut self) -> Option<HandOver> {
        each!(self, machine => machine.poll_hand_over())
    }

    pub(crate) fn handle_reply(&mut self, reply: Reply, now: Instant) {
        each!(self, machine => machine.handle_reply(reply, now))
    }

    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        each!(self, machine => machine.handle_timeout(now))
    }

    pub(crate) fn handle_delivery(&mut self, notice: Notice, at: Instant, now: Instant) {
        each!(self, machine => machine.handle_delivery(notice, at, now))
    }

    pub(crate) fn is_done(&self) -> bool {
        each!(self, machine => machine.is_done())
    }

    pub(crate) fn abandon(&mut self, now: Instant) {
        each!(self, machine => machine.abandon(now))
    }
}
