//! A blocking lock: its request and its guard, wrapping the async ones.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redlock_core::{Key, LockValue, Votes};

use super::{Shared, may_block};
use crate::{
    BoxError, Error, KeepAlive, LossReason, LossSignal, ReleaseReport, RunError, Wait, kind,
};

/// One blocking acquire, made by [`Redlock::lock`](super::Redlock::lock) or [`Redlock::lock_all`](super::Redlock::lock_all):
/// the modifiers of [`crate::LockRequest`], ended by
/// [`acquire`](Self::acquire) or [`run`](Self::run).
#[must_use = "a lock request does nothing until it is acquired or run"]
pub struct LockRequest<K = kind::Open> {
    pub(super) request: crate::LockRequest<K>,
    pub(super) shared: Arc<Shared>,
}

impl<K> fmt::Debug for LockRequest<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("blocking::LockRequest")
            .field(&self.request)
            .finish()
    }
}

impl LockRequest<kind::Open> {
    fn kind(
        self,
        choose: impl FnOnce(crate::LockRequest) -> crate::LockRequest<kind::Chosen>,
    ) -> LockRequest<kind::Chosen> {
        LockRequest {
            request: choose(self.request),
            shared: self.shared,
        }
    }

    /// With a fencing token ([`crate::LockRequest::fencing`]).
    pub fn fencing(self) -> LockRequest<kind::Chosen> {
        self.kind(crate::LockRequest::<kind::Open>::fencing)
    }

    /// Fair ([`crate::LockRequest::fair`]).
    pub fn fair(self) -> LockRequest<kind::Chosen> {
        self.kind(crate::LockRequest::fair)
    }

    /// A read lock ([`crate::LockRequest::read`]).
    pub fn read(self) -> LockRequest<kind::Chosen> {
        self.kind(crate::LockRequest::read)
    }

    /// A write lock ([`crate::LockRequest::write`]).
    pub fn write(self) -> LockRequest<kind::Chosen> {
        self.kind(crate::LockRequest::write)
    }

    /// Reentrant for `owner` ([`crate::LockRequest::reentrant`]).
    pub fn reentrant(self, owner: impl Into<Arc<str>>) -> LockRequest<kind::Chosen> {
        self.kind(|request| request.reentrant(owner))
    }

    /// One of `permits` permits of a semaphore
    /// ([`crate::LockRequest::permits`]).
    pub fn permits(self, permits: u32) -> LockRequest<kind::Permits> {
        LockRequest {
            request: self.request.permits(permits),
            shared: self.shared,
        }
    }
}

impl LockRequest<kind::Permits> {
    /// With a fencing token per permit
    /// ([`crate::LockRequest::<kind::Permits>::fencing`]).
    pub fn fencing(self) -> LockRequest<kind::Chosen> {
        LockRequest {
            request: self.request.fencing(),
            shared: self.shared,
        }
    }
}

impl<K: Send + 'static> LockRequest<K> {
    /// This lock's TTL ([`crate::LockRequest::ttl`]).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.request = self.request.ttl(ttl);
        self
    }

    /// How long to wait ([`crate::LockRequest::wait`]).
    pub fn wait(mut self, wait: Wait) -> Self {
        self.request = self.request.wait(wait);
        self
    }

    /// Keeps the lock alive on the client's thread once granted
    /// ([`crate::LockRequest::keep_alive`]).
    pub fn keep_alive(mut self, options: KeepAlive) -> Self {
        self.request = self.request.keep_alive(options);
        self
    }

    /// Waits for the lock as the request says, and returns its guard.
    pub fn acquire(self) -> Result<LockGuard, Error> {
        let guard = self
            .shared
            .block_on(std::future::IntoFuture::into_future(self.request))??;
        Ok(LockGuard {
            guard: Some(guard),
            shared: self.shared,
        })
    }

    /// Runs `work` on this thread under the lock, kept alive on the
    /// client's thread ([`KeepAlive::default`] unless the request says),
    /// and releases it at the end, whatever the work returns. A lock lost
    /// meanwhile cannot stop synchronous work: check
    /// [`LockGuard::is_lost`] between its steps. Once the lock was lost the
    /// result is [`Error::LockLost`], whatever the work returned. As the
    /// async [`run`](crate::LockRequest::run), the work fails with any
    /// error ([`BoxError`]) and the result is a [`RunError`].
    pub fn run<T>(
        mut self,
        work: impl FnOnce(&LockGuard) -> Result<T, BoxError>,
    ) -> Result<T, RunError> {
        if self.request.keep_alive_options().is_none() {
            self = self.keep_alive(KeepAlive::default());
        }
        let guard = self.acquire()?;
        let outcome = work(&guard);
        let loss = guard.loss();
        let key = guard.key().clone();
        guard.release()?;
        match loss {
            Some(reason) => Err(Error::LockLost { key, reason }.into()),
            None => outcome.map_err(RunError::Work),
        }
    }
}

/// A lock held on a quorum of nodes, from a blocking [`LockRequest`]: the
/// accessors of [`crate::LockGuard`], and its commands as blocking calls.
/// Dropping it releases the lock on the client's thread, without waiting.
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard {
    /// `None` once released or forgotten.
    guard: Option<crate::LockGuard>,
    shared: Arc<Shared>,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("blocking::LockGuard")
            .field(self.inner())
            .finish()
    }
}

impl LockGuard {
    fn inner(&self) -> &crate::LockGuard {
        // Every method that takes it out consumes the guard.
        self.guard.as_ref().expect("a live guard holds its lock")
    }

    forward! {
        /// The resource name ([`crate::LockGuard::resource`]).
        resource -> &[u8];
        /// The Redis key ([`crate::LockGuard::key`]).
        key -> &Key;
        /// Our value on the nodes ([`crate::LockGuard::value`]).
        value -> &LockValue;
        /// The fencing token of a fenced lock ([`crate::LockGuard::fencing_token`]).
        fencing_token -> Option<u64>;
        /// The votes of the round that acquired the lock.
        votes -> &Votes;
        /// When the winning round was sent ([`crate::LockGuard::acquired_at`]).
        acquired_at -> Instant;
        /// Validity left now; zero once lost ([`crate::LockGuard::validity`]).
        validity -> Duration;
        /// The end of the last validity window ([`crate::LockGuard::valid_until`]).
        valid_until -> Instant;
        /// The TTL of the last acquire or extension.
        ttl -> Duration;
        /// Successful extensions so far.
        extensions -> u64;
        /// Whether the lock is lost ([`crate::LockGuard::is_lost`]).
        is_lost -> bool;
        /// Why the lock was lost, once it is.
        loss -> Option<LossReason>;
        /// The loss signal as a handle of its own, for async code elsewhere.
        loss_signal -> LossSignal;
    }

    /// Extends the lock ([`crate::LockGuard::extend`]).
    pub fn extend(&mut self, ttl: Duration) -> Result<Duration, Error> {
        let guard = self.guard.as_mut().expect("a live guard holds its lock");
        self.shared.block_on(guard.extend(ttl))?
    }

    /// Releases the lock on every node and reports what each did
    /// ([`crate::LockGuard::release`]).
    pub fn release(mut self) -> Result<ReleaseReport, Error> {
        may_block()?;
        let guard = self.guard.take().expect("a live guard holds its lock");
        self.shared
            .block_on(std::future::IntoFuture::into_future(guard.release()))
    }

    /// Blocks until the lock is lost, with the reason, as
    /// [`crate::LockGuard::lost`]: for a thread that watches the lock
    /// while another works under it (a released or forgotten lock is let
    /// go, not lost: it never returns then).
    pub fn wait_lost(&self) -> Result<LossReason, Error> {
        self.shared.block_on(self.inner().lost())
    }

    /// Releases the lock and waits for every node's answer (or its
    /// per-node timeout) before reporting, as
    /// [`crate::Releasing::every_node`]: no node is left pending.
    pub fn release_every_node(mut self) -> Result<ReleaseReport, Error> {
        may_block()?;
        let guard = self.guard.take().expect("a live guard holds its lock");
        self.shared.block_on(std::future::IntoFuture::into_future(
            guard.release().every_node(),
        ))
    }

    /// Stops tracking the lock without releasing it ([`crate::LockGuard::forget`]).
    pub fn forget(mut self) -> LockValue {
        let guard = self.guard.take().expect("a live guard holds its lock");
        guard.forget()
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if let Some(guard) = self.guard.take() {
            // Released by a task of the client's thread: this thread never
            // waits, whether it runs async tasks or not.
            let _entered = self.shared.handle.enter();
            drop(guard);
        }
    }
}
