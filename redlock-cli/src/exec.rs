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

use nix::sys::signal::Signal;
use redlock_tokio::core::Votes;
use redlock_tokio::{KeepAlive, LockGuard, ReleaseReport, Wait};
use serde_json::json;

use crate::child::{self, Ending, Held, Signals};
use crate::cli::{Common, ExecArgs};
use crate::connect::connect;
use crate::failure::{self, Failure};
use crate::output::{Human, Level, Output, command_line, millis, release_json, votes_json};

pub(crate) async fn run(common: &Common, args: ExecArgs, output: &Output) -> u8 {
    Failure::finish(exec(common, &args, output).await, output)
}

async fn exec(common: &Common, args: &ExecArgs, output: &Output) -> Result<u8, Failure> {
    let mut signals = Signals::install()?;
    let waits = args.waits();
    Failure::zero_deadline(args.deadline)?;
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
                    child::suspend(None, key, output);
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
    let mut env = vec![
        ("REDLOCK_KEY", key.to_owned()),
        ("REDLOCK_VALUE", value.as_str().to_owned()),
    ];
    let mut unset = vec![];
    match token {
        Some(token) => env.push(("REDLOCK_FENCING_TOKEN", token.to_string())),
        None => unset.push("REDLOCK_FENCING_TOKEN"),
    }
    let child = match child::spawn(&args.command, &env, &unset, output) {
        Ok(child) => child,
        Err(code) => {
            release(guard, key, output).await;
            return Ok(code);
        }
    };

    let what = format!("lock {key}");
    let held = Held {
        lost: guard.lost(),
        is_lost: &|| guard.is_lost(),
        what: &what,
        key,
    };
    let ending = child::supervise(child, held, &mut signals, args.kill_grace, output).await;
    release(guard, key, output).await;
    Ok(match ending {
        Ending::Lost => failure::LOST,
        Ending::Exited(status) => child::exit_code(status),
        Ending::WaitFailed => u8::MAX,
    })
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
