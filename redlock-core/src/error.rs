//! Errors, split by concern: configuration, acquiring, extending.
//!
//! Every error about a round carries the per-node [`Votes`], so one log line
//! tells which node said what.

use std::fmt;
use std::time::Duration;

use crate::Votes;

/// Formats a duration as milliseconds with up to three decimals.
pub(crate) struct Millis(pub(crate) Duration);

impl fmt::Display for Millis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let micros = self.0.as_micros();
        if micros.is_multiple_of(1000) {
            write!(f, "{} ms", micros / 1000)
        } else {
            write!(f, "{:.3} ms", micros as f64 / 1000.0)
        }
    }
}

/// A configuration value that cannot work, found by
/// [`Config::validate`](crate::Config::validate) or
/// [`Settings::ttl`](crate::Settings::ttl).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The server list is empty.
    #[error(
        "no servers given: Redlock needs at least one Redis master (an odd number, such as 3 or 5)"
    )]
    NoServers,
    /// The same server appears twice; it would count twice towards the quorum.
    #[error("server {server} is listed twice: each master may count only once towards the quorum")]
    DuplicateServer {
        /// The repeated server.
        server: String,
    },
    /// The TTL is zero.
    #[error("the TTL is zero: a lock must live for at least a few milliseconds")]
    ZeroTtl,
    /// The TTL does not fit Redis' `PX` argument.
    #[error(
        "the TTL {ttl:?} is too large for Redis (at most {} ms)",
        crate::config::MAX_TTL_MS
    )]
    TtlTooLarge {
        /// The TTL asked for.
        ttl: Duration,
    },
    /// The drift allowance takes the whole TTL, so no lock would ever be valid.
    #[error("the TTL {ttl:?} leaves no validity after the clock drift allowance of {}", Millis(*drift))]
    TtlBelowDrift {
        /// The TTL asked for.
        ttl: Duration,
        /// The drift allowance for that TTL.
        drift: Duration,
    },
    /// The drift factor is outside `[0, 1)`.
    #[error(
        "the drift factor {factor} is outside [0, 1): it is the share of the TTL set aside for clock drift"
    )]
    DriftFactor {
        /// The factor given.
        factor: f64,
    },
    /// The per-node timeout is zero.
    #[error("the per-node timeout is zero: every node would count as failed")]
    ZeroNodeTimeout,
    /// The per-node timeout is not below the TTL.
    #[error("the per-node timeout {} is not below the TTL {ttl:?}: one slow node could use up the whole lock", Millis(*node_timeout))]
    NodeTimeoutNotBelowTtl {
        /// The per-node timeout.
        node_timeout: Duration,
        /// The TTL.
        ttl: Duration,
    },
    /// The value length is outside the accepted range.
    #[error(
        "a lock value of {len} random bytes is outside {}..={}: too short is guessable, too long is waste",
        crate::config::MIN_VALUE_LEN,
        crate::config::MAX_VALUE_LEN
    )]
    ValueLength {
        /// The length given.
        len: usize,
    },
    /// The acquire deadline is zero.
    #[error("the acquire deadline is zero: no attempt could ever start")]
    ZeroDeadline,
    /// Fencing tokens were asked for on a lock kind that has none.
    #[error(
        "fencing tokens exist for exclusive locks only, not for read, write, reentrant or multi-resource locks"
    )]
    FencingUnsupported,
    /// A multi-resource lock names no resource.
    #[error("a multi-resource lock needs at least one resource")]
    NoResources,
    /// A reentrant lock has an empty owner id.
    #[error("a reentrant lock needs a non-empty owner id: it decides who may take the lock again")]
    EmptyOwner,
    /// A server address could not be used (reported by adapters, which parse them).
    #[error("server {server}: {reason}")]
    InvalidServer {
        /// The server as given, credentials removed.
        server: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A TLS option could not be used: an unreadable or empty certificate
    /// file, a key that does not match its certificate, ... (reported by
    /// adapters, which read the files).
    #[error("TLS: {reason}")]
    InvalidTls {
        /// What is wrong, naming the file.
        reason: String,
    },
}

/// Why a lock was not acquired.
///
/// In every case the state machine has already asked every node to release
/// whatever this acquisition might have set there.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum AcquireError {
    /// Another owner holds the lock on enough nodes that no quorum was possible.
    #[error("the lock is held by another owner (on {}) after {attempts} attempt(s): {votes}", holders(.votes))]
    Held {
        /// The last attempt's votes.
        votes: Votes,
        /// Attempts made.
        attempts: u32,
    },
    /// Too many nodes failed or timed out for a quorum, whoever holds the lock.
    #[error("no quorum: too many nodes failed to grant the lock after {attempts} attempt(s): {}; {votes}", failures(.votes))]
    NoQuorum {
        /// The last attempt's votes.
        votes: Votes,
        /// Attempts made.
        attempts: u32,
    },
    /// A quorum said yes, but so late that no validity was left (slow nodes or a
    /// paused client). The lock was released again.
    #[error("a quorum was reached but after {}, which left no validity of the {} TTL; the lock was released: {votes}", Millis(votes.elapsed()), Millis(*ttl))]
    ValidityExhausted {
        /// The last attempt's votes.
        votes: Votes,
        /// The TTL asked for.
        ttl: Duration,
        /// Attempts made.
        attempts: u32,
    },
    /// The overall acquire deadline passed before an attempt succeeded.
    #[error("the acquire deadline of {} passed after {attempts} attempt(s){}", Millis(*deadline), last_error(.last))]
    DeadlineExceeded {
        /// The configured deadline.
        deadline: Duration,
        /// Attempts made (the last one may have been cut short).
        attempts: u32,
        /// Why the last finished attempt failed, if one finished.
        last: Option<Box<AcquireError>>,
    },
}

impl AcquireError {
    /// The per-node votes of the last attempt, when one finished.
    pub fn votes(&self) -> Option<&Votes> {
        match self {
            AcquireError::Held { votes, .. }
            | AcquireError::NoQuorum { votes, .. }
            | AcquireError::ValidityExhausted { votes, .. } => Some(votes),
            AcquireError::DeadlineExceeded { last, .. } => last.as_deref().and_then(Self::votes),
        }
    }

    /// Attempts made.
    pub fn attempts(&self) -> u32 {
        match self {
            AcquireError::Held { attempts, .. }
            | AcquireError::NoQuorum { attempts, .. }
            | AcquireError::ValidityExhausted { attempts, .. }
            | AcquireError::DeadlineExceeded { attempts, .. } => *attempts,
        }
    }

    /// True when the lock is held by someone else (as opposed to nodes failing).
    pub fn is_held_by_other(&self) -> bool {
        match self {
            AcquireError::Held { .. } => true,
            AcquireError::DeadlineExceeded { last, .. } => {
                last.as_deref().is_some_and(Self::is_held_by_other)
            }
            _ => false,
        }
    }
}

/// Why an extension did not take effect.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ExtendError {
    /// The lock's validity had run out before the extension could count.
    #[error("the lock expired {} before the extension could take effect; it may be held by someone else now", Millis(*expired_for))]
    Expired {
        /// How long ago the validity ended, at the time of the decision.
        expired_for: Duration,
        /// The votes, when a round was run.
        votes: Option<Votes>,
    },
    /// Another owner holds the key on too many nodes: the lock was lost.
    #[error("the lock was lost to another owner (on {}): {votes}", holders(.votes))]
    Lost {
        /// The votes.
        votes: Votes,
    },
    /// Too many nodes failed or timed out to extend on a quorum.
    #[error("no quorum: too many nodes failed to extend the lock: {}; {votes}", failures(.votes))]
    NoQuorum {
        /// The votes.
        votes: Votes,
    },
}

impl ExtendError {
    /// The per-node votes, when a round was run.
    pub fn votes(&self) -> Option<&Votes> {
        match self {
            ExtendError::Expired { votes, .. } => votes.as_ref(),
            ExtendError::Lost { votes } | ExtendError::NoQuorum { votes } => Some(votes),
        }
    }
}

fn holders(votes: &Votes) -> String {
    let names: Vec<&str> = votes.holders().collect();
    if names.is_empty() {
        "no node".to_owned()
    } else {
        names.join(", ")
    }
}

fn failures(votes: &Votes) -> String {
    let list: Vec<String> = votes
        .failures()
        .map(|(name, error)| format!("{name} {error}"))
        .collect();
    if list.is_empty() {
        "no node failed".to_owned()
    } else {
        format!("failed: {}", list.join(", "))
    }
}

fn last_error(last: &Option<Box<AcquireError>>) -> String {
    match last {
        Some(error) => format!("; last attempt: {error}"),
        None => String::new(),
    }
}
