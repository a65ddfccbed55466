//! The command under `exec` and `elect`: spawned in its own process group,
//! supervised, stopped when what it runs under is lost or redlock gets a
//! signal (SIGTERM, or the signal, then SIGKILL after the grace period).

use std::ffi::OsString;
use std::fmt::Display;
use std::future::Future;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg, raise};
use nix::unistd::Pid;
use serde_json::json;
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::Instant;

use crate::failure::{self, Failure};
use crate::output::{Human, Level, Output};

/// Starts `command` in its own process group (so that SIGTERM and SIGKILL
/// reach what it starts too) with `env` set and `unset` removed (not a
/// variable inherited from an outer redlock). A command that cannot start
/// is reported, and its exit code (127 not found, 126 otherwise) returned.
pub(crate) fn spawn(
    command: &[OsString],
    env: &[(&str, String)],
    unset: &[&str],
    output: &Output,
) -> Result<tokio::process::Child, u8> {
    let mut process = tokio::process::Command::new(&command[0]);
    process.args(&command[1..]).process_group(0);
    for (name, value) in env {
        process.env(name, value);
    }
    for name in unset {
        process.env_remove(name);
    }
    process.spawn().map_err(|error| {
        let code = if error.kind() == io::ErrorKind::NotFound {
            failure::NOT_FOUND
        } else {
            failure::CANNOT_EXECUTE
        };
        let shown = crate::output::command_line(command);
        output.event(
            Level::Error,
            || format!("cannot run {shown}: {error}"),
            || json!({ "event": "error", "kind": "spawn", "exit_code": code, "message": format!("cannot run {shown}: {error}") }),
        );
        code
    })
}

/// What the command runs under, for [`supervise`]: a lock or a leadership.
pub(crate) struct Held<'a, L> {
    /// Resolves with the reason once it is lost.
    pub(crate) lost: L,
    /// Whether it is lost by now.
    pub(crate) is_lost: &'a (dyn Fn() -> bool + Sync),
    /// What it is, for messages: `lock k`, `leadership of k`.
    pub(crate) what: &'a str,
    /// Its name, for the JSON events.
    pub(crate) key: &'a str,
}

/// How the supervision ended.
pub(crate) enum Ending {
    /// The command exited, with the lock (or leadership) held to the end.
    Exited(ExitStatus),
    /// The lock (or leadership) was lost; the command was stopped.
    Lost,
    /// The command's status could not be read (should not happen); it was
    /// killed.
    WaitFailed,
}

/// Waits for the command, stopping it when what it runs under is lost or
/// redlock gets a signal.
pub(crate) async fn supervise<R: Display>(
    mut child: tokio::process::Child,
    held: Held<'_, impl Future<Output = R>>,
    signals: &mut Signals,
    kill_grace: Duration,
    output: &Output,
) -> Ending {
    let Held {
        lost: loss,
        is_lost,
        what,
        key,
    } = held;
    let mut loss = std::pin::pin!(loss);
    // The child has not been waited for, so its pid (the group id) is
    // still ours to signal. `id` is `None` only after a successful wait.
    let group = child.id().and_then(|pid| i32::try_from(pid).ok());
    let mut lost = false;
    let mut kill_at: Option<Instant> = None;
    let mut killed = false;
    // Each turn handles one event; the loop ends when the command exits,
    // which SIGKILL forces at the latest `kill_grace` after a loss or signal.
    let status = loop {
        tokio::select! {
            // A loss first: a command that exits at the same moment may
            // already have run without the lock.
            reason = &mut loss, if !lost => {
                lost = true;
                output.event(
                    Level::Error,
                    || format!(
                        "{what} lost ({reason}); stopping the command (SIGTERM, SIGKILL after {})",
                        Human(kill_grace)
                    ),
                    || json!({ "event": "lost", "key": key, "reason": reason.to_string() }),
                );
                signal_group(group, Signal::SIGTERM);
                kill_at = Some(earliest(kill_at, Instant::now() + kill_grace));
            }
            status = child.wait() => break status,
            signal = signals.recv() => {
                if signal == Signal::SIGTSTP {
                    suspend(group, key, output);
                    continue;
                }
                output.event(
                    Level::Error,
                    || format!("got {signal}; passing it on to the command (SIGKILL after {})", Human(kill_grace)),
                    || json!({ "event": "signal", "signal": signal.as_str(), "key": key, "forwarded": true }),
                );
                signal_group(group, signal);
                kill_at = Some(earliest(kill_at, Instant::now() + kill_grace));
            }
            () = sleep_until(kill_at), if !killed => {
                killed = true;
                output.event(
                    Level::Error,
                    || format!("the command did not stop within {}; sending SIGKILL", Human(kill_grace)),
                    || json!({ "event": "killed", "key": key }),
                );
                signal_group(group, Signal::SIGKILL);
            }
        }
    };
    // A loss noticed only now: the command may have finished after the
    // lock (or leadership) could no longer be counted on.
    let lost = lost || is_lost();
    if lost {
        // What the command left behind must not go on without the lock.
        signal_group(group, Signal::SIGKILL);
    }
    match status {
        Ok(status) => {
            output.event(
                Level::Progress,
                || format!("the command {}", describe(status)),
                || json!({ "event": "exited", "code": status.code(), "signal": status.signal() }),
            );
            if lost {
                Ending::Lost
            } else {
                Ending::Exited(status)
            }
        }
        Err(error) => {
            signal_group(group, Signal::SIGKILL);
            output.event(
                Level::Error,
                || format!("cannot wait for the command: {error}"),
                || json!({ "event": "error", "kind": "wait", "message": error.to_string() }),
            );
            Ending::WaitFailed
        }
    }
}

pub(crate) fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(u8::MAX),
        (None, Some(signal)) => failure::signal_exit_code(signal),
        // Neither an exit code nor a signal: treat as a failure.
        (None, None) => u8::MAX,
    }
}

fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with code {code}"),
        (None, Some(signal)) => match Signal::try_from(signal) {
            Ok(signal) => format!("was killed by {signal}"),
            Err(_) => format!("was killed by signal {signal}"),
        },
        (None, None) => format!("ended: {status}"),
    }
}

fn earliest(current: Option<Instant>, candidate: Instant) -> Instant {
    current.map_or(candidate, |at| at.min(candidate))
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Ctrl-Z (SIGTSTP): stops the command's process group with SIGSTOP (which
/// it cannot ignore), then redlock itself, and resumes the group when redlock
/// is continued. A command left running while redlock is stopped would go on
/// after the lock expired, since nothing extends it. After a long stop the
/// lock is lost, which the keep-alive reports at once on resumption.
pub(crate) fn suspend(group: Option<i32>, key: &str, output: &Output) {
    output.event(
        Level::Error,
        || {
            format!(
                "suspended (SIGTSTP), with the command; lock {key} is not extended while stopped and may be lost"
            )
        },
        || json!({ "event": "suspended", "key": key }),
    );
    signal_group(group, Signal::SIGSTOP);
    // Returns once redlock is continued (SIGCONT).
    if let Err(error) = raise(Signal::SIGSTOP) {
        let _ = std::io::Write::write_all(
            &mut std::io::stderr().lock(),
            format!("redlock: cannot stop: {error}\n").as_bytes(),
        );
    }
    signal_group(group, Signal::SIGCONT);
    output.event(
        Level::Progress,
        || "continued".to_owned(),
        || json!({ "event": "continued", "key": key }),
    );
}

/// Sends `signal` to the command's process group. A group that is gone
/// already is fine.
fn signal_group(group: Option<i32>, signal: Signal) {
    let Some(group) = group else { return };
    match killpg(Pid::from_raw(group), signal) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(error) => {
            let _ = std::io::Write::write_all(
                &mut std::io::stderr().lock(),
                format!("redlock: cannot send {signal} to the command: {error}\n").as_bytes(),
            );
        }
    }
}

/// The signals that stop redlock, caught so that they are passed on to the
/// command and the lock is released, and Ctrl-Z, so that the command stops
/// with redlock.
pub(crate) struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
    quit: tokio::signal::unix::Signal,
    stop: tokio::signal::unix::Signal,
}

impl Signals {
    /// The handlers, or a usage failure when they cannot be installed.
    pub(crate) fn install() -> Result<Self, Failure> {
        Self::new().map_err(|error| Failure {
            code: failure::USAGE,
            kind: "signals",
            message: format!("cannot install signal handlers: {error}"),
            nodes: None,
        })
    }

    fn new() -> io::Result<Self> {
        Ok(Self {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
            quit: signal(SignalKind::quit())?,
            stop: signal(SignalKind::from_raw(Signal::SIGTSTP as i32))?,
        })
    }

    /// The next signal. Cancel-safe.
    pub(crate) async fn recv(&mut self) -> Signal {
        tokio::select! {
            Some(()) = self.interrupt.recv() => Signal::SIGINT,
            Some(()) = self.terminate.recv() => Signal::SIGTERM,
            Some(()) = self.hangup.recv() => Signal::SIGHUP,
            Some(()) = self.quit.recv() => Signal::SIGQUIT,
            Some(()) = self.stop.recv() => Signal::SIGTSTP,
            // The streams end only with the runtime.
            else => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_shell() {
        assert_eq!(exit_code(ExitStatus::from_raw(0)), 0);
        assert_eq!(exit_code(ExitStatus::from_raw(7 << 8)), 7);
        // Killed by SIGTERM (15): 143.
        assert_eq!(exit_code(ExitStatus::from_raw(15)), 143);
        assert_eq!(describe(ExitStatus::from_raw(9)), "was killed by SIGKILL");
    }
}
