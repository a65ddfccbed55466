//! The loss state of a lock guard, shared by the guard, its keep-alive and
//! its loss signals: the lock as extended, and when and why it was lost.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redlock_core::{KeptLockEvent, Lock, LossReason, OpEvent, Standing};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use crate::driver::Message;
use crate::metrics::{self, End};

/// A lock's loss signal, made by [`LockGuard::loss_signal`]: for tasks
/// that should stop when the lock is lost. Cheap to clone; clones see the
/// same lock. It holds no lock itself. Once the guard is released,
/// forgotten or dropped, the lock is let go, not lost: a loss that came
/// before stays reported, and [`lost`](Self::lost) never completes
/// otherwise.
///
/// [`LockGuard::loss_signal`]: crate::LockGuard::loss_signal
#[derive(Clone)]
pub struct LossSignal {
    shared: Arc<Shared>,
}

impl fmt::Debug for LossSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LossSignal")
            .field("loss", &self.shared.loss())
            .finish()
    }
}

impl LossSignal {
    pub(super) fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    /// Whether the lock is lost ([`LockGuard::is_lost`]).
    ///
    /// [`LockGuard::is_lost`]: crate::LockGuard::is_lost
    pub fn is_lost(&self) -> bool {
        self.shared.loss().is_some()
    }

    /// Completes when the lock is lost, with the reason
    /// ([`LockGuard::lost`]). Cancel-safe.
    ///
    /// [`LockGuard::lost`]: crate::LockGuard::lost
    pub async fn lost(&self) -> LossReason {
        self.shared.lost().await
    }
}

pub(crate) struct Shared {
    state: Mutex<Kept>,
    /// Cancelled once the lock is lost.
    lost: CancellationToken,
}

pub(super) struct Kept {
    pub(super) lock: Lock,
    /// Whether the lock stands, as the core reads it.
    pub(super) standing: Standing<LossReason>,
    /// Released by the client's shutdown: the guard has nothing left to
    /// release.
    pub(super) closed: bool,
    /// The keep-alive's operation on the driver, while it runs.
    pub(super) keep_alive_key: Option<u64>,
}

impl Shared {
    pub(super) fn new(lock: Lock) -> Self {
        Self {
            state: Mutex::new(Kept {
                standing: Standing::for_lock(&lock),
                lock,
                closed: false,
                keep_alive_key: None,
            }),
            lost: CancellationToken::new(),
        }
    }

    pub(super) fn with<R>(&self, f: impl FnOnce(&mut Kept) -> R) -> R {
        // Every update is a single assignment or `Lock::apply`; a panic cannot
        // leave the state half-written.
        f(&mut self.state.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The lock is let go: from now on it is never reported lost. Whether
    /// it was lost before.
    pub(super) fn end(&self) -> bool {
        self.with(|kept| {
            kept.standing.let_go();
            // Let go, it reads only a loss told before.
            kept.standing.loss(crate::sim::now()).is_some()
        })
    }

    /// Validity left now; zero once the lock is lost.
    pub(super) fn validity(&self) -> Duration {
        let now = crate::sim::now();
        self.with(|kept| match kept.standing.loss(now) {
            Some(_) => Duration::ZERO,
            None => kept.lock.validity(now),
        })
    }

    /// The loss, once there is one: told, or the validity ran out (the
    /// core reads it at the caller's instant, also what a keep-alive paused
    /// with the process has not said yet). Once let go, only a loss told
    /// before.
    pub(super) fn loss(&self) -> Option<LossReason> {
        let now = crate::sim::now();
        self.with(|kept| kept.standing.loss(now))
    }

    pub(super) async fn lost(&self) -> LossReason {
        loop {
            let now = crate::sim::now();
            let (loss, until) =
                self.with(|kept| (kept.standing.loss(now), kept.standing.poll_timeout()));
            if let Some(reason) = loss {
                return reason;
            }
            match until {
                Some(until) => tokio::select! {
                    () = self.lost.cancelled() => {}
                    () = tokio::time::sleep_until(until.into()) => {}
                },
                None => self.lost.cancelled().await,
            }
        }
    }

    /// The client's shutdown takes the lock to release it, with the
    /// keep-alive that holds it; `None` once let go. The guard is lost
    /// ([`LossReason::Closed`]), and releases nothing more.
    pub(crate) fn close(&self) -> Option<(Option<u64>, Lock)> {
        let taken = self.with(|kept| {
            if kept.standing.is_let_go() || kept.closed {
                return None;
            }
            Some((kept.keep_alive_key.take(), kept.lock.clone()))
        })?;
        self.closed();
        Some(taken)
    }

    /// The lock was released by the client's shutdown.
    fn closed(&self) {
        let now = crate::sim::now();
        self.with(|kept| {
            if !kept.closed && kept.standing.loss(now).is_none() && !kept.standing.is_let_go() {
                metrics::held(&kept.lock, End::Released);
            }
            kept.closed = true;
        });
        self.tell(&OpEvent::Closed);
    }

    /// What the lock's operations told (its keep-alive, an extension by
    /// hand, the client's close), as the core reads it; an extension is
    /// applied to the guard's copy of the lock with it.
    pub(super) fn tell(&self, event: &OpEvent) {
        if let Some(reason) = self.with(|kept| {
            if let OpEvent::KeepAlive(KeptLockEvent::Extended(extended))
            | OpEvent::Extend(Ok(extended)) = event
            {
                kept.lock.apply(extended);
            }
            kept.standing
                .handle_event(event)
                .then(|| kept.standing.loss(crate::sim::now()))
                .flatten()
        }) {
            // What an operator acts on, and what the loss signal reports
            // to the code that held the lock.
            info!(reason = %reason, "lock lost");
            self.lost.cancel();
        }
    }
}

/// What the keep-alive's driver tells a guard: each extension applied to
/// the guard's copy of the lock as it is reported, and the loss at the end.
pub(super) fn kept_alive(shared: &Shared, message: Message) {
    let event = match message {
        Message::Event(event) => event,
        Message::Finished(finished) => finished.take().0,
        // The runtime shuts down: the keep-alive ends with it.
        Message::Returned(_) => return,
    };
    match &event {
        OpEvent::KeepAlive(KeptLockEvent::Extended(extended)) => {
            metrics::extended(Ok(()));
            debug!(validity_ms = extended.validity.as_millis() as u64, votes = %extended.votes, "lock extended");
        }
        OpEvent::KeepAlive(KeptLockEvent::ExtendFailed(error)) => {
            metrics::extended(Err(error));
            // Nodes down are reported by their connections; the loss, if
            // it comes, at INFO.
            debug!(error = %error, "extension failed");
        }
        OpEvent::KeepAlive(KeptLockEvent::LimitReached { extensions }) => {
            debug!(
                extensions,
                "extension limit reached; the lock ends with its validity"
            );
        }
        OpEvent::KeepAlive(KeptLockEvent::Lost(reason)) => {
            metrics::lost(reason);
            shared.with(|kept| metrics::held(&kept.lock, End::Lost));
        }
        // Shut down: the core released the lock.
        OpEvent::Closed => {
            shared.closed();
            return;
        }
        other => debug!(event = ?other, "keep-alive"),
    }
    shared.tell(&event);
}
