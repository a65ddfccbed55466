//! The adapter's error type: the core's errors by concern, plus what only
//! I/O can cause (credentials or a TLS handshake rejected, a lock lost while
//! work ran).

use redlock_core::{AcquireError, ConfigError, ExtendError, Key, NodeError, Votes};

/// Everything that can go wrong, split by concern.
///
/// Each variant wraps the error of one step, and every error about a round of
/// requests carries the per-node [`Votes`]: which node said what. Messages
/// name nodes by their canonical address (`host:port/db`) and never contain
/// credentials.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration cannot work: no servers, a duplicate or unparsable
    /// server URL, a TTL too small for its drift, ...
    #[error("invalid configuration: {0}")]
    Config(#[from] ConfigError),
    /// A server rejected the credentials while the client was being built
    /// (wrong password, unknown ACL user, or a password is required).
    ///
    /// This is a configuration error, so it fails the build, unlike a server
    /// that is merely unreachable.
    #[error("server {server} rejected the credentials: {error}")]
    Auth {
        /// The server's canonical address.
        server: String,
        /// What the server said.
        error: NodeError,
    },
    /// The TLS handshake with a server was refused while the client was
    /// being built: the server's certificate is not trusted (unknown CA,
    /// another host name, expired), or the server wants a client
    /// certificate that was not given or that it does not trust.
    ///
    /// A configuration error like [`Auth`](Self::Auth), so it fails the
    /// build, unlike a server that is merely unreachable.
    #[error("server {server}: {error}")]
    Tls {
        /// The server's canonical address.
        server: String,
        /// What the handshake said.
        error: NodeError,
    },
    /// The lock was not acquired: held by another owner, too few nodes
    /// reachable, or the deadline passed.
    #[error("lock not acquired: {0}")]
    Acquire(#[from] AcquireError),
    /// The lock was not extended. Treat it as lost.
    #[error("lock not extended: {0}")]
    Extend(#[from] ExtendError),
    /// The lock was lost while work ran under it
    /// ([`Redlock::with_lock`](crate::Redlock::with_lock)); the work was
    /// cancelled.
    #[error("lost the lock on {key} while working under it: {reason}")]
    LockLost {
        /// The lock key.
        key: Key,
        /// Why the lock was lost.
        reason: LossReason,
    },
}

impl Error {
    /// True when the lock is held by another owner, as opposed to nodes
    /// failing or the configuration being wrong.
    pub fn is_held_by_other(&self) -> bool {
        match self {
            Error::Acquire(error) => error.is_held_by_other(),
            _ => false,
        }
    }

    /// The acquire error, if this is one.
    pub fn as_acquire(&self) -> Option<&AcquireError> {
        match self {
            Error::Acquire(error) => Some(error),
            _ => None,
        }
    }

    /// The extend error, if this is one (also when it caused a lost lock).
    pub fn as_extend(&self) -> Option<&ExtendError> {
        match self {
            Error::Extend(error)
            | Error::LockLost {
                reason: LossReason::ExtendFailed(error),
                ..
            } => Some(error),
            _ => None,
        }
    }

    /// The per-node votes of the round that failed, when one ran.
    pub fn votes(&self) -> Option<&Votes> {
        match self {
            Error::Acquire(error) => error.votes(),
            Error::Extend(error)
            | Error::LockLost {
                reason: LossReason::ExtendFailed(error),
                ..
            } => error.votes(),
            _ => None,
        }
    }
}

/// Why a kept-alive lock was lost.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum LossReason {
    /// An extension failed: another owner holds the key on a majority, the
    /// validity ran out before an extension could count (a slow or paused
    /// client), or too few nodes answered until the validity ran out.
    #[error("{0}")]
    ExtendFailed(ExtendError),
    /// The configured number of extensions was reached and the validity then
    /// ran out.
    #[error("the validity ran out after the maximum of {extensions} extension(s)")]
    ExtensionLimit {
        /// Extensions made.
        extensions: u64,
    },
}
