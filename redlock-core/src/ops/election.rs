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
    Command, ConfigError, ExtendError, HandOver, KeepAlive, KeptLock, KeptLockEvent, Lock,
    LockKind, LossReason, NodeVote, Release, ReleaseReport, Reply, Request, Settings, Ttl, Votes,
    wire,
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
    /// The resignation's release ended ([`Client::resign`](crate::Client::resign)):
    /// when it freed the name ([`ReleaseReport::frees_lock`]),
    /// [`Lost`](Self::Lost)`(`[`Resigned`](LeadershipLoss::Resigned)`)`
    /// follows at once; otherwise the term stands and renewals go on.
    Resigned(ReleaseReport),
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
/// event is [`TermEvent::Lost`]. To resign, call
/// [`Client::resign`](crate::Client::resign) on its operation: renewals
/// stop, the release of our value runs inside the term
/// ([`TermEvent::Resigned`]), and a release that did not free the name
/// leaves the term standing, renewed again (resign again). A term lost any
/// other way has its value released by the client, where it may be left.
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
    /// The release of a resignation under way: renewals wait meanwhile.
    resigning: Option<Box<Release>>,
    /// What the resignation's release told its client's waiters as it
    /// ended, not polled yet.
    hand_overs: VecDeque<HandOver>,
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
        let lose_at =
            Self::loss_instant(&lock, lock.valid_until(), lock.ttl(), timing.renew_deadline);
        Some(Self {
            // Renewed once the retry period has passed since the last round,
            // however long the lease.
            kept: KeptLock::new(lock, KeepAlive::default().every(timing.retry_period)),
            term,
            renew_deadline: timing.renew_deadline,
            lose_at,
            events: VecDeque::new(),
            resigning: None,
            hand_overs: VecDeque::new(),
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

    /// Its renew deadline ([`ElectionTiming::renew_deadline`]).
    pub(crate) fn renew_deadline(&self) -> Duration {
        self.renew_deadline
    }

    /// Whether the term has ended.
    #[cfg(feature = "simulation")]
    pub fn is_over(&self) -> bool {
        self.done
    }

    machinery_fn! {
        /// Starts resigning at `now`: renewals stop, and the release of
        /// our value (the lock with every renewal applied, `plan`ned by
        /// the client's release notices) runs inside the term, its report
        /// told as [`TermEvent::Resigned`]. `false`, doing nothing, once
        /// the term is over or while a resignation runs.
        fn resign(&mut self, now: Instant, plan: impl FnOnce(Release) -> Release) -> bool {
            if self.done || self.resigning.is_some() {
                return false;
            }
            // A round of the term's own lock: a late answer to it is never
            // taken for a renewal's.
            self.resigning = Some(Box::new(plan(self.kept.release(now))));
            true
        }
    }

    /// The resignation's release, once it decided: the term ends when it
    /// freed the name, and otherwise renews again (or is lost, its renew
    /// deadline passed meanwhile).
    fn finish_resigning(&mut self, now: Instant) {
        let Some(release) = &mut self.resigning else {
            return;
        };
        let Some(report) = release.poll_event() else {
            return;
        };
        // Its last word to the client's waiters (that its nodes answered)
        // goes out after it.
        self.hand_overs
            .extend(std::iter::from_fn(|| release.poll_hand_over()));
        self.resigning = None;
        let freed = report.frees_lock();
        self.events.push_back(TermEvent::Resigned(report));
        if freed {
            self.lose(LeadershipLoss::Resigned);
        } else {
            self.handle_timeout(now);
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
        if let Some(release) = &mut self.resigning {
            return release.poll_request();
        }
        if self.done {
            return None;
        }
        self.kept.poll_request()
    }

    fn poll_event(&mut self) -> Option<TermEvent> {
        self.events.pop_front()
    }

    /// While it resigns, the release's deadline alone: the renew deadline
    /// is looked at once the release decided.
    fn poll_timeout(&self) -> Option<Instant> {
        if let Some(release) = &self.resigning {
            return release.poll_timeout();
        }
        if self.done {
            return None;
        }
        Some(match self.kept.poll_timeout() {
            Some(at) => at.min(self.lose_at),
            None => self.lose_at,
        })
    }

    fn poll_hand_over(&mut self) -> Option<HandOver> {
        self.hand_overs
            .pop_front()
            .or_else(|| self.resigning.as_mut()?.poll_hand_over())
    }

    fn handle_reply(&mut self, reply: Reply, now: Instant) {
        if let Some(release) = &mut self.resigning {
            // A renewal's late answer is of another round: ignored there.
            release.handle_reply(reply, now);
            self.finish_resigning(now);
            return;
        }
        if self.done {
            return;
        }
        self.kept.handle_reply(reply, now);
        self.pump();
        self.handle_timeout(now);
    }

    fn handle_timeout(&mut self, now: Instant) {
        if let Some(release) = &mut self.resigning {
            release.handle_timeout(now);
            self.finish_resigning(now);
            return;
        }
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

    /// A resignation under way still tells its hand-over.
    fn abandon(&mut self, now: Instant) {
        if let Some(release) = &mut self.resigning {
            release.abandon(now);
        }
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
