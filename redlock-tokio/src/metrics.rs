//! Metrics through the [`metrics`](https://docs.rs/metrics) facade, with the
//! `metrics` feature; without it, every function here is an empty one
//! (inlined away) and every type a zero-sized one, so the rest of the crate calls
//! them unconditionally and pays nothing.
//!
//! Only outcomes the core already decided are reported: an acquisition's
//! final event, the votes of each round (a timeout is the core's verdict on
//! a silent node), an extension's result, a release's report, the
//! keep-alive schedule's loss; and one measure of the client's own load,
//! the driver task's busy time. Nothing here decides anything.
//!
//! Cost with the feature on: label values are static strings or, for the
//! node label, prepared once per client; the keys of the fixed label sets
//! are built once per process. Recording a metric is one lookup in the
//! installed recorder, and no allocation here.

use redlock_core::{
    AcquireError, AcquireEvent, ExtendError, Extended, InspectReport, KeptLockEvent, LockKind,
    LockSpec, ReleaseReport, Votes,
};

/// Whatever a driven machine's event says about its round's votes.
pub(crate) trait Voted {
    /// The votes of the round this event ends, if it ends one.
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    fn votes(&self) -> Option<&Votes> {
        None
    }
}

impl Voted for AcquireEvent {
    fn votes(&self) -> Option<&Votes> {
        match self {
            AcquireEvent::Acquired(lock) => Some(lock.votes()),
            AcquireEvent::AttemptFailed { error, .. } | AcquireEvent::Failed(error) => {
                error.votes()
            }
        }
    }
}

impl Voted for Result<Extended, ExtendError> {
    fn votes(&self) -> Option<&Votes> {
        match self {
            Ok(extended) => Some(&extended.votes),
            Err(error) => error.votes(),
        }
    }
}

impl Voted for ReleaseReport {
    fn votes(&self) -> Option<&Votes> {
        Some(ReleaseReport::votes(self))
    }
}

impl Voted for KeptLockEvent {
    fn votes(&self) -> Option<&Votes> {
        match self {
            KeptLockEvent::Extended(extended) => Some(&extended.votes),
            KeptLockEvent::ExtendFailed(error)
            | KeptLockEvent::Lost(redlock_core::LossReason::ExtendFailed(error)) => error.votes(),
            _ => None,
        }
    }
}

impl Voted for redlock_core::TermEvent {
    fn votes(&self) -> Option<&Votes> {
        match self {
            redlock_core::TermEvent::RenewFailed(error) => error.votes(),
            _ => None,
        }
    }
}

impl Voted for Result<u64, ExtendError> {
    fn votes(&self) -> Option<&Votes> {
        self.as_ref().err().and_then(ExtendError::votes)
    }
}

impl Voted for redlock_core::LeaderReport {}

impl Voted for InspectReport {
    fn votes(&self) -> Option<&Votes> {
        Some(InspectReport::votes(self))
    }
}

/// The `kind` label of a lock.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Kind {
    Exclusive,
    Read,
    Write,
    Reentrant,
    Multi,
}

impl Kind {
    /// A fenced lock is an exclusive one.
    pub(crate) fn of_spec(spec: &LockSpec<'_>) -> Self {
        match spec {
            LockSpec::Read(_) => Kind::Read,
            LockSpec::Write(_) => Kind::Write,
            LockSpec::Reentrant { .. } => Kind::Reentrant,
            LockSpec::Multi(_) => Kind::Multi,
            _ => Kind::Exclusive,
        }
    }

    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) fn of(kind: &LockKind) -> Self {
        match kind {
            LockKind::Read => Kind::Read,
            LockKind::Write { .. } => Kind::Write,
            LockKind::Reentrant { .. } => Kind::Reentrant,
            LockKind::Multi => Kind::Multi,
            _ => Kind::Exclusive,
        }
    }
}

/// The `outcome` label of an acquire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Granted,
    HeldByOther,
    NoQuorum,
    ValidityExhausted,
    WrongType,
    Deadline,
    /// Reported by [`Acquire`]'s drop: the call's future was dropped.
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    Cancelled,
    /// Reported by [`Acquire`]'s drop: refused before anything was sent.
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    Config,
    /// A semaphore's masters keep another number of permits.
    PermitsMismatch,
}

impl Outcome {
    pub(crate) fn of(error: &AcquireError) -> Self {
        match error {
            AcquireError::Held { .. } => Outcome::HeldByOther,
            AcquireError::WrongType { .. } => Outcome::WrongType,
            AcquireError::PermitsMismatch { .. } => Outcome::PermitsMismatch,
            AcquireError::ValidityExhausted { .. } => Outcome::ValidityExhausted,
            AcquireError::DeadlineExceeded { .. } => Outcome::Deadline,
            // NoQuorum, and what a later core may add: nodes failing.
            _ => Outcome::NoQuorum,
        }
    }
}

/// How a hold ended: the `end` label of the hold duration.
#[derive(Clone, Copy, Debug)]
pub(crate) enum End {
    Released,
    Lost,
}

#[cfg(feature = "metrics")]
mod on;

#[cfg(not(feature = "metrics"))]
mod off;

#[cfg(not(feature = "metrics"))]
pub(crate) use off::*;
#[cfg(feature = "metrics")]
pub(crate) use on::*;
