//! The **fenced_restart** scenarios: fencing tokens across a restart of
//! every master with an empty data set, on local processes.
//!
//! Three masters without persistence; two worker processes of one task
//! take one fenced lock (TTL 500 ms), write to the protected resource with
//! its token when granted and again at the end of a 300 ms hold. Each round:
//!
//! 1. the next holder is stopped (SIGSTOP) a few ms into its hold;
//! 2. every master is restarted empty at once: the lock and every fencing
//!    counter are gone;
//! 3. the other worker is granted the lock (its client counts a restarted
//!    master's votes only a TTL and the drift after it saw the restart, so
//!    the stopped holder's validity has ended: no overlap) and writes with
//!    its token;
//! 4. the stopped holder is continued: it finds its lock lost and sends the
//!    write it had in flight, late.
//!
//! - **fenced_restart**: the correct core. The token is above the servers'
//!   clocks (`acquire::floor`), so the new holder's token is above the old
//!   one although no master remembers it, and the resource refuses the late
//!   write. Judged like an in-model scenario: a stale write accepted or a
//!   token not above the one before fails the run. Restarting every master
//!   empty is outside Redlock's model for mutual exclusion, but inside the
//!   fencing promise (`docs/guarantees.md`: tokens never go back while no
//!   server's clock steps back by more than the outage), and the holder's
//!   pause is in model.
//! - **fenced_restart_counter_only** (out of model): the same with the
//!   planted bug `TokenFromCounterOnly`: tokens are the counters again, so
//!   they start from 1 after the restart. The checker must find the token
//!   that went back (and, where the tokens tie, the stale write accepted)
//!   in every round; a round in which it finds nothing is tried again, a
//!   few times, and a round never caught fails the run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use super::instruments::{Workers, signal};
use super::nodes::{act, start_masters};
use super::schedule::{Try, run_rounds};
use super::{Context, GRANT_WAIT, SHARP_TRIES, ScenarioResult, blocking, stop_in_hold};
use crate::RedisNode;
use crate::chaos::checker::{Records, Window};
use crate::chaos::clock::{mono_ns, ms};
use crate::chaos::record::Write;

/// The planted bug of the out-of-model scenario.
pub(super) const PLANTED: &str = "TokenFromCounterOnly";

/// Masters of both scenarios.
const MASTERS: usize = 3;

/// The lock's TTL: short, so that a client waits little for the restarted
/// masters' votes.
const TTL: Duration = Duration::from_millis(500);

/// Each hold's work: the holder is stopped inside it.
const HOLD: Duration = Duration::from_millis(300);

/// How long the suite waits for the new holder's first write, and for the
/// continued holder to end its hold.
const WRITE_WAIT: Duration = Duration::from_secs(5);

/// The key both workers lock.
const KEY: &str = "fenced";

/// What the fenced-restart scenarios found: the suite's `fenced restart
/// summary` line.
#[derive(Clone, Debug, Default)]
pub struct FencedSummary {
    /// Rounds of the correct scenario.
    pub rounds: usize,
    /// Stale writes the resource accepted, with the correct core.
    pub stale_writes_accepted: usize,
    /// Tokens not above the one before, with the correct core.
    pub falling_tokens: usize,
    /// Writes of a superseded holder the resource refused, with the correct
    /// core (the continued holders' late writes, mostly).
    pub late_writes_rejected: usize,
    /// Rounds of the planted scenario.
    pub planted_rounds: usize,
    /// Of those, the rounds whose violation the checker found.
    pub planted_found: usize,
}

impl FencedSummary {
    /// The line `make chaos` prints.
    pub fn line(&self) -> String {
        format!(
            "fenced restart summary: rounds={} stale_writes_accepted={} tokens_gone_back={} superseded_writes_rejected={} planted {PLANTED}: found={}/{}",
            self.rounds,
            self.stale_writes_accepted,
            self.falling_tokens,
            self.late_writes_rejected,
            self.planted_found,
            self.planted_rounds
        )
    }
}

/// What one round saw ([`restart_round`]).
struct Round {
    window: Window,
    /// The new holder's first write after the restart.
    new_write: Option<Write>,
    /// The continued holder's first write after it was continued.
    late_write: Option<Write>,
}

impl Context<'_> {
    /// A fenced-restart scenario (see the module docs): the correct one, or
    /// with `planted` the out-of-model one, and how many of its rounds the
    /// checker caught (the planted one's).
    pub(super) async fn fenced_restart(
        &self,
        seed: u64,
        rounds: usize,
        planted: Option<&'static str>,
    ) -> (ScenarioResult, usize) {
        let started = Instant::now();
        let scenario = match planted {
            Some(_) => "fenced_restart_counter_only",
            None => "fenced_restart",
        };
        let name = format!("{}/{scenario}", self.part);
        let dir = self.dir(scenario);
        let mut rng = StdRng::seed_from_u64(seed);
        let nodes = Arc::new(blocking(|| start_masters(MASTERS, false, vec![])).await);
        let urls: Vec<String> = nodes.iter().map(RedisNode::url).collect();
        let tries = if planted.is_some() { SHARP_TRIES } else { 1 };
        let run_for = (TTL * 4 + GRANT_WAIT + WRITE_WAIT * 2) * (rounds * tries) as u32
            + Duration::from_secs(60);
        let configs = (0..2u32)
            .map(|worker| {
                let mut config =
                    self.worker_config(&dir, scenario, worker, &urls, TTL, rng.random(), run_for);
                config.tasks = 1;
                config.keys = vec![KEY.into()];
                config.extend_share = 0.0;
                let hold_ms = HOLD.as_millis() as u64;
                config.hold_ms = (hold_ms, hold_ms);
                config.idle_ms = (2, 10);
                config.announce = true;
                config.planted = planted.map(str::to_owned);
                config
            })
            .collect();
        self.log.say(format!(
            "{name}: {rounds} round(s), TTL {} ms, hold {} ms, every master restarted empty under a stopped holder; {}",
            TTL.as_millis(),
            HOLD.as_millis(),
            match planted {
                Some(bug) => format!("planted {bug}: expect the checker to find a token gone back"),
                None => "expect no stale write and rising tokens".to_owned(),
            }
        ));
        let mut workers = Workers::spawn(&self.options.worker_exe, &dir, configs).await;
        let (mut windows, mut failures, mut notes) = (Vec::new(), Vec::new(), Vec::new());
        let mut completed = 0;
        let found = match planted {
            Some(bug) => {
                let mut seen = (0, 0);
                run_rounds(
                    rounds,
                    (&mut notes, &mut failures),
                    async |round, attempt, failures: &mut Vec<String>| {
                        let label = format!("round {} (try {})", round + 1, attempt + 1);
                        match restart_round(&mut workers, &nodes, &mut rng, &label).await {
                            Ok(seen_round) => {
                                self.log.say(format!("{name}: {}", describe(&seen_round)));
                                windows.push(seen_round.window);
                            }
                            Err(err) => {
                                failures.push(format!("{label}: {err}"));
                                return Try::Broken;
                            }
                        }
                        let analysis = workers.records().analyze();
                        let now = (
                            analysis.falling_tokens.len(),
                            analysis.stale_writes_accepted,
                        );
                        let before = std::mem::replace(&mut seen, now);
                        if now.0 > before.0 || now.1 > before.1 {
                            Try::Found(format!(
                                "the checker found {} token(s) gone back ({}) and {} stale write(s) accepted",
                                now.0 - before.0,
                                analysis.falling_tokens[before.0..]
                                    .iter()
                                    .map(|f| format!("{} after {}", f.after_term, f.before_term))
                                    .collect::<Vec<_>>()
                                    .join(", "),
                                now.1 - before.1
                            ))
                        } else {
                            Try::Missed(format!("tokens rose and no stale write with {bug}"))
                        }
                    },
                    "a token gone back or a stale write accepted",
                )
                .await
            }
            None => {
                for round in 0..rounds {
                    let label = format!("round {}", round + 1);
                    match restart_round(&mut workers, &nodes, &mut rng, &label).await {
                        Ok(seen) => {
                            self.log.say(format!("{name}: {}", describe(&seen)));
                            windows.push(seen.window);
                            completed += 1;
                        }
                        Err(err) => failures.push(format!("{label}: {err}")),
                    }
                }
                0
            }
        };
        let mut result = self
            .finish_rounds(
                (name, planted.is_none(), started),
                workers,
                &windows,
                notes,
                failures,
            )
            .await;
        if planted.is_none() && result.analysis.paused_past_validity < completed {
            result.failures.push(format!(
                "{completed} holders stopped past their TTL, but {} holds paused past their validity in the records: the paused-holder check did not run",
                result.analysis.paused_past_validity
            ));
        }
        (result, found)
    }
}

/// One round (see the module docs); `Err`: it could not go on. The stopped
/// holder is continued whatever happens.
async fn restart_round(
    workers: &mut Workers,
    nodes: &Arc<Vec<RedisNode>>,
    rng: &mut StdRng,
    label: &str,
) -> Result<Round, String> {
    let stopped = stop_in_hold(workers, rng, |_| true)
        .await
        .map_err(|err| format!("SIGSTOP: {err}"))?;
    let Some((held, pid)) = stopped else {
        return Err("no worker was caught inside a hold".to_owned());
    };
    let holder = held.worker;
    let stopped_ns = mono_ns();
    act(
        nodes,
        Box::new(|nodes: &[RedisNode]| {
            std::thread::scope(|scope| {
                for node in nodes {
                    scope.spawn(|| node.restart());
                }
            });
        }),
    )
    .await;
    let restarted_ns = mono_ns();
    let other = workers
        .next_grant(Instant::now() + GRANT_WAIT, |w| w != holder)
        .await;
    // The new holder's first write lands before the old one is continued.
    let new_write = match &other {
        Some(other) => wait_for_write(workers, other.worker, restarted_ns).await,
        None => None,
    };
    let continued_ns = mono_ns();
    signal(pid, Signal::SIGCONT).map_err(|err| format!("SIGCONT: {err}"))?;
    let Some(other) = other else {
        return Err(format!(
            "no lock granted to the other worker within {} s of the restart",
            GRANT_WAIT.as_secs()
        ));
    };
    let deadline = Instant::now() + WRITE_WAIT;
    while workers.in_hold(holder) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let late_write = first_write(&workers.records(), holder, continued_ns);
    let window = Window {
        label: format!(
            "{label}: worker {holder} stopped {:.0} ms into its hold, masters 1-{MASTERS} restarted empty {:.0} ms after its grant; worker {} granted {:.0} ms after the restart; worker {holder} continued",
            ms(stopped_ns.saturating_sub(held.at_ns)),
            ms(restarted_ns.saturating_sub(held.at_ns)),
            other.worker,
            ms(other.at_ns.saturating_sub(restarted_ns)),
        ),
        class: "fenced_restart".to_owned(),
        majority_up: true,
        start_ns: restarted_ns,
        end_ns: mono_ns(),
    };
    Ok(Round {
        window,
        new_write,
        late_write,
    })
}

/// Waits (at most [`WRITE_WAIT`]) for `worker`'s first write sent at or
/// after `since_ns`.
async fn wait_for_write(workers: &Workers, worker: u32, since_ns: u64) -> Option<Write> {
    let deadline = Instant::now() + WRITE_WAIT;
    loop {
        let found = first_write(&workers.records(), worker, since_ns);
        if found.is_some() || Instant::now() >= deadline {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `worker`'s first write sent at or after `since_ns`.
fn first_write(records: &Records, worker: u32, since_ns: u64) -> Option<Write> {
    records
        .writes
        .iter()
        .filter(|w| w.worker == worker && w.sent_ns >= since_ns)
        .min_by_key(|w| w.sent_ns)
        .cloned()
}

/// A round's log line: its window and the two writes.
fn describe(round: &Round) -> String {
    let write = |write: &Option<Write>| match write {
        Some(w) => format!(
            "token {} {}",
            w.token,
            if w.accepted { "accepted" } else { "rejected" }
        ),
        None => "none seen".to_owned(),
    };
    format!(
        "{}; new holder's write: {}; late write: {}",
        round.window.label,
        write(&round.new_write),
        write(&round.late_write)
    )
}
