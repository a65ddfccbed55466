//! The options of one acquire.

use std::time::Duration;

use redlock_core::Attempts;

#[allow(unused_imports)] // for the docs
use crate::{Builder, LockGuard, Redlock};

/// Options of one acquire, for [`Redlock::lock_with`].
#[derive(Clone, Copy, Debug)]
pub struct LockOptions {
    pub(crate) ttl: Option<Duration>,
    pub(crate) fencing: Option<bool>,
    pub(crate) attempts: Attempts,
    pub(crate) fair: bool,
}

impl Default for LockOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl LockOptions {
    /// The client's defaults: its TTL, its fencing choice, retries (its
    /// retry count, within its [acquire deadline](Builder::acquire_deadline)
    /// if it has one).
    pub fn new() -> Self {
        Self {
            ttl: None,
            fencing: None,
            attempts: Attempts::Retry,
            fair: false,
        }
    }

    /// A TTL for this lock (validated like the client's).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Whether this lock comes with a fencing token
    /// ([`LockGuard::fencing_token`]); by default the client's
    /// [`Builder::fencing`] choice. A fenced acquire costs one more round
    /// trip per node and keeps a counter key per resource on every node.
    pub fn fencing(mut self, fencing: bool) -> Self {
        self.fencing = Some(fencing);
        self
    }

    /// Whether waiters of this lock are served first come, first served
    /// across processes (default `false`): a fair lock
    /// ([`LockSpec::Fair`](crate::LockSpec::Fair)). Each master keeps a queue of
    /// the waiters next to the key and grants a free key only to the head
    /// of its queue, so while a quorum of masters is up the lock goes to
    /// the waiter the quorum saw first. A dead waiter holds the queue at
    /// most until its entry expires (two retry delays and two per-node
    /// timeouts, never more than the TTL), and masters that disagree on the
    /// order fall back on the plain rule after
    /// [`FAIR_PATIENCE`](redlock_core::FAIR_PATIENCE) attempts. Every
    /// client of the resource must ask for it: a plain lock does not wait in
    /// line.
    ///
    /// For an exclusive lock without a fencing token: with
    /// [`fencing(true)`](Self::fencing), or through
    /// [`Redlock::lock_spec`] for another kind, the call fails with
    /// [`ConfigError::FairUnsupported`](crate::ConfigError::FairUnsupported)
    /// (the client's default fencing does not apply to a fair lock).
    ///
    /// ```no_run
    /// # async fn demo(redlock: redlock_tokio::Redlock) -> Result<(), redlock_tokio::Error> {
    /// use redlock_tokio::LockOptions;
    ///
    /// let guard = redlock.lock_with("printer", LockOptions::new().fair(true)).await?;
    /// // ... print ...
    /// guard.release().await;
    /// # Ok(()) }
    /// ```
    pub fn fair(mut self, fair: bool) -> Self {
        self.fair = fair;
        self
    }

    /// One attempt, no retry, as [`Redlock::try_lock`]. Replaces
    /// [`wait_at_most`](Self::wait_at_most); the last of the two wins.
    pub fn once(mut self) -> Self {
        self.attempts = Attempts::Once;
        self
    }

    /// Waits at most `limit` for this lock, retrying until then however
    /// many attempts that takes, as Redisson's `tryLock(waitTime,
    /// leaseTime)`: the call's own deadline, in place of the client's
    /// [`Builder::acquire_deadline`], and the client's
    /// [`Builder::retry_count`] does not apply to it (the retry delays and
    /// release notices do). Replaces [`once`](Self::once); the last of the
    /// two wins.
    ///
    /// The limit is waited out: the call never gives up before it. While
    /// the lock is held it listens for the holder's release (the release
    /// notice starts an attempt at once) and, when its next timed retry
    /// would come after the limit, makes a last one timed to end by it; it
    /// fails only at the limit. A lock released before the limit is taken,
    /// unless another waiter takes it first.
    ///
    /// The limit counts from the start of the call and is hard: a quorum
    /// counted at or after it is released, and the call fails with
    /// [`AcquireError::DeadlineExceeded`](crate::AcquireError::DeadlineExceeded)
    /// naming `limit` (with the last attempt's error: held by another owner,
    /// [`Error::is_held_by_other`](crate::Error::is_held_by_other), or nodes
    /// failing). So a limit below one round trip to the nodes never gets
    /// the lock.
    ///
    /// - Zero is an [`Error::Config`](crate::Error::Config)
    ///   ([`ConfigError::ZeroDeadline`](crate::ConfigError::ZeroDeadline)):
    ///   for one attempt without waiting, use [`once`](Self::once).
    /// - `Duration::MAX` (any limit that would end past what the clock can
    ///   represent) means no limit: the call retries until it gets the lock
    ///   or a permanent error ([`Error::is_config`](crate::Error::is_config)),
    ///   also while nodes are down.
    ///
    /// ```no_run
    /// # async fn demo(redlock: redlock_tokio::Redlock) -> Result<(), redlock_tokio::Error> {
    /// use std::time::Duration;
    /// use redlock_tokio::LockOptions;
    ///
    /// // Wait up to 2 s for the lock, then hold it for 30 s unless extended.
    /// let options = LockOptions::new()
    ///     .wait_at_most(Duration::from_secs(2))
    ///     .ttl(Duration::from_secs(30));
    /// match redlock.lock_with("nightly-report", options).await {
    ///     Ok(guard) => { /* ... work ... */ guard.release().await; }
    ///     Err(error) if error.is_held_by_other() => println!("busy for 2 s, skipping: {error}"),
    ///     Err(error) => return Err(error),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn wait_at_most(mut self, limit: Duration) -> Self {
        self.attempts = Attempts::Within(limit);
        self
    }
}
