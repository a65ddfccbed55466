//! Exit codes, and the errors that end a subcommand early.

use redlock_tokio::{AcquireError, Error};
use serde_json::{Value, json};

use crate::output::{Level, Output, votes_json};

/// Success; for `exec`, the command exited 0.
pub(crate) const SUCCESS: u8 = 0;
/// `exec`: the lock is held by another owner (the default of `--busy-exit-code`).
pub(crate) const BUSY: u8 = 1;
/// `release`: the value was held on no node, so nothing was deleted (a
/// mistyped value, or a lock already expired or released). Like `BUSY`, "the
/// lock is not yours to take or give back", and like grep's 1, "not found".
pub(crate) const NOT_HELD: u8 = 1;
/// Bad usage or configuration. clap uses 2 for argument errors too. Also a
/// key that holds a value of another type (not a lock): a wrong key name,
/// which waiting cannot fix; and a semaphore asked for with another number
/// of permits than its masters keep (`--permits` disagrees with its other
/// users').
pub(crate) const USAGE: u8 = 2;
/// Too many nodes down or too slow for a quorum.
pub(crate) const NO_QUORUM: u8 = 3;
/// `exec`: the lock was lost while the command ran, and the command was stopped.
pub(crate) const LOST: u8 = 4;
/// `exec`: the command exists but could not be executed (as `env`, `timeout`).
pub(crate) const CANNOT_EXECUTE: u8 = 126;
/// `exec`: the command was not found (as `env`, `timeout`).
pub(crate) const NOT_FOUND: u8 = 127;

/// The exit code for death by `signal`: 128 + its number, as shells report it.
pub(crate) fn signal_exit_code(signal: i32) -> u8 {
    u8::try_from(128 + signal).unwrap_or(u8::MAX)
}

/// Why a subcommand stopped before doing its work.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: u8,
    /// A stable one-word class for JSON: `usage`, `config`, `auth`, `tls`, `busy`,
    /// `no_quorum`, ...
    pub(crate) kind: &'static str,
    pub(crate) message: String,
    /// The per-node votes, when a round ran.
    pub(crate) nodes: Option<Value>,
}

impl Failure {
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Self {
            code: USAGE,
            kind: "usage",
            message: message.into(),
            nodes: None,
        }
    }

    /// Classifies a client error. `busy_code` is the exit code for a lock
    /// held by another owner.
    pub(crate) fn from_error(error: &Error, busy_code: u8) -> Self {
        let (code, kind) = match error {
            Error::Config(_) => (USAGE, "config"),
            Error::Auth { .. } => (USAGE, "auth"),
            Error::Acquire(error) if error.is_wrong_type() => (USAGE, "wrong_type"),
            Error::Acquire(error) if error.is_permits_mismatch() => (USAGE, "permits_mismatch"),
            Error::Tls { .. } => (USAGE, "tls"),
            _ if error.is_held_by_other() => (busy_code, "busy"),
            Error::Acquire(AcquireError::DeadlineExceeded { last: None, .. }) => {
                (NO_QUORUM, "deadline")
            }
            Error::Acquire(AcquireError::ValidityExhausted { .. }) => {
                (NO_QUORUM, "validity_exhausted")
            }
            Error::Acquire(_) => (NO_QUORUM, "no_quorum"),
            Error::Unreachable { .. } => (NO_QUORUM, "unreachable"),
            _ => (NO_QUORUM, "error"),
        };
        Self {
            code,
            kind,
            message: error.to_string(),
            nodes: error.votes().map(votes_json),
        }
    }

    pub(crate) fn is_busy(&self) -> bool {
        self.kind == "busy"
    }

    /// The exit code of a subcommand that runs a command (`exec`, `elect`),
    /// with its failure reported and, in JSON, a last `finished` event.
    pub(crate) fn finish(result: Result<u8, Self>, output: &Output) -> u8 {
        let code = result.unwrap_or_else(|failure| failure.report(output));
        output.json_only(|| json!({ "event": "finished", "exit_code": code }));
        code
    }

    /// A zero wait limit is a configuration error, not a wait that ends at
    /// once: checked before anything is printed or sent.
    pub(crate) fn zero_deadline(deadline: Option<std::time::Duration>) -> Result<(), Self> {
        if deadline.is_some_and(|deadline| deadline.is_zero()) {
            let error = Error::Config(redlock_tokio::ConfigError::ZeroDeadline);
            return Err(Self::from_error(&error, BUSY));
        }
        Ok(())
    }

    /// Reports the failure and returns its exit code.
    pub(crate) fn report(self, output: &Output) -> u8 {
        let level = if self.is_busy() {
            Level::Busy
        } else {
            Level::Error
        };
        output.event(
            level,
            || self.message.clone(),
            || {
                json!({
                    "event": "error",
                    "kind": self.kind,
                    "exit_code": self.code,
                    "message": self.message,
                    "nodes": self.nodes,
                })
            },
        );
        self.code
    }
}
