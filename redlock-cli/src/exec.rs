//! `redlock exec`: run a command while holding the lock.
//!
//! The order of things, and why:
//!
//! 1. Signal handlers first, so that a SIGINT or SIGTERM while waiting for
//!    the lock ends redlock cleanly (the attempt in flight is released)
//!    instead of killing it mid-acquire.
//! 2. Acquire (one attempt, or retries with `--wait`), kept alive in the
//!    background from the grant on.
//! 3. Spawn the command in its own process group, so that stopping it
//!    reaches the processes it started.
//! 4. Supervise: the command's exit, the loss of the lock, and signals to
//!    redlock. A loss or a signal sends SIGTERM (or the signal) to the group
//!    and SIGKILL after the grace period.
//! 5. Release on every node, whatever happened, then exit.

use std::future::IntoFuture;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg, raise};
use nix::unistd::Pid;
use redlock_tokio::core::Votes;
use redlock_tokio::{KeepAlive, LockGuard, ReleaseReport, Wait};
use serde_json::json;
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::Instant;

use crate::cli::{Common, ExecArgs};
use crate::connect::connect;
use crate::failure::{self, Failure};
use crate::output::{Human, Level, Output, command_line, millis, release_json, votes_json};

pub(crate) async fn run(common: &Common, args: ExecArgs, output: &Output) -> u8 {
    let code = match exec(common, &args, output).await {
        Ok(code) => code,
        Err(failure) => failure.report(output),
    };
    output.json_only(|| json!({ "event": "finished", "exit_code": code }));
    code
}

async fn exec(common: &Common, args: &ExecArgs, output: &Output) -> Result<u8, Failure> {
    let mut signals = Signals::new().map_err(|error| Failure {
        code: failure::USAGE,
        kind: "signals",
        message: format!("cannot install signal handlers: {error}"),
        nodes: None,
    })?;
    let waits = args.waits();
    // Checked before anything is printed or sent: a zero wait limit is a
    // configuration error, not a wait that ends at once.
    if args.deadline.is_some_and(|deadline| deadline.is_zero()) {
        let error = redlock_tokio::Error::Config(redlock_tokio::ConfigError::ZeroDeadline);
        return Err(Failure::from_error(&error, args.busy_exit_code));
    }
    let redlock = connect(common, |builder| builder.ttl(args.ttl)).await?;
    let key = args.key.as_str();
    let shown = command_line(&args.command);

    let wait = match (waits, args.deadline) {
        // Wait until acquired, for at most --deadline, whatever the retry
        // count.
        (true, Some(deadline)) => Wait::AtMost(deadline),
        (true, None) => Wait::Forever,
        (false, _) => Wait::No,
    };
    // Kept alive from the grant on, so that the lock cannot run out between
    // the grant and the command's start.
    let request = redlock
        .lock(key)
        .ttl(args.ttl)
        .wait(wait)
        .keep_alive(KeepAlive::default());
    if waits {
        output.event(
            Level::Progress,
            || format!("waiting for lock {key}"),
            || json!({ "event": "waiting", "key": key }),
        );
    }
    let mut acquire = match (args.permits, args.fencing) {
        (Some(permits), true) => request.permits(permits).fencing().into_future(),
        (Some(permits), false) => request.permits(permits).into_future(),
        (None, true) => request.fencing().into_future(),
        (None, false) => request.into_future(),
    };
    // Each turn handles one signal; the acquire itself is bounded by its
    // attempts or deadline.
    let acquired = loop {
        tokio::select! {
            result = &mut acquire => break Ok(result),
            signal = signals.recv() => {
                if signal == Signal::SIGTSTP {
                    suspend(None, key, output);
                    continue;
                }
                break Err(signal);
            }
        }
    };
    let acquired = match acquired {
        Ok(result) => result,
        Err(signal) => {
            // Dropping the acquire sends the releases of its attempt in
            // flight to background tasks; let them go out before the runtime
            // (and its tasks) ends with this process.
            drop(acquire);
            tokio::time::sleep(redlock.settings().node_timeout() * 2).await;
            output.event(
                Level::Error,
                || format!("got {signal} while waiting for lock {key}; not running: {shown}"),
                || json!({ "event": "signal", "signal": signal.as_str(), "key": key, "forwarded": false }),
            );
            return Ok(failure::signal_exit_code(signal as i32));
        }
    };
    let guard = match acquired {
        Ok(guard) => guard,
        Err(error) => {
            let mut failure = Failure::from_error(&error, args.busy_exit_code);
            if failure.is_busy() {
                let still = match args.deadline {
                    Some(deadline) if waits => {
                        format!("still held after waiting {}", Human(deadline))
                    }
                    _ => "held".to_owned(),
                };
                let holders = error.votes().map(held_on).unwrap_or_default();
                failure.message = format!(
                    "lock {key} is {still} by another owner{holders}; not running: {shown}"
                );
            } else {
                let reason = error
                    .as_acquire()
                    .map_or_else(|| error.to_string(), ToString::to_string);
                failure.message = format!("could not lock {key}: {reason}");
            }
            return Err(failure);
        }
    };

    let votes = guard.votes().clone();
    let validity = guard.validity();
    let token = guard.fencing_token();
    let value = guard.value().clone();
    output.event(
        Level::Progress,
        || {
            let fencing = token
                .map(|token| format!(", fencing token {token}"))
                .unwrap_or_default();
            format!(
                "locked {key} {}, validity {}{fencing}; running: {shown}",
                locked_on(&votes, redlock.settings().quorum()),
                Human(validity),
            )
        },
        || {
            json!({
                "event": "locked",
                "key": key,
                "granted": votes.granted(),
                "nodes_total": votes.votes().len(),
                "quorum": redlock.settings().quorum(),
                "ttl_ms": millis(args.ttl),
                "validity_ms": millis(validity),
                "fencing_token": token,
                "command": args.command.iter().map(|arg| arg.to_string_lossy()).collect::<Vec<_>>(),
                "nodes": votes_json(&votes),
            })
        },
    );
    let mut command = tokio::process::Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .env("REDLOCK_KEY", key)
        .env("REDLOCK_VALUE", value.as_str())
        // Its own group, so that SIGTERM/SIGKILL reach what it started too.
        .process_group(0);
    match token {
        Some(token) => command.env("REDLOCK_FENCING_TOKEN", token.to_string()),
        // Not a token inherited from an outer redlock.
        None => command.env_remove("REDLOCK_FENCING_TOKEN"),
    };
    let child = match command.spawn() {
        Ok(child) => child,
        Err(error) => {
            let code = if error.kind() == io::ErrorKind::NotFound {
                failure::NOT_FOUND
            } else {
                failure::CANNOT_EXECUTE
            };
            output.event(
                Level::Error,
                || format!("cannot run {shown}: {error}"),
                || json!({ "event": "error", "kind": "spawn", "exit_code": code, "message": format!("cannot run {shown}: {error}") }),
            );
            release(guard, key, output).await;
            return Ok(code);
        }
    };

    let ending = supervise(child, &guard, &mut signals, args.kill_grace, key, output).await;
    release(guard, key, output).await;
    Ok(match ending {
        Ending::Lost => failure::LOST,
        Ending::Exited(status) => exit_code(status),
        Ending::WaitFailed => u8::MAX,
    })
}

/// How the supervision ended.
enum Ending {
    /// The command exited, with the lock held to the end.
    Exited(ExitStatus),
    /// The lock was lost; the command was stopped.
    Lost,
    /// The command's status could not be read (should not happen); it was
    /// killed.
    WaitFailed,
}

/// Waits for the command, stopping it when the lock is lost or redlock gets
/// a signal.
async fn supervise(
    mut child: tokio::process::Child,
    guard: &LockGuard,
    signals: &mut Signals,
    kill_grace: Duration,
    key: &str,
    output: &Output,
) -> Ending {
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
            reason = guard.lost(), if !lost => {
                lost = true;
                output.event(
                    Level::Error,
                    || format!(
                        "lock {key} lost ({reason}); stopping the command (SIGTERM, SIGKILL after {})",
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
    // lock could no longer be counted on.
    let lost = lost || guard.is_lost();
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

async fn release(guard: LockGuard, key: &str, output: &Output) -> ReleaseReport {
    // The command's last word is every node's story: the process exits
    // next, so nothing is left to finish in the background.
    let report = guard.release().every_node().await;
    let level = if report.is_complete() {
        Level::Progress
    } else {
        Level::Error
    };
    output.event(
        level,
        || {
            if report.is_complete() {
                format!(
                    "released {key} on {} of {} nodes",
                    report.released(),
                    report.votes().votes().len()
                )
            } else {
                // A failed node may never have had the key (it was down at
                // the acquire too): say what is known, no more.
                let free = if report.frees_lock() {
                    "the lock is free"
                } else {
                    "too many nodes failed: the lock may stay held until its TTL"
                };
                let failed: Vec<String> = report
                    .votes()
                    .failures()
                    .map(|(node, error)| format!("{node}: {error}"))
                    .collect();
                format!(
                    "released {key} on {} of {} nodes; {free}; {} did not answer, and any key of ours there expires with its TTL ({})",
                    report.released(),
                    report.votes().votes().len(),
                    report.failed(),
                    failed.join("; "),
                )
            }
        },
        || {
            json!({
                "event": "released",
                "key": key,
                "released": report.released(),
                "not_held": report.not_held(),
                "failed": report.failed(),
                "nodes": release_json(report.votes()),
            })
        },
    );
    report
}

fn exit_code(status: ExitStatus) -> u8 {
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
fn suspend(group: Option<i32>, key: &str, output: &Output) {
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
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
    quit: tokio::signal::unix::Signal,
    stop: tokio::signal::unix::Signal,
}

impl Signals {
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
    async fn recv(&mut self) -> Signal {
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

/// Where the lock was granted, for the locked message: `on 3 of 3 nodes`,
/// or `with a quorum (2 of 3 nodes granted, quorum 2; 1 failed)`.
///
/// The decision comes once a quorum said yes, without waiting for the
/// other nodes: a node not waited for may be up (and hold the lock a moment
/// later) or down, so it is neither "still answering" nor "failed".
fn locked_on(votes: &Votes, quorum: usize) -> String {
    let total = votes.votes().len();
    if votes.granted() == total {
        return format!("on {total} of {total} nodes");
    }
    let mut others = Vec::new();
    if votes.failed() > 0 {
        others.push(format!("{} failed", votes.failed()));
    }
    if votes.held_by_other() > 0 {
        others.push(format!("{} held by another owner", votes.held_by_other()));
    }
    if votes.pending() > 0 {
        others.push(format!("{} not waited for", votes.pending()));
    }
    format!(
        "with a quorum ({} of {total} nodes granted, quorum {quorum}; {})",
        votes.granted(),
        others.join(", ")
    )
}

/// Where another owner holds the lock, for the busy message:
/// ` (on a:1/0, b:2/0)`. The round is decided as soon as no quorum is left
/// possible, so nodes that had not answered by then may hold it too: they
/// are counted apart rather than left out (all three nodes holding the
/// lock read "on 2 of them" otherwise).
fn held_on(votes: &Votes) -> String {
    let holders: Vec<&str> = votes.holders().collect();
    if holders.is_empty() {
        return String::new();
    }
    match votes.pending() {
        0 => format!(" (on {})", short_list(&holders)),
        1 => format!(" (on {}; 1 node not waited for)", short_list(&holders)),
        pending => format!(
            " (on {}; {pending} nodes not waited for)",
            short_list(&holders)
        ),
    }
}

/// Node names joined by ", ", the first ones only when they are long, so
/// that the message stays one short line; `--json` lists every node.
fn short_list(names: &[&str]) -> String {
    let mut text = String::new();
    for (shown, name) in names.iter().enumerate() {
        if shown > 0 && text.len() + name.len() > 80 {
            text.push_str(&format!(" and {} more", names.len() - shown));
            break;
        }
        if shown > 0 {
            text.push_str(", ");
        }
        text.push_str(name);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::tests::{GRANTED, HELD, REFUSED, round};

    #[test]
    fn exit_codes_follow_the_shell() {
        assert_eq!(exit_code(ExitStatus::from_raw(0)), 0);
        assert_eq!(exit_code(ExitStatus::from_raw(7 << 8)), 7);
        // Killed by SIGTERM (15): 143.
        assert_eq!(exit_code(ExitStatus::from_raw(15)), 143);
        assert_eq!(describe(ExitStatus::from_raw(9)), "was killed by SIGKILL");
    }

    #[test]
    fn a_node_not_waited_for_is_neither_answering_nor_failed() {
        let votes = |answers| round(answers).expect("acquired");
        // A quorum of two fast nodes decides: the third, up or down, was
        // not waited for (this read "1 still answering", for a node that
        // had answered since, or was down).
        let quorum_first = locked_on(&votes(&[GRANTED, GRANTED]), 2);
        assert_eq!(
            quorum_first,
            "with a quorum (2 of 3 nodes granted, quorum 2; 1 not waited for)"
        );
        assert_eq!(
            locked_on(&votes(&[REFUSED, GRANTED, GRANTED]), 2),
            "with a quorum (2 of 3 nodes granted, quorum 2; 1 failed)"
        );
        assert_eq!(
            locked_on(&votes(&[HELD, GRANTED, GRANTED]), 2),
            "with a quorum (2 of 3 nodes granted, quorum 2; 1 held by another owner)"
        );
    }

    #[test]
    fn the_busy_message_counts_the_holders_not_waited_for() {
        let votes = |answers| {
            let error = round(answers).expect_err("held");
            assert!(error.is_held_by_other(), "{error}");
            error.votes().expect("votes").clone()
        };
        // All three nodes hold it, and the round is decided by the first
        // two: the third is counted, not left out.
        assert_eq!(
            held_on(&votes(&[HELD, HELD])),
            " (on a, b; 1 node not waited for)"
        );
        assert_eq!(held_on(&votes(&[HELD, GRANTED, HELD])), " (on a, c)");
    }
}
