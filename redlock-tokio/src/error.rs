//! The adapter's error type: the core's errors by concern, plus what only
//! I/O can cause (credentials or a TLS handshake rejected, a lock lost while
//! work ran).

use redlock_core::{AcquireError, ConfigError, ExtendError, Key, LossReason, NodeError, Votes};

/// Everything that can go wrong, split by concern.
///
/// Each variant wraps the error of one step, and every error about a round of
/// requests carries the per-node [`Votes`]: which node said what.
///
/// # Reading an error
///
/// - `Display` is one short line (the class of failure, the tally, the
///   nodes that refused or failed), never the full per-node story, which
///   [`votes`](Self::votes) gives. Nodes are named by their canonical
///   address (`host:port/db`); messages never contain credentials.
/// - The wrapped core error is part of that line, so
///   [`source`](std::error::Error::source) returns `None`: error reporters
///   that walk the chain (`anyhow`'s `{:#}`) print each fact once. Reach
///   the core error with [`as_acquire`](Self::as_acquire) and
///   [`as_extend`](Self::as_extend).
/// - The predicates tell the classes apart, without matching variants:
///   [`is_held_by_other`](Self::is_held_by_other) (wait and retry, or give
///   up), [`is_unavailable`](Self::is_unavailable) (nodes down or slow:
///   retry later, alert), [`is_config`](Self::is_config) (permanent: fix the
///   configuration) and [`is_lock_lost`](Self::is_lock_lost) (stop the work
///   done under the lock). At most one of them is true.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration cannot work: no nodes, a duplicate or unparsable
    /// node URL, a TTL too small for its drift, ...
    #[error("invalid configuration: {0}")]
    Config(ConfigError),
    /// A server rejected the credentials while the client was being built
    /// (wrong password, unknown ACL user, or a password is required).
    ///
    /// This is a configuration error, so it fails the build, unlike a server
    /// that is merely unreachable.
    #[error("node {node}: {error}")]
    Auth {
        /// The node's canonical address.
        node: String,
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
    #[error("node {node}: {error}")]
    Tls {
        /// The node's canonical address.
        node: String,
        /// What the handshake said.
        error: NodeError,
    },
    /// Fewer servers were reachable when the client was built than
    /// [`Builder::require_connected`](crate::Builder::require_connected)
    /// asks. Transient ([`is_unavailable`](Self::is_unavailable)): build
    /// again once they are up.
    #[error(
        "{connected} of {} servers reachable at build, {required} required: {}",
        connected + unreachable.len(),
        unreachable_list(unreachable)
    )]
    Unreachable {
        /// The servers that answered.
        connected: usize,
        /// The servers required.
        required: usize,
        /// Each server that did not (its canonical address), and why.
        unreachable: Vec<(String, NodeError)>,
    },
    /// The lock was not acquired: held by another owner, too few nodes
    /// reachable, or the deadline passed.
    #[error("lock not acquired: {0}")]
    Acquire(AcquireError),
    /// The lock was not extended. Treat it as lost.
    #[error("lock not extended: {0}")]
    Extend(ExtendError),
    /// A leader's value was not written ([`Leadership::proclaim`](crate::Leadership::proclaim)):
    /// refused where the name is no longer ours or a higher term is stored
    /// (deposed: [`is_lock_lost`](Self::is_lock_lost)), or too few servers
    /// answered ([`is_unavailable`](Self::is_unavailable)).
    #[error("leader value not written: {0}")]
    Proclaim(ExtendError),
    /// The lock was lost while work ran under it
    /// ([`LockRequest::run`](crate::LockRequest::run)); the work was
    /// cancelled.
    #[error("lost the lock on {key} while working under it: {reason}")]
    LockLost {
        /// The lock key.
        key: Key,
        /// Why the lock was lost.
        reason: LossReason,
    },
    /// A call of the blocking client was made on a current-thread async
    /// runtime, where blocking would stall every task of that runtime: use
    /// the async client there (on a multi-thread runtime and in
    /// `spawn_blocking` the blocking client works).
    #[error(
        "a blocking call on a current-thread async runtime, whose one thread it would stall: \
         use the async client (redlock_tokio::Redlock) there"
    )]
    InsideRuntime,
    /// The client was shut down ([`Redlock::shutdown`](crate::Redlock::shutdown)):
    /// it takes, extends and holds no lock any more.
    #[error("the client was shut down")]
    Closed,
    /// The blocking client's thread or runtime could not be started (the
    /// process is out of threads or file descriptors).
    #[error("could not start the blocking client's runtime: {0}")]
    Runtime(std::sync::Arc<std::io::Error>),
}

// Not `#[from]`: that would also make the core error the `source()`, and
// its text is already in this error's `Display`.
impl From<ConfigError> for Error {
    fn from(error: ConfigError) -> Self {
        Error::Config(error)
    }
}

impl From<AcquireError> for Error {
    fn from(error: AcquireError) -> Self {
        Error::Acquire(error)
    }
}

impl From<ExtendError> for Error {
    fn from(error: ExtendError) -> Self {
        Error::Extend(error)
    }
}

impl Error {
    /// True when the lock is held by another owner (also when the acquire
    /// deadline passed and the last attempt found it held), as opposed to
    /// nodes failing or the configuration being wrong. Waiting and trying
    /// again may work.
    pub fn is_held_by_other(&self) -> bool {
        match self {
            Error::Acquire(error) => error.is_held_by_other(),
            _ => false,
        }
    }

    /// True when too few nodes answered in time, whoever holds the lock:
    /// nodes down, unreachable, paused or slow, or the wait limit passed
    /// before any attempt found the lock held. Transient: the same
    /// call may work once the nodes are back; alert if it lasts.
    ///
    /// An extension that failed this way is also
    /// [`is_unavailable`](Self::is_unavailable); treat that lock as lost.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Error::Unreachable { .. } => true,
            Error::Acquire(error) => acquire_unavailable(error),
            Error::Extend(error) | Error::Proclaim(error) => !error.loses_lock(),
            _ => false,
        }
    }

    /// True for a permanent error: the configuration cannot work
    /// ([`Error::Config`]: bad options, duplicate or unparsable servers, an
    /// even number of servers not allowed), a server rejected the
    /// credentials ([`Error::Auth`]) or the TLS handshake ([`Error::Tls`]),
    /// the lock's key holds a value of another type on enough masters
    /// ([`AcquireError::WrongType`]: another program uses that name), or a
    /// semaphore was asked for with another number of permits than its
    /// masters keep ([`AcquireError::PermitsMismatch`]: its users disagree).
    /// Retrying will not help; fix the configuration.
    pub fn is_config(&self) -> bool {
        matches!(
            self,
            Error::Config(_)
                | Error::Auth { .. }
                | Error::Tls { .. }
                | Error::InsideRuntime
                | Error::Acquire(AcquireError::WrongType { .. })
                | Error::Acquire(AcquireError::PermitsMismatch { .. })
        )
    }

    /// True when a lock held until now is gone: it was lost while work ran
    /// under it ([`Error::LockLost`]) or an extension found it expired or
    /// held by another owner. Stop the work it protected.
    pub fn is_lock_lost(&self) -> bool {
        match self {
            Error::LockLost { .. } => true,
            Error::Extend(error) | Error::Proclaim(error) => error.loses_lock(),
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

    /// The extend error, if this is one (also when it caused a lost lock,
    /// or a refused proclaim).
    pub fn as_extend(&self) -> Option<&ExtendError> {
        match self {
            Error::Extend(error)
            | Error::Proclaim(error)
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
            | Error::Proclaim(error)
            | Error::LockLost {
                reason: LossReason::ExtendFailed(error),
                ..
            } => error.votes(),
            _ => None,
        }
    }
}

fn acquire_unavailable(error: &AcquireError) -> bool {
    match error {
        AcquireError::NoQuorum { .. } | AcquireError::ValidityExhausted { .. } => true,
        AcquireError::DeadlineExceeded { last, .. } => {
            last.as_deref().is_none_or(acquire_unavailable)
        }
        _ => false,
    }
}

/// `a:6379/0 (unreachable: connection refused); b:6379/0 (timed out: ...)`.
fn unreachable_list(unreachable: &[(String, NodeError)]) -> String {
    let shown: Vec<String> = unreachable
        .iter()
        .map(|(node, error)| format!("{node} ({error})"))
        .collect();
    shown.join("; ")
}

/// The error of work run under a lock ([`LockRequest::run`](crate::LockRequest::run)):
/// any error, boxed. A closure that returns `Err("...".into())` or uses `?`
/// on any error type needs no annotation; get a typed error of yours back
/// with `downcast_ref` or `downcast` (of `dyn Error`).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why [`LockRequest::run`](crate::LockRequest::run) (or the blocking
/// one) did not return the work's value: the lock failed, or the work did.
///
/// `Display` and [`source`](std::error::Error::source) are those of the
/// error inside, so reporters print it as if it were that error.
///
/// ```no_run
/// use redlock_tokio::{Redlock, RunError};
///
/// # #[derive(Debug)] struct Stale;
/// # impl std::fmt::Display for Stale { fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { f.write_str("stale") } }
/// # impl std::error::Error for Stale {}
/// # async fn publish() -> Result<(), Stale> { Ok(()) }
/// # async fn demo(redlock: &Redlock) {
/// match redlock.lock("feed").run(async |_lock| Ok(publish().await?)).await {
///     Ok(()) => {}
///     Err(RunError::Lock(error)) if error.is_held_by_other() => { /* someone else does it */ }
///     Err(RunError::Lock(error)) => eprintln!("the lock failed: {error}"),
///     Err(RunError::Work(error)) if error.is::<Stale>() => { /* our own error, typed */ }
///     Err(RunError::Work(error)) => eprintln!("the work failed: {error}"),
/// }
/// # }
/// ```
#[derive(Debug)]
pub enum RunError {
    /// The lock was not acquired, was lost while the work ran (the work was
    /// stopped: [`Error::LockLost`]), or (blocking) was not released.
    Lock(Error),
    /// The work returned this error; the lock was held throughout.
    Work(BoxError),
}

impl RunError {
    /// The lock's error, if the lock failed.
    pub fn as_lock(&self) -> Option<&Error> {
        match self {
            RunError::Lock(error) => Some(error),
            RunError::Work(_) => None,
        }
    }

    /// True when the lock was lost while the work ran, which was stopped
    /// ([`Error::is_lock_lost`]).
    pub fn is_lock_lost(&self) -> bool {
        self.as_lock().is_some_and(Error::is_lock_lost)
    }

    /// True when the lock was not acquired because another owner holds it
    /// ([`Error::is_held_by_other`]): the work did not run.
    pub fn is_held_by_other(&self) -> bool {
        self.as_lock().is_some_and(Error::is_held_by_other)
    }

    /// The work's error, if the work failed.
    pub fn as_work(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        match self {
            RunError::Lock(_) => None,
            RunError::Work(error) => Some(error.as_ref()),
        }
    }
}

impl From<Error> for RunError {
    fn from(error: Error) -> Self {
        RunError::Lock(error)
    }
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Lock(error) => error.fmt(f),
            RunError::Work(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for RunError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RunError::Lock(error) => error.source(),
            RunError::Work(error) => error.source(),
        }
    }
}
