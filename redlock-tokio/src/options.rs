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
}

impl Default for LockOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl LockOptions {
    /// The client's defaults: its TTL, its fencing choice, retries.
    pub fn new() -> Self {
        Self {
            ttl: None,
            fencing: None,
            attempts: Attempts::Retry,
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

    /// One attempt, no retry, as [`Redlock::try_lock`].
    pub fn once(mut self) -> Self {
        self.attempts = Attempts::Once;
        self
    }
}
