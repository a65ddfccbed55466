//! `redlock elect`: run a command while leading an election.
//!
//! The order of things, and why:
//!
//! 1. Signal handlers first, so that a signal while campaigning ends
//!    redlock cleanly (the attempt in flight is released).
//! 2. Campaign ([`redlock_tokio::Election::campaign`]), waiting while
//!    another process leads (or for at most `--deadline`).
//! 3. Proclaim the leader's value, if given; run the command in its own
//!    process group with its term, and supervise it as `exec` does.
//! 4. On loss, the command is stopped (SIGTERM, SIGKILL after the grace):
//!    resign what is left of the term and campaign again (`--once`: exit
//!    4). When the command exits by itself, resign and exit with its code.
//!
//! Every decision about the term (when to renew, when to step down) is the
//! core's `Term`; this file only supervises the command.

use nix::sys::signal::Signal;
use redlock_tokio::core::ElectionTiming;
use redlock_tokio::{Election, Leadership, Redlock, Wait};
use serde_json::json;

use crate::child::{self, Ending, Held, Signals};
use crate::cli::{Common, ElectArgs};
use crate::connect::connect;
use crate::failure::{self, Failure};
use crate::output::{Human, Level, Output, command_line, millis};

pub(crate) async fn run(common: &Common, args: ElectArgs, output: &Output) -> u8 {
    Failure::finish(elect(common, &args, output).await, output)
}

async fn elect(common: &Common, args: &ElectArgs, output: &Output) -> Result<u8, Failure> {
    let mut signals = Signals::install()?;
    Failure::zero_deadline(args.deadline)?;
    let redlock = connect(common, |builder| builder.ttl(args.lease)).await?;
    let election = election(&redlock, args)?;
    let code = terms(&election, &mut signals, args, output).await;
    // What this process still owes the nodes (the rest of a resign, the
    // withdraw of a campaign cut short by a signal) goes out before it
    // exits; a node that does not answer is waited for no longer than
    // `exec` waits, and any key of ours there expires with the lease.
    let owed = redlock.settings().node_timeout() * 2;
    let _ = tokio::time::timeout(owed, redlock.shutdown()).await;
    code
}

/// Campaigns and leads until the command exits by itself (or, with
/// `--once`, after one term); the exit code.
async fn terms(
    election: &Election,
    signals: &mut Signals,
    args: &ElectArgs,
    output: &Output,
) -> Result<u8, Failure> {
    let key = args.key.as_str();
    loop {
        output.event(
            Level::Progress,
            || format!("campaigning for {key}"),
            || json!({ "event": "campaigning", "key": key }),
        );
        let mut leadership = match campaign(election, signals, args, output).await? {
            Ok(leadership) => leadership,
            // A signal while campaigning: nothing ran.
            Err(signal) => return Ok(failure::signal_exit_code(signal as i32)),
        };
        let ending = lead(&leadership, signals, args, output).await;
        resign(&mut leadership, key, output).await;
        match ending {
            Ok(Ending::Exited(status)) => return Ok(child::exit_code(status)),
            Ok(Ending::WaitFailed) => return Ok(u8::MAX),
            Err(code) => return Ok(code),
            Ok(Ending::Lost) if args.once => return Ok(failure::LOST),
            Ok(Ending::Lost) => {}
        }
    }
}

/// The election with the options' timings: the defaults follow the lease
/// (the client's TTL); a combination the core refuses is a usage error.
fn election(redlock: &Redlock, args: &ElectArgs) -> Result<Election, Failure> {
    let wait = match args.deadline {
        Some(deadline) => Wait::AtMost(deadline),
        None => Wait::Forever,
    };
    let defaults = ElectionTiming::default_for(redlock.settings());
    let renew_deadline = args.renew_deadline.unwrap_or(defaults.renew_deadline());
    let retry_period = args.retry_period.unwrap_or(defaults.retry_period());
    // Checked before anything is said or sent: the library checks it only
    // when the campaign starts.
    ElectionTiming::new(redlock.settings(), args.lease, renew_deadline, retry_period)
        .map_err(|error| Failure::from_error(&error.into(), failure::BUSY))?;
    Ok(redlock
        .election(&args.key)
        .timing(args.lease, renew_deadline, retry_period)
        .wait(wait))
}

/// One campaign, or the signal that ended it early.
async fn campaign(
    election: &Election,
    signals: &mut Signals,
    args: &ElectArgs,
    output: &Output,
) -> Result<Result<Leadership, Signal>, Failure> {
    let key = args.key.as_str();
    let mut campaign = Box::pin(election.campaign());
    let elected = loop {
        tokio::select! {
            elected = &mut campaign => break elected,
            signal = signals.recv() => {
                if signal == Signal::SIGTSTP {
                    child::suspend(None, key, output);
                    continue;
                }
                // Its attempt in flight is withdrawn in the background.
                drop(campaign);
                output.event(
                    Level::Error,
                    || format!("got {signal} while campaigning for {key}; not running: {}", command_line(&args.command)),
                    || json!({ "event": "signal", "signal": signal.as_str(), "key": key, "forwarded": false }),
                );
                return Ok(Err(signal));
            }
        }
    };
    let leadership = elected.map_err(|error| {
        let mut failure = Failure::from_error(&error, failure::BUSY);
        failure.message = if failure.is_busy() {
            format!("another process still leads {key}; not running")
        } else {
            format!("could not campaign for {key}: {error}")
        };
        failure
    })?;
    let validity = leadership
        .valid_until()
        .saturating_duration_since(std::time::Instant::now());
    output.event(
        Level::Progress,
        || {
            format!(
                "leading {key} in term {}, valid for {}; running: {}",
                leadership.term(),
                Human(validity),
                command_line(&args.command)
            )
        },
        || {
            json!({
                "event": "elected",
                "key": key,
                "term": leadership.term(),
                "validity_ms": millis(validity),
            })
        },
    );
    if let Some(value) = &args.proclaim
        && let Err(error) = leadership.proclaim(value).await
    {
        // The command may still lead: an observer just sees no value.
        output.event(
            Level::Error,
            || format!("could not proclaim {value:?} for {key}: {error}"),
            || json!({ "event": "error", "kind": "proclaim", "message": error.to_string() }),
        );
    }
    Ok(Ok(leadership))
}

/// Runs the command for one term. `Err` is the exit code of a command
/// that could not start.
async fn lead(
    leadership: &Leadership,
    signals: &mut Signals,
    args: &ElectArgs,
    output: &Output,
) -> Result<Ending, u8> {
    let key = args.key.as_str();
    let term = leadership.term().to_string();
    let env = [
        ("REDLOCK_KEY", key.to_owned()),
        ("REDLOCK_TERM", term.clone()),
        ("REDLOCK_FENCING_TOKEN", term),
    ];
    let command = child::spawn(&args.command, &env, &[], output)?;
    let what = format!("leadership of {key} (term {})", leadership.term());
    let held = Held {
        lost: leadership.lost(),
        is_lost: &|| leadership.loss().is_some(),
        what: &what,
        key,
    };
    Ok(child::supervise(command, held, signals, args.kill_grace, output).await)
}

/// Frees the name: a leader whose command ended lets the next one in at
/// once; one that lost its term takes its value off the nodes it is on.
async fn resign(leadership: &mut Leadership, key: &str, output: &Output) {
    let term = leadership.term();
    let Some(report) = leadership.resign().await else {
        return;
    };
    let level = if report.frees_lock() {
        Level::Progress
    } else {
        Level::Error
    };
    output.event(
        level,
        || {
            if report.frees_lock() {
                format!("resigned {key} (term {term})")
            } else {
                format!(
                    "resigned {key} (term {term}) on {} of {} nodes; the rest expires with the lease",
                    report.released(),
                    report.votes().votes().len()
                )
            }
        },
        || {
            json!({
                "event": "resigned",
                "key": key,
                "term": term,
                "released": report.released(),
                "failed": report.failed(),
            })
        },
    );
}
