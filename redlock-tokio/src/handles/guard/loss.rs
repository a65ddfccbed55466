//! The loss state of a lock guard, shared by the guard, its keep-alive and
//! its loss signals: the lock as extended, and when and why it was lost.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redlock_core::{KeptLockEvent, Lock, OpEvent};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use crate::LossReason;
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
    /// Cancelled once `loss` is set.
    lost: CancellationToken,
}

pub(super) struct Kept {
    pub(super) lock: Lock,
    pub(super) loss: Option<LossReason>,
    /// What the keep-alive will declare when the validity ends, as far as
    /// its events tell: its last failed extension, or its limit reached.
    /// The clock tells the loss at that instant too, and must not tell
    /// another reason than the keep-alive is about to.
    ending: Option<LossReason>,
    /// Released, forgotten or dropped: a lock let go is never lost.
    ended: bool,
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
                lock,
                loss: None,
                ending: None,
                ended: false,
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

    /// The lock is let go: from now on it is never reported lost.
    pub(super) fn end(&self) {
        self.with(|kept| kept.ended = true);
    }

    /// Validity left now; zero once the lock is lost.
    pub(super) fn validity(&self) -> Duration {
        self.with(|kept| match kept.loss {
            Some(_) => Duration::ZERO,
            None => kept.lock.validity(crate::sim::now()),
        })
    }

    /// The loss, once there is one: recorded, or the validity ran out (the
    /// clock knows it at once, also what a keep-alive paused with the
    /// process has not said yet).
    pub(super) fn loss(&self) -> Option<LossReason> {
        self.with(|kept| match &kept.loss {
            Some(reason) => Some(reason.clone()),
            None if !kept.ended && !kept.lock.is_valid(crate::sim::now()) => {
                Some(kept.ending.clone().unwrap_or(LossReason::Expired))
            }
            None => None,
        })
    }

    pub(super) async fn lost(&self) -> LossReason {
        loop {
            let recorded = self.with(|kept| {
                kept.loss
                    .clone()
                    .ok_or((kept.lock.valid_until(), kept.ended))
            });
            let (until, ended) = match recorded {
                Ok(reason) => return reason,
                Err(pending) => pending,
            };
            if ended {
                self.lost.cancelled().await;
                continue;
            }
            tokio::select! {
                () = self.lost.cancelled() => {}
                () = tokio::time::sleep_until(until.into()) => {
                    // Unless an extension moved the end meanwhile.
                    if let Some(reason) = self.loss() {
                        return reason;
                    }
                }
            }
        }
    }

    /// The client's shutdown takes the lock to release it, with the
    /// keep-alive that holds it; `None` once let go. The guard is lost
    /// ([`LossReason::Closed`]), and releases nothing more.
    pub(crate) fn close(&self) -> Option<(Option<u64>, Lock)> {
        let taken = self.with(|kept| {
            if kept.ended || kept.closed {
                return None;
            }
            Some((kept.keep_alive_key.take(), kept.lock.clone()))
        })?;
        self.closed();
        Some(taken)
    }

    /// The lock was released by the client's shutdown.
    fn closed(&self) {
        let first = self.with(|kept| {
            let first = !kept.closed && !kept.ended;
            kept.closed = true;
            if first && kept.loss.is_none() {
                metrics::held(&kept.lock, End::Released);
            }
            first
        });
        if first {
            self.lose(LossReason::Closed);
        }
    }

    pub(super) fn lose(&self, reason: LossReason) {
        // What an operator acts on, and what the loss signal reports to
        // the code that held the lock.
        info!(reason = %reason, "lock lost");
        self.with(|kept| kept.loss.get_or_insert(reason).clone());
        self.lost.cancel();
    }
}

/// What the keep-alive's driver tells a guard: each extension applied to
/// the guard's copy of the lock as it is reported, and the loss at the end.
pub(super) fn kept_alive(shared: &Shared, message: Message) {
    match message {
        Message::Event(OpEvent::KeepAlive(event)) => match event {
            KeptLockEvent::Extended(extended) => {
                metrics::extended(Ok(()));
                debug!(validity_ms = extended.validity.as_millis() as u64, votes = %extended.votes, "lock extended");
                shared.with(|kept| {
                    kept.lock.apply(&extended);
                    kept.ending = None;
                });
            }
            KeptLockEvent::ExtendFailed(error) => {
                metrics::extended(Err(&error));
                // Nodes down are reported by their connections; the loss,
                // if it comes, at INFO.
                debug!(error = %error, "extension failed");
                shared.with(|kept| kept.ending = Some(LossReason::ExtendFailed(error)));
            }
            KeptLockEvent::LimitReached { extensions } => {
                shared.with(|kept| kept.ending = Some(LossReason::ExtensionLimit { extensions }));
                debug!(
                    extensions,
                    "extension limit reached; the lock ends with its validity"
                );
            }
            other => debug!(event = ?other, "keep-alive"),
        },
        Message::Finished(finished) => match finished.take() {
            (OpEvent::KeepAlive(KeptLockEvent::Lost(reason)), _) => {
                metrics::lost(&reason);
                shared.with(|kept| metrics::held(&kept.lock, End::Lost));
                shared.lose(reason);
            }
            // Shut down: the core released the lock.
            (OpEvent::Closed, _) => {
                shared.closed();
            }
            _ => {}
        },
        // The runtime shuts down: the keep-alive ends with it.
        _ => {}
    }
}
