//! Leader election: a fenced lock on the election's name, kept alive, whose
//! fencing token is the leader's term.
//!
//! A campaign is a fenced [`Operation::acquire`](crate::Operation::acquire) of the name
//! ([`LockSpec::Fenced`](crate::LockSpec::Fenced), TTL the lease): terms
//! then rise strictly across the quorum, as fencing tokens do. A won
//! campaign's lock becomes a [`Term`]: the core's [`Operation::keep_alive`](crate::Operation::keep_alive) keeps it
//! alive, and the term decides the instant its leader must stop, before
//! any other process can be granted the name.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::ops::machine::Machine;
use crate::quorum::Round;
use crate::{
    Command, ConfigError, ExtendError, KeepAlive, KeptLock, KeptLockEvent, Lock, LockKind,
    LossReason, NodeVote, ReleaseReport, Reply, Request, Settings, Ttl, Votes, wire,
};

/// client-go's jitter factor: the renew deadline must exceed the retry
/// period by this factor, so a renewal retried once still fits.
const RETRY_JITTER: f64 = 1.2;

/// An election's timings, validated ([`ElectionTiming::new`]): the lease
/// (the lock's TTL), the renew deadline (how long after its last confirmed
/// renewal a leader keeps trying before it steps down) and the retry period
/// (between renewals, and between campaign attempts).
///
/// As in Kubernetes' client-go, `lease > renew deadline > 1.2 x retry
/// period`; here the lease counts by its validity, the TTL less the drift
/// allowance, since that is all a leader may count on. The difference is
/// the margin by which a leader's loss precedes the earliest instant
/// another process can be granted the name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ElectionTiming {
    lease: Ttl,
    renew_deadline: Duration,
    retry_period: Duration,
}

impl ElectionTiming {
    /// Validates the timings against the client's `settings` (the lease is
    /// checked like any TTL, [`Settings::ttl`]).
    pub fn new(
        settings: &Settings,
        lease: Duration,
        renew_deadline: Duration,
        retry_period: Duration,
    ) -> Result<Self, ConfigError> {
        let lease = settings.ttl(lease)?;
        let validity = lease.as_duration().saturating_sub(settings.drift(lease));
        let error = ConfigError::ElectionTiming {
            validity,
            renew_deadline,
            retry_period,
        };
        if retry_period.is_zero()
            || renew_deadline >= validity
            || renew_deadline.as_secs_f64() <= retry_period.as_secs_f64() * RETRY_JITTER
        {
            return Err(error);
        }
        Ok(Self {
            lease,
            renew_deadline,
            retry_period,
        })
    }

    /// Timings derived from the client's default TTL: the renew deadline
    /// two thirds of its validity, the retry period a quarter of that.
    pub fn default_for(settings: &Settings) -> Self {
        let lease = settings.default_ttl();
        let validity = lease.as_duration().saturating_sub(settings.drift(lease));
        let renew_deadline = validity * 2 / 3;
        Self {
            lease,
            renew_deadline,
            retry_period: renew_deadline / 4,
        }
    }

    /// The lease: the TTL of the election's lock.
    pub fn lease(&self) -> Ttl {
        self.lease
    }

    /// How long after its last confirmed renewal a leader steps down.
    pub fn renew_deadline(&self) -> Duration {
        self.renew_deadline
    }

    /// The pause between renewals, and between campaign attempts.
    pub fn retry_period(&self) -> Duration {
        self.retry_period
    }
}

/// Why a leader's term ended.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum LeadershipLoss {
    /// No renewal was confirmed within the renew deadline: the leader steps
    /// down before any other process can be granted the name.
    #[error("no renewal within the renew deadline of {} ms", .0.as_millis())]
    RenewDeadline(Duration),
    /// The keep-alive lost the lock (another owner, our value gone).
    #[error("{0}")]
    Lock(LossReason),
    /// The leader resigned, and the release freed the name.
    #[error("resigned")]
    Resigned,
}

/// What a [`Term`] reports.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum TermEvent {
    /// A renewal counted: the term now lasts until `lose_at` at least.
    Renewed {
        /// The lock's new end of validity.
        valid_until: Instant,
        /// The new instant the leader steps down unless renewed again.
        lose_at: Instant,
    },
    /// A renewal failed; another is tried while the renew deadline allows.
    RenewFailed(ExtendError),
    /// The term is over. Last event.
    Lost(LeadershipLoss),
}

/// One leader's term: the won campaign's lock, renewed every retry period
/// while [`Operation::term`](crate::Operation::term) runs, and the instant
/// its leader must stop.
///
/// The loss instant is the start of the last confirmed round (acquire or
/// renewal) plus the renew deadline: before the lock's validity (start +
/// TTL − drift) by the margin [`ElectionTiming`] checks, hence before any
/// master can let the key expire while the drift assumption holds, hence
/// before any other process is granted a higher term. A renewal refused
/// (the lock lost) ends the term at once.
///
/// # Calling order
///
/// Run it with [`Operation::term`](crate::Operation::term); its final
/// event is [`TermEvent::Lost`]. To resign, take it back (cancel or
/// [evict](crate::Client::evict) the operation), run the release
/// [`resign`](Self::resign) gives and feed its report to
/// [`handle_resigned`](Self::handle_resigned): a release that did not free
/// the name leaves the term as it was, to run on (or resign again).
/// [`Operation::proclaim`](crate::Operation::proclaim) writes the leader
/// record under the term, beside it.
#[cfg_attr(feature = "model-check", derive(Clone))]
#[derive(Debug)]
pub struct Term {
    kept: KeptLock,
    term: u64,
    renew_deadline: Duration,
    lose_at: Instant,
    events: VecDeque<TermEvent>,
    done: bool,
}

impl Term {
    /// The term of a won campaign: `lock` must be fenced (its token is the
    /// term); `None` for a lock without a fencing token.
    pub fn new(lock: Lock, timing: &ElectionTiming) -> Option<Self> {
        let token = lock.fencing_token()?;
        // Planted: a term counted by the client, not by the quorum.
        let term = if planted!(ElectionTermFromClient) {
            lock.extensions() + 1
        } else {
            token
        };
        let ttl = lock.ttl().as_duration();
        // Renew once the retry period has passed since the last round.
        let span = ttl.saturating_sub(lock.settings().drift(lock.ttl()));
        let share = span.saturating_sub(timing.retry_period).as_secs_f64() / ttl.as_secs_f64();
        let lose_at =
            Self::loss_instant(&lock, lock.valid_until(), lock.ttl(), timing.renew_deadline);
        Some(Self {
            kept: KeptLock::new(lock, KeepAlive::default().extend_when_left(share)),
            term,
            renew_deadline: timing.renew_deadline,
            lose_at,
            events: VecDeque::new(),
            done: false,
        })
    }

    /// The start of the round that set `valid_until` with `ttl`, plus the
    /// renew deadline.
    fn loss_instant(lock: &Lock, valid_until: Instant, ttl: Ttl, deadline: Duration) -> Instant {
        let span = ttl.as_duration().saturating_sub(lock.settings().drift(ttl));
        let started = valid_until.checked_sub(span).unwrap_or(valid_until);
        if planted!(ElectionLosesAtExpiry) {
            // Planted: at the key's expiry on an exact clock, no drift, no
            // margin. (`checked_add`, not `+`: code dead without the feature
            // gives cargo-mutants no operator to mutate.)
            return started
                .checked_add(ttl.as_duration())
                .unwrap_or(valid_until);
        }
        (started + deadline).min(valid_until)
    }

    /// The term: the lock's fencing token, larger than every earlier term.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The leader's id: the lock's value.
    pub fn id(&self) -> &crate::LockValue {
        self.kept.lock().value()
    }

    /// The instant the leader steps down unless a renewal counts before.
    pub fn lose_at(&self) -> Instant {
        self.lose_at
    }

    /// The lock, with every renewal applied.
    pub fn lock(&self) -> &Lock {
        self.kept.lock()
    }

    /// Whether the term has ended.
    pub fn is_over(&self) -> bool {
        self.done
    }

    /// The release that resigns this term, acting on our value only;
    /// `None` once the term is over (resigning again changes nothing).
    pub fn resign<R: rand_core::Rng>(&self, now: Instant) -> Option<crate::Operation<R>> {
        self.resignation(now).map(crate::Operation::of_release)
    }

    machinery_fn! {
        /// [`resign`](Self::resign)'s release, as a machine.
        fn resignation(&self, now: Instant) -> Option<crate::Release> {
            if self.done {
                return None;
            }
            Some(self.kept.lock().clone().release(now))
        }
    }

    /// Feeds the report of [`resign`](Self::resign)'s release: the term
    /// ends when it freed the name; otherwise nothing changes.
    pub fn handle_resigned(&mut self, report: &ReleaseReport) {
        if !self.done && report.frees_lock() {
            self.lose(LeadershipLoss::Resigned);
        }
    }

    /// Writes `value` in the election's leader record under this term
    /// ([`scripts::PROCLAIM`](crate::scripts::PROCLAIM)).
    #[cfg(feature = "simulation")]
    pub fn proclaim(&self, value: &[u8], now: Instant) -> Proclaim {
        Proclaim::new(self.kept.lock(), self.term, value, now)
    }

    fn lose(&mut self, reason: LeadershipLoss) {
        if !self.done {
            self.done = true;
            self.events.push_back(TermEvent::Lost(reason));
        }
    }

    fn pump(&mut self) {
        while let Some(event) = self.kept.poll_event() {
            match event {
                KeptLockEvent::Extended(extended) => {
                    let lock = self.kept.lock();
                    self.lose_at = Self::loss_instant(
                        lock,
                        extended.valid_until,
                        extended.ttl,
                        self.renew_deadline,
                    );
                    self.events.push_back(TermEvent::Renewed {
                        valid_until: extended.valid_until,
                        lose_at: self.lose_at,
                    });
                }
                KeptLockEvent::ExtendFailed(error) => {
                    self.events.push_back(TermEvent::RenewFailed(error));
                }
                // Planted: a renewal that only lacked answers is not taken
                // for a loss; the term waits for its (planted) lose_at.
                KeptLockEvent::Lost(LossReason::ExtendFailed(ExtendError::NoQuorum { .. }))
                    if planted!(ElectionLosesAtExpiry) => {}
                KeptLockEvent::Lost(reason) => self.lose(LeadershipLoss::Lock(reason)),
                _ => {}
            }
        }
    }
}

impl Machine for Term {
    type Event = TermEvent;

    fn poll_request(&mut self) -> Option<Request> {
        if self.done {
            return None;
        }
        self.kept.poll_request()
    }

    fn poll_event(&mut self) -> Option<TermEvent> {
        self.events.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        if self.done {
            return None;
        }
        Some(match self.kept.poll_timeout() {
            Some(at) => at.min(self.lose_at),
            None => self.lose_at,
        })
    }

    fn handle_reply(&mut self, reply: Reply, now: Instant) {
        if self.done {
            return;
        }
        self.kept.handle_reply(reply, now);
        self.pump();
        self.handle_timeout(now);
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.done {
            return;
        }
        if now >= self.lose_at {
            self.lose(LeadershipLoss::RenewDeadline(self.renew_deadline));
            return;
        }
        if self.kept.poll_timeout().is_some_and(|at| now >= at) {
            self.kept.handle_timeout(now);
            self.pump();
        }
    }

    fn is_done(&self) -> bool {
        self.done
    }
}

/// One round that writes a leader's value on every node
/// ([`scripts::PROCLAIM`](crate::scripts::PROCLAIM)), made by
/// [`Term::proclaim`]: its final event is `Ok(term)` once a quorum wrote it,
/// or [`ExtendError::Lost`] once a quorum is impossible because nodes
/// refused (the name is not ours there, or a higher term is stored), or
/// [`ExtendError::NoQuorum`] when too few answered.
#[derive(Debug)]
#[cfg_attr(not(feature = "simulation"), allow(unreachable_pub))]
pub struct Proclaim {
    round: Round,
    term: u64,
    quorum: usize,
    requests: VecDeque<Request>,
    outcome: Option<Result<u64, ExtendError>>,
    done: bool,
}

#[cfg_attr(not(feature = "simulation"), allow(unreachable_pub))]
impl Proclaim {
    /// The round that writes `value` under `term` for the leader holding
    /// `lock` (what [`Term::proclaim`] makes, for a driver that keeps a copy
    /// of the lock beside its term).
    pub fn new(lock: &Lock, term: u64, value: &[u8], now: Instant) -> Self {
        let settings: &Arc<Settings> = lock.settings();
        let key = lock.key().clone();
        let keys: Arc<[crate::Key]> = Arc::from([
            key.clone(),
            settings.fencing_key(&key),
            settings.leader_key(&key),
        ]);
        // A round id of its own: the term's lock keeps counting its rounds.
        let round = Round::new(
            crate::RoundId(lock.next_round.wrapping_add(1 << 32)),
            settings,
            now,
            settings.node_timeout_for(lock.ttl()),
        );
        let payload: Arc<[u8]> = Arc::from(value);
        let requests = round
            .fan_out(
                &keys,
                &LockKind::Exclusive,
                lock.value(),
                Command::Proclaim { term },
                round.deadline,
            )
            .map(|request| Request {
                payload: Some(payload.clone()),
                ..request
            })
            .collect();
        Self {
            quorum: crate::quorum(settings.node_names().len()),
            round,
            term,
            requests,
            outcome: None,
            done: false,
        }
    }

    fn decide(&mut self, now: Instant) {
        let granted = self.round.count(NodeVote::is_yes);
        let refused = self
            .round
            .count(|vote| matches!(vote, NodeVote::HeldByOther(_)));
        let nodes = self.round.nodes().len();
        let votes: Votes = self.round.votes(now);
        let outcome = if granted >= self.quorum {
            Ok(self.term)
        } else if nodes - refused < self.quorum {
            Err(ExtendError::Lost { votes })
        } else if self.round.all_answered() {
            Err(ExtendError::NoQuorum { votes })
        } else {
            return;
        };
        self.outcome = Some(outcome);
        self.done = true;
    }
}

impl Machine for Proclaim {
    type Event = Result<u64, ExtendError>;

    fn poll_request(&mut self) -> Option<Request> {
        self.requests.pop_front()
    }

    fn poll_event(&mut self) -> Option<Self::Event> {
        self.outcome.take()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        (!self.done).then_some(self.round.deadline)
    }

    fn handle_reply(&mut self, reply: Reply, now: Instant) {
        if self.done {
            return;
        }
        let vote = wire::interpret(Command::Proclaim { term: self.term }, None, reply.result);
        if self.round.record(reply.round, reply.node, vote) {
            self.decide(now);
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        if !self.done && now >= self.round.deadline {
            self.round.expire();
            self.decide(now);
        }
    }

    fn is_done(&self) -> bool {
        self.done
    }
}
