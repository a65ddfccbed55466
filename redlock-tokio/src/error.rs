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
    /// The lock was not acquired: held by another owner, too few nodes
    /// reachable, or the deadline passed.
    #[error("lock not acquired: {0}")]
    Acquire(AcquireError),
    /// The lock was not extended. Treat it as lost.
    #[error("lock not extended: {0}")]
    Extend(ExtendError),
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
    /// A call of the blocking client was made on a thread that runs an
    /// async runtime, where blocking would stall every task of that thread:
    /// use the async client there.
    #[error(
        "a blocking call inside an async runtime: use the async client (redlock_tokio::Redlock) there"
    )]
    InsideRuntime,
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
            Error::Acquire(error) => acquire_unavailable(error),
            Error::Extend(error) => matches!(error, ExtendError::NoQuorum { .. }),
            _ => false,
        }
    }

    /// True for a permanent error: the configuration cannot work
    /// ([`Error::Config`]: bad options, duplicate or unparsable servers, an
    /// even number of servers not allowed), a server rejected the
    /// credentials ([`Error::Auth`]) or the TLS handshake ([`Error::Tls`]),
    /// or the lock's key holds a value of another type on enough masters
    /// ([`AcquireError::WrongType`]: another program uses that name).
    /// Retrying will not help; fix the configuration.
    pub fn is_config(&self) -> bool {
        matches!(
            self,
            Error::Config(_)
                | Error::Auth { .. }
                | Error::Tls { .. }
                | Error::InsideRuntime
                | Error::Acquire(AcquireError::WrongType { .. })
        )
    }

    /// True when a lock held until now is gone: it was lost while work ran
    /// under it ([`Error::LockLost`]) or an extension found it expired or
    /// held by another owner. Stop the work it protected.
    pub fn is_lock_lost(&self) -> bool {
        match self {
            Error::LockLost { .. } => true,
            Error::Extend(error) => !matches!(error, ExtendError::NoQuorum { .. }),
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

fn acquire_unavailable(error: &AcquireError) -> bool {
    match error {
        AcquireError::NoQuorum { .. } | AcquireError::ValidityExhausted { .. } => true,
        AcquireError::DeadlineExceeded { last, .. } => {
            last.as_deref().is_none_or(acquire_unavailable)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use rand::SeedableRng;
    use rand::rngs::StdRng;
    use redlock_core::Machine;
    use redlock_core::{
        AcquireEvent, Acquisition, Attempts, Config, NodeErrorKind, Response, Settings,
    };

    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// What `anyhow`'s `{:#}` prints: every error of the chain, joined.
    fn chain(error: &dyn std::error::Error) -> String {
        let mut text = error.to_string();
        let mut source = error.source();
        while let Some(cause) = source {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            source = cause.source();
        }
        text
    }

    /// Long node names, as in a real deployment.
    fn settings(n: usize, ttl: Duration, node_timeout: Duration) -> Arc<Settings> {
        let nodes =
            (0..n).map(|i| format!("redis-lock-master-{i}.eu-west-1.internal.example.com:6379/0"));
        Arc::new(
            Config::new(nodes)
                .ttl(ttl)
                .node_timeout(node_timeout)
                .validate()
                .unwrap(),
        )
    }

    /// One attempt whose node `i` answers `reply(i)` at `t0 + after`.
    fn attempt(
        settings: &Arc<Settings>,
        after: Duration,
        reply: impl Fn(usize) -> Result<Response, NodeError>,
    ) -> AcquireError {
        let t0 = Instant::now();
        let mut acquire = Acquisition::new(
            Arc::clone(settings),
            b"invoice-42",
            settings.default_ttl(),
            Attempts::Once,
            t0,
            StdRng::seed_from_u64(7),
        );
        let requests: Vec<_> = std::iter::from_fn(|| acquire.poll_request()).collect();
        for request in &requests {
            acquire.handle_reply(
                redlock_core::Reply::to(request, reply(request.node.0)),
                t0 + after,
            );
        }
        acquire.handle_timeout(t0 + Duration::from_secs(1));
        match acquire.poll_event() {
            Some(AcquireEvent::Failed(error)) => error,
            other => panic!("expected a failure, got {other:?}"),
        }
    }

    /// What a node that is down says, in the adapter's words.
    fn down() -> NodeError {
        NodeError::new(
            NodeErrorKind::Connection,
            "not connected; last error: Connection refused (os error 111)",
        )
    }

    fn common_errors() -> Vec<Error> {
        let five = settings(5, Duration::from_secs(10), 50 * MS);
        let held = attempt(&five, MS, |i| {
            if i < 3 {
                Ok(Response::Data(b"0123456789abcdef0123456789abcdef".to_vec()))
            } else {
                Ok(Response::Int(1))
            }
        });
        let no_quorum = attempt(&five, MS, |i| {
            if i == 0 {
                Ok(Response::Int(1))
            } else {
                Err(down())
            }
        });
        // The longest per-node timeout a 100 ms TTL allows (1 ms of validity
        // left, `MIN_VALIDITY`); a reply counts until its timeout is handled.
        let slow = attempt(&settings(3, 100 * MS, 96 * MS), 97 * MS, |_| {
            Ok(Response::Int(1))
        });
        assert!(
            matches!(slow, AcquireError::ValidityExhausted { .. }),
            "{slow:?}"
        );
        let deadline = AcquireError::DeadlineExceeded {
            deadline: Duration::from_secs(2),
            attempts: 11,
            last: Some(Box::new(no_quorum.clone())),
        };
        let lost = ExtendError::Lost {
            votes: held.votes().unwrap().clone(),
        };
        vec![
            Error::Acquire(held),
            Error::Acquire(no_quorum.clone()),
            Error::Acquire(slow),
            Error::Acquire(deadline),
            Error::Extend(lost.clone()),
            Error::Extend(ExtendError::NoQuorum {
                votes: no_quorum.votes().unwrap().clone(),
            }),
            Error::LockLost {
                key: Key::from("invoice-42"),
                reason: LossReason::ExtendFailed(lost),
            },
            Error::Config(ConfigError::NoNodes),
            Error::Config(ConfigError::DuplicateNode {
                node: "redis-lock-master-0.eu-west-1.internal.example.com:6379/0".into(),
            }),
            Error::Config(ConfigError::TtlBelowDrift {
                ttl: 2 * MS,
                drift: 2 * MS,
            }),
            Error::Auth {
                node: "redis-lock-master-0.eu-west-1.internal.example.com:6379/0".into(),
                error: NodeError::new(
                    NodeErrorKind::Auth,
                    "WRONGPASS invalid username-password pair or user is disabled.",
                ),
            },
        ]
    }

    #[test]
    fn messages_are_one_short_line_printed_once() {
        for error in common_errors() {
            let text = error.to_string();
            // The longest names one node of 58 characters in full.
            assert!(text.len() <= 220, "{} chars: {text}", text.len());
            assert!(!text.contains('\n'), "{text}");
            // The core error is in the message, so it is not a source too:
            // a chain walk prints every fact once.
            assert!(std::error::Error::source(&error).is_none(), "{text}");
            assert_eq!(chain(&error), text);
        }
    }

    #[test]
    fn messages_name_the_class_and_the_nodes_without_their_words() {
        let errors = common_errors();
        let held = errors[0].to_string();
        assert!(
            held.contains("held by another owner on 3 of 5 nodes"),
            "{held}"
        );
        assert!(held.contains("redis-lock-master-0."), "{held}");
        assert!(held.contains("more"), "{held}");
        let no_quorum = errors[1].to_string();
        assert!(
            no_quorum.contains("1 of 5 nodes granted, quorum 3, 1 not waited for; failed:"),
            "{no_quorum}"
        );
        assert!(no_quorum.contains("unreachable"), "{no_quorum}");
        // The node's own words stay in the votes.
        assert!(!no_quorum.contains("os error"), "{no_quorum}");
        let votes = errors[1].votes().unwrap().to_string();
        assert!(votes.contains("Connection refused"), "{votes}");
        let deadline = errors[3].to_string();
        assert!(deadline.contains("deadline"), "{deadline}");
        assert!(deadline.contains("no quorum"), "{deadline}");
    }

    #[test]
    fn predicates_tell_the_classes_apart() {
        let errors = common_errors();
        let classes: Vec<[bool; 4]> = errors
            .iter()
            .map(|e| {
                [
                    e.is_held_by_other(),
                    e.is_unavailable(),
                    e.is_config(),
                    e.is_lock_lost(),
                ]
            })
            .collect();
        let (held, unavailable, config, lost) = (
            [true, false, false, false],
            [false, true, false, false],
            [false, false, true, false],
            [false, false, false, true],
        );
        assert_eq!(
            classes,
            [
                held,
                unavailable,
                unavailable,
                unavailable,
                lost,
                unavailable,
                lost,
                config,
                config,
                config,
                config
            ]
        );
    }
}
