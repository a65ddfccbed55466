//! The operations a [`Client`](super::Client) runs: every machine of the
//! core behind one type, and what each reports.

use std::time::{Duration, Instant};

use rand_core::Rng;

use std::sync::Arc;

use crate::ops::election_read::Observation;
use crate::{
    AcquireEvent, Acquisition, Attempts, ConfigError, ExtendError, Extended, Extension, HandOver,
    InspectReport, Inspection, KeepAlive, KeptLock, KeptLockEvent, Key, Leader, LeaderRead,
    LeaderReport, LeadershipLoss, Lock, LockKind, LockSpec, LockValue, Machine, Notice, Proclaim,
    Release, ReleaseReport, Reply, Request, RoundId, Settings, Term, TermEvent, Ttl,
};

/// One operation of a [`Client`](super::Client): a lock of any kind to
/// acquire, an extension, a release, a lock to keep alive, a leader's term
/// to renew, a proclamation, a read. Made by the functions below, handed
/// to [`Client::start`](super::Client::start), given back with its final
/// event ([`Output::Event`](super::Output::Event)); it may move to another
/// client half-way ([`Client::evict`](super::Client::evict)). What runs
/// inside is the core's business.
#[derive(Debug)]
pub struct Operation<R>(pub(crate) Kind<R>);

/// The machine an [`Operation`] runs.
#[derive(Debug)]
pub(crate) enum Kind<R> {
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
    /// Each new leader of an election.
    Observe(Box<Observation>),
    /// What every node holds of a lock (`redlock status`).
    Inspect(Box<Inspection>),
}

impl<R: Rng> Operation<R> {
    /// Acquires a lock of any kind (read, write, reentrant, fair,
    /// multi-resource, exclusive, fenced, a semaphore's permit) with `ttl`,
    /// its first attempt at `now`. `rng` supplies the lock values and the
    /// retry jitter: a CSPRNG in production, a seeded one in tests. Fails
    /// only for a spec that cannot work (a multi-resource lock of no
    /// resource, an empty owner id; on settings with a Redis Cluster node,
    /// keys in different hash slots: [`ConfigError::CrossSlot`]) and for a
    /// zero wait limit ([`ConfigError::ZeroDeadline`]). Its events are
    /// [`OpEvent::Acquire`].
    pub fn acquire(
        settings: Arc<Settings>,
        spec: LockSpec<'_>,
        ttl: Ttl,
        attempts: Attempts,
        now: Instant,
        rng: R,
    ) -> Result<Self, ConfigError> {
        Acquisition::with_spec(settings, spec, ttl, attempts, now, rng)
            .map(|acquisition| Self(Kind::Acquire(Box::new(acquisition))))
    }

    /// Extends `lock` to `ttl` from `now`: our value only, on a quorum; it
    /// sets the key again on the nodes where it went missing once a quorum
    /// confirmed ours. `Err` at once for a lock whose validity already
    /// ended or a TTL it cannot take. Its event is [`OpEvent::Extend`]; an
    /// [`Extended`] is applied to the lock with [`Lock::apply`].
    pub fn extend(lock: &mut Lock, ttl: Ttl, now: Instant) -> Result<Self, ExtendError> {
        let extension = lock.extend(ttl, now)?;
        Ok(Self(Kind::Extend(Box::new(extension))))
    }

    /// Releases `lock` at `now`: our value only, decided once the lock is
    /// certainly free or certainly not. Its event is [`OpEvent::Release`].
    pub fn release(lock: &mut Lock, now: Instant) -> Self {
        Self::of_release(lock.release(now))
    }

    /// Releases `value` on the lock `key` at `now`, on every node: for a
    /// lock taken elsewhere whose value is known.
    pub fn release_value(settings: &Settings, key: Key, value: LockValue, now: Instant) -> Self {
        Self::of_release(Release::new(settings, key, value, RoundId(0), now).every_node())
    }

    pub(crate) fn of_release(release: Release) -> Self {
        Self(Kind::Release(Box::new(release)))
    }

    /// A [release](Self::release) that waits for every node's answer (or
    /// its timeout), for the complete per-node report; other operations
    /// are unchanged.
    pub fn every_node(self) -> Self {
        match self.0 {
            Kind::Release(release) => Self::of_release(release.every_node()),
            other => Self(other),
        }
    }

    /// A [release](Self::release) whose answers nobody reads, such as
    /// one sent by [`undo`](Self::undo): it publishes its release notice
    /// for this client's waiters too; other operations are unchanged.
    pub fn unattended(self) -> Self {
        match self.0 {
            Kind::Release(release) => Self::of_release(release.unattended()),
            other => Self(other),
        }
    }

    /// Keeps `lock` alive with `options` until it is lost, released or
    /// cancelled. Its events are [`OpEvent::KeepAlive`].
    pub fn keep_alive(lock: Lock, options: KeepAlive) -> Self {
        Self(Kind::KeepAlive(Box::new(KeptLock::new(lock, options))))
    }

    /// Renews `term` until it is lost, resigned
    /// ([`Client::resign`](super::Client::resign)) or cancelled. Its events
    /// are [`OpEvent::Term`].
    pub fn term(term: Term) -> Self {
        Self(Kind::Term(Box::new(term)))
    }

    /// Writes `value` in the leader record of the election `lock` won,
    /// under `term` ([`scripts::PROCLAIM`](crate::scripts::PROCLAIM)):
    /// refused once another holds the name or a higher term is stored. Its
    /// event is [`OpEvent::Proclaim`].
    pub fn proclaim(lock: &Lock, term: u64, value: &[u8], now: Instant) -> Self {
        Self(Kind::Proclaim(Box::new(Proclaim::new(
            lock, term, value, now,
        ))))
    }

    /// Reads who leads the election `name` on every node. Its event is
    /// [`OpEvent::ReadLeader`].
    pub fn read_leader(settings: &Settings, name: &[u8], now: Instant) -> Self {
        Self(Kind::ReadLeader(Box::new(LeaderRead::new(
            settings,
            name,
            RoundId(0),
            now,
        ))))
    }

    /// Observes the election `name`: reads who leads on every node at
    /// once, then `period` after each read ended (a zero period is the
    /// default timings' retry period), and tells each new leader once, by
    /// id and term (another id, a higher term, or a value newly
    /// proclaimed; the same leader under a lower term, a minority of
    /// nodes behind, is no news). Its events are [`OpEvent::Observe`]; it
    /// never ends by itself: cancel it (a closed client ends it with
    /// [`OpEvent::Closed`]).
    pub fn observe(settings: &Arc<Settings>, name: &[u8], period: Duration, now: Instant) -> Self {
        Self(Kind::Observe(Box::new(Observation::new(
            settings, name, period, now,
        ))))
    }

    /// Reads what every node holds of the lock `key` (`redlock status`).
    /// Its event is [`OpEvent::Inspect`].
    pub fn inspect(settings: &Settings, key: Key, now: Instant) -> Self {
        Self(Kind::Inspect(Box::new(Inspection::of_key(
            settings,
            key,
            RoundId(0),
            now,
        ))))
    }

    /// The attempts an acquisition made so far; `None` for another
    /// operation.
    pub fn attempts(&self) -> Option<u32> {
        match &self.0 {
            Kind::Acquire(acquisition) => Some(acquisition.attempts()),
            _ => None,
        }
    }

    /// The lock an acquisition takes: its first key; `None` for another
    /// operation.
    pub fn key(&self) -> Option<&Key> {
        match &self.0 {
            Kind::Acquire(acquisition) => Some(acquisition.key()),
            _ => None,
        }
    }

    /// The kind of lock an acquisition takes; `None` for another
    /// operation.
    pub fn lock_kind(&self) -> Option<&LockKind> {
        match &self.0 {
            Kind::Acquire(acquisition) => Some(acquisition.kind()),
            _ => None,
        }
    }
}

/// With the `simulation` feature: any machine of the core, run as an
/// operation.
#[cfg(feature = "simulation")]
macro_rules! from_machine {
    ($($machine:ty => $variant:ident),* $(,)?) => {
        $(
            impl<R> From<$machine> for Operation<R> {
                fn from(machine: $machine) -> Self {
                    Self(Kind::$variant(Box::new(machine)))
                }
            }
        )*
    };
}
#[cfg(feature = "simulation")]
from_machine!(
    Extension => Extend,
    Release => Release,
    KeptLock => KeepAlive,
    Term => Term,
    Proclaim => Proclaim,
    LeaderRead => ReadLeader,
    Inspection => Inspect,
);
#[cfg(feature = "simulation")]
impl<R> From<Acquisition<R>> for Operation<R> {
    fn from(machine: Acquisition<R>) -> Self {
        Self(Kind::Acquire(Box::new(machine)))
    }
}

/// What an operation reports, as its machine's event.
#[derive(Debug)]
#[non_exhaustive]
pub enum OpEvent {
    /// Of an operation made by [`Operation::acquire`].
    Acquire(AcquireEvent),
    /// Of an operation made by [`Operation::extend`].
    Extend(Result<Extended, ExtendError>),
    /// Of an operation made by [`Operation::release`].
    Release(ReleaseReport),
    /// Of an operation made by [`Operation::keep_alive`].
    KeepAlive(KeptLockEvent),
    /// Of an operation made by [`Operation::term`].
    Term(TermEvent),
    /// Of an operation made by [`Operation::proclaim`].
    Proclaim(Result<u64, ExtendError>),
    /// Of an operation made by [`Operation::read_leader`].
    ReadLeader(LeaderReport),
    /// Of an operation made by [`Operation::observe`]: a new leader.
    Observe(Leader),
    /// Of an operation made by [`Operation::inspect`].
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

    /// Whether this final event ends a term that was lost (not resigned,
    /// not closed): our value may be left on some nodes, where it would
    /// hold off the next leader until its TTL.
    pub(crate) fn leaves_value(&self) -> bool {
        matches!(
            self,
            OpEvent::Term(TermEvent::Lost(
                LeadershipLoss::Lock(_) | LeadershipLoss::RenewDeadline(_)
            ))
        )
    }
}

/// Calls `$body` with `$machine` bound to the operation's machine.
macro_rules! each {
    ($operation:expr, $machine:ident => $body:expr) => {
        match $operation {
            Kind::Acquire($machine) => $body,
            Kind::Extend($machine) => $body,
            Kind::Release($machine) => $body,
            Kind::KeepAlive($machine) => $body,
            Kind::Term($machine) => $body,
            Kind::Proclaim($machine) => $body,
            Kind::ReadLeader($machine) => $body,
            Kind::Observe($machine) => $body,
            Kind::Inspect($machine) => $body,
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

    /// Whether it leaves nothing on the nodes and ends by itself, so it
    /// runs on a closed client: a release, a read (not an observer).
    pub(crate) fn leaves_nothing(&self) -> bool {
        matches!(
            self.0,
            Kind::Release(_) | Kind::ReadLeader(_) | Kind::Inspect(_)
        )
    }

    /// Starts resigning a term at `now`, its release `plan`ned
    /// ([`Term::resign`]); `false` for another operation, or a term that
    /// cannot resign now.
    pub(crate) fn resign(&mut self, now: Instant, plan: impl FnOnce(Release) -> Release) -> bool {
        match &mut self.0 {
            Kind::Term(term) => term.resign(now, plan),
            _ => false,
        }
    }

    /// The lock a keep-alive or a term holds, as it stands now (its
    /// extensions applied, the nodes its restores filled).
    pub(crate) fn held_lock(&self) -> Option<&crate::Lock> {
        match &self.0 {
            Kind::KeepAlive(kept) => Some(kept.lock()),
            Kind::Term(term) => Some(term.lock()),
            _ => None,
        }
    }

    pub(crate) fn poll_request(&mut self) -> Option<Request> {
        each!(&mut self.0, machine => machine.poll_request())
    }

    pub(crate) fn poll_event(&mut self) -> Option<OpEvent> {
        match &mut self.0 {
            Kind::Acquire(machine) => machine.poll_event().map(OpEvent::Acquire),
            Kind::Extend(machine) => machine.poll_event().map(OpEvent::Extend),
            Kind::Release(machine) => machine.poll_event().map(OpEvent::Release),
            Kind::KeepAlive(machine) => machine.poll_event().map(OpEvent::KeepAlive),
            Kind::Term(machine) => machine.poll_event().map(OpEvent::Term),
            Kind::Proclaim(machine) => machine.poll_event().map(OpEvent::Proclaim),
            Kind::ReadLeader(machine) => machine.poll_event().map(OpEvent::ReadLeader),
            Kind::Observe(machine) => machine.poll_event().map(OpEvent::Observe),
            Kind::Inspect(machine) => machine.poll_event().map(OpEvent::Inspect),
        }
    }

    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        each!(&self.0, machine => machine.poll_timeout())
    }

    pub(crate) fn poll_listen(&mut self) -> Option<Vec<Key>> {
        each!(&mut self.0, machine => machine.poll_listen())
    }

    pub(crate) fn ordered_by_masters(&self) -> bool {
        each!(&self.0, machine => machine.ordered_by_masters())
    }

    pub(crate) fn poll_hand_over(&mut self) -> Option<HandOver> {
        each!(&mut self.0, machine => machine.poll_hand_over())
    }

    pub(crate) fn handle_reply(&mut self, reply: Reply, now: Instant) {
        each!(&mut self.0, machine => machine.handle_reply(reply, now))
    }

    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        each!(&mut self.0, machine => machine.handle_timeout(now))
    }

    pub(crate) fn handle_delivery(&mut self, notice: Notice, at: Instant, now: Instant) {
        each!(&mut self.0, machine => machine.handle_delivery(notice, at, now))
    }

    pub(crate) fn is_done(&self) -> bool {
        each!(&self.0, machine => machine.is_done())
    }

    pub(crate) fn abandon(&mut self, now: Instant) {
        each!(&mut self.0, machine => machine.abandon(now))
    }
}
