//! What a holder's handle can tell on its own: whether its lock or term
//! still stands, read at the holder's instant from what the client said.

use std::time::Instant;

use super::election::{LeadershipLoss, Term, TermEvent};
use super::keep_alive::{KeptLockEvent, LossReason};
use super::lock::Lock;
use crate::client::OpEvent;

/// Whether a lock or a term still stands, for the handle its holder
/// reads: the end the client last told, and the loss once told.
///
/// The client tells a loss when it sees it, on its driver's turn; a driver
/// stalled (a busy runtime, a paused process) tells it late. A holder must
/// not work past the end meanwhile, so `Standing` also reads the holder's
/// own instant: from the end on, the hold is lost with the reason the
/// client will give then (the last failed extension, the extension limit,
/// the renew deadline, or plain expiry), unless it was let go before.
/// The first loss is the one kept.
///
/// Made by [`for_lock`](Standing::for_lock) (a lock guard: `L` is
/// [`LossReason`]) or [`for_term`](Standing::for_term) (a leadership: `L`
/// is [`LeadershipLoss`]); fed every [`OpEvent`] of the operation that
/// keeps it ([`handle_event`](Standing::handle_event)).
///
/// ```
/// # use std::{sync::Arc, time::Instant};
/// # use rand::{SeedableRng, rngs::StdRng};
/// # use redlock_core::*;
/// # let settings = Arc::new(Config::new(["n1"]).validate()?);
/// # let t0 = Instant::now();
/// # let mut acquire = Acquisition::new(settings.clone(), b"job", settings.default_ttl(),
/// #     Attempts::Once, t0, StdRng::seed_from_u64(1));
/// # let request = acquire.poll_request().unwrap();
/// # acquire.handle_reply(Reply::to(&request, Ok(Response::Int(1))), t0);
/// # let Some(AcquireEvent::Acquired(lock)) = acquire.poll_event() else { panic!() };
/// let mut standing = Standing::for_lock(&lock);
/// let mut kept = KeptLock::new(lock, KeepAlive::default().max_extensions(1));
/// let due = kept.poll_timeout().unwrap();
/// kept.handle_timeout(due);
/// let request = kept.poll_request().unwrap();
/// kept.handle_reply(Reply::to(&request, Ok(Response::Int(1))), due);
/// while let Some(event) = kept.poll_event() {
///     standing.handle_event(&OpEvent::KeepAlive(event));
/// }
/// // Extended once, then no more: the lock stands until the new end,
/// let end = standing.until();
/// assert_eq!(end, kept.lock().valid_until());
/// assert_eq!(standing.loss(due), None);
/// // where the holder's clock tells the loss the keep-alive will tell.
/// let told = LossReason::ExtensionLimit { extensions: 1 };
/// assert_eq!(standing.loss(end), Some(told.clone()));
/// kept.handle_timeout(end);
/// assert_eq!(kept.poll_event(), Some(KeptLockEvent::Lost(told)));
/// # Ok::<(), ConfigError>(())
/// ```
#[derive(Clone, Debug)]
pub struct Standing<L> {
    /// The end the client last told: the lock's validity, or the term's
    /// loss instant.
    until: Instant,
    /// The loss the client told, or the holder's own extension told.
    lost: Option<L>,
    /// What the client will say at `until` unless the end moves.
    ending: L,
    /// Released, forgotten or handed on: never lost from now on.
    let_go: bool,
}

impl<L: Clone> Standing<L> {
    fn new(until: Instant, ending: L) -> Self {
        Self {
            until,
            lost: None,
            ending,
            let_go: false,
        }
    }

    /// The loss at `now`: told, or the end passed (`now` at or past
    /// [`until`](Self::until)) while held. `None` while it stands, and
    /// always once let go without a loss before.
    pub fn loss(&self, now: Instant) -> Option<L> {
        match &self.lost {
            Some(reason) => Some(reason.clone()),
            None if !self.let_go && now >= self.until => Some(self.ending.clone()),
            None => None,
        }
    }

    /// The end the client last told.
    pub fn until(&self) -> Instant {
        self.until
    }

    /// When [`loss`](Self::loss) changes by the clock alone: the end, while
    /// held and not lost.
    pub fn poll_timeout(&self) -> Option<Instant> {
        (self.lost.is_none() && !self.let_go).then_some(self.until)
    }

    /// Whether the holder let it go ([`let_go`](Self::let_go)).
    pub fn is_let_go(&self) -> bool {
        self.let_go
    }

    /// The holder lets it go (released, forgotten, handed on): a loss told
    /// before stays; none comes after.
    pub fn let_go(&mut self) {
        self.let_go = true;
    }

    /// Records `reason` unless a loss was told before or the holder let
    /// go; `true` when it is the loss now.
    fn lose(&mut self, reason: L) -> bool {
        if self.lost.is_some() || self.let_go {
            return false;
        }
        self.lost = Some(reason);
        true
    }
}

impl Standing<LossReason> {
    /// A lock guard's: the lock stands until its validity ends, then is
    /// [`Expired`](LossReason::Expired) unless its keep-alive said more.
    pub fn for_lock(lock: &Lock) -> Self {
        Self::new(lock.valid_until(), LossReason::Expired)
    }

    /// Takes what the lock's operations told: its keep-alive's events
    /// ([`OpEvent::KeepAlive`]), an extension by hand
    /// ([`OpEvent::Extend`]: one refused for good loses the lock,
    /// [`ExtendError::loses_lock`](crate::ExtendError::loses_lock)), and
    /// the client's close ([`OpEvent::Closed`]: the client released it).
    /// `true` when the event lost the lock.
    pub fn handle_event(&mut self, event: &OpEvent) -> bool {
        match event {
            OpEvent::KeepAlive(KeptLockEvent::Extended(extended))
            | OpEvent::Extend(Ok(extended)) => {
                self.until = extended.valid_until;
                self.ending = LossReason::Expired;
                false
            }
            OpEvent::KeepAlive(KeptLockEvent::ExtendFailed(error)) => {
                self.ending = LossReason::ExtendFailed(error.clone());
                false
            }
            OpEvent::KeepAlive(KeptLockEvent::LimitReached { extensions }) => {
                self.ending = LossReason::ExtensionLimit {
                    extensions: *extensions,
                };
                false
            }
            OpEvent::KeepAlive(KeptLockEvent::Lost(reason)) => self.lose(reason.clone()),
            OpEvent::Extend(Err(error)) if error.loses_lock() => {
                self.lose(LossReason::ExtendFailed(error.clone()))
            }
            OpEvent::Closed => self.lose(LossReason::Closed),
            _ => false,
        }
    }
}

impl Standing<LeadershipLoss> {
    /// A leadership's: the term stands until its loss instant
    /// ([`Term::lose_at`]), then is lost to the renew deadline unless its
    /// renewals said more.
    pub fn for_term(term: &Term) -> Self {
        Self::new(
            term.lose_at(),
            LeadershipLoss::RenewDeadline(term.renew_deadline()),
        )
    }

    /// Takes what the term's operation told ([`OpEvent::Term`]), and the
    /// client's close ([`OpEvent::Closed`]: the client released the
    /// term's lock). `true` when the event ended the term.
    pub fn handle_event(&mut self, event: &OpEvent) -> bool {
        match event {
            OpEvent::Term(TermEvent::Renewed { lose_at, .. }) => {
                self.until = *lose_at;
                false
            }
            // Told before `resign` returns, ahead of the `Lost` that
            // follows.
            OpEvent::Term(TermEvent::Resigned(report)) if report.frees_lock() => {
                self.lose(LeadershipLoss::Resigned)
            }
            OpEvent::Term(TermEvent::Lost(reason)) => self.lose(reason.clone()),
            OpEvent::Closed => self.lose(LeadershipLoss::Lock(LossReason::Closed)),
            _ => false,
        }
    }
}
