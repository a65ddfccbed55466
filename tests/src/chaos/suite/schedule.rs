//! The seeded fault schedule of the mixed scenarios, the sharp scenarios'
//! faults, and how a schedule of faults is run.

use std::time::Duration;

use rand::RngExt;
use rand::rngs::StdRng;

use super::{Context, MIXED_TTL, RECONNECT_ALLOWANCE, SHARP_TRIES};
use crate::chaos::checker::Window;
use crate::chaos::clock::ms;

/// How one master is taken away in a majority-down fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Method {
    Kill,
    Pause,
    Partition,
}

/// One fault of the mixed schedule.
#[derive(Clone, Debug)]
pub(super) enum Planned {
    NodeKill {
        node: usize,
        down: Duration,
    },
    NodePause {
        node: usize,
        length: Duration,
    },
    Partition {
        node: usize,
        length: Duration,
        reset: bool,
    },
    SlowLossy {
        node: usize,
        length: Duration,
        latency: Duration,
        jitter: Duration,
        loss: f64,
    },
    MajorityDown {
        nodes: Vec<(usize, Method)>,
        length: Duration,
    },
    /// The victim worker stopped (SIGSTOP) inside a hold, past its validity.
    ClientPause {
        length: Duration,
    },
    /// The victim worker killed (SIGKILL) inside a hold; a new process takes
    /// its part.
    ClientKill,
}

impl ScheduledFault for Planned {
    fn breaks_connections(&self) -> bool {
        match self {
            Planned::NodeKill { .. } => true,
            Planned::MajorityDown { nodes, .. } => nodes.iter().any(|(_, m)| *m == Method::Kill),
            _ => false,
        }
    }

    fn class(&self) -> &'static str {
        match self {
            Planned::NodeKill { .. } => "node_kill_delayed_restart",
            Planned::NodePause { .. } => "node_pause",
            Planned::Partition { .. } => "partition",
            Planned::SlowLossy { .. } => "latency_loss",
            Planned::MajorityDown { .. } => "majority_down",
            Planned::ClientPause { .. } => "client_pause",
            Planned::ClientKill => "client_kill",
        }
    }
}

pub(super) fn between(rng: &mut StdRng, low_ms: u64, high_ms: u64) -> Duration {
    Duration::from_millis(rng.random_range(low_ms..=high_ms))
}

/// Shuffles `items` with the schedule's RNG (Fisher-Yates).
pub(super) fn shuffle<T>(rng: &mut StdRng, items: &mut [T]) {
    for i in (1..items.len()).rev() {
        items.swap(i, rng.random_range(0..=i));
    }
}

/// The mixed schedule: `cycles` rounds of every class in a shuffled order.
pub(super) fn schedule(rng: &mut StdRng, cycles: usize, nodes: usize) -> Vec<Planned> {
    let ttl_ms = MIXED_TTL.as_millis() as u64;
    let mut plan = Vec::new();
    for _ in 0..cycles {
        let mut cycle = vec![
            Planned::NodeKill {
                node: rng.random_range(0..nodes),
                // Delayed restart: down for longer than the TTL.
                down: between(rng, ttl_ms + 200, ttl_ms + 700),
            },
            Planned::NodePause {
                node: rng.random_range(0..nodes),
                length: between(rng, 150, 1200),
            },
            Planned::Partition {
                node: rng.random_range(0..nodes),
                length: between(rng, 200, 1500),
                reset: rng.random_bool(0.5),
            },
            Planned::SlowLossy {
                node: rng.random_range(0..nodes),
                length: between(rng, 1500, 3000),
                latency: Duration::from_micros(rng.random_range(1_000..=8_000)),
                jitter: Duration::from_micros(rng.random_range(0..=2_000)),
                loss: rng.random_range(0.02..=0.1),
            },
            {
                let mut all: Vec<usize> = (0..nodes).collect();
                let mut down = Vec::new();
                for _ in 0..(nodes / 2 + 1) {
                    let node = all.remove(rng.random_range(0..all.len()));
                    let method = match rng.random_range(0..3) {
                        0 => Method::Kill,
                        1 => Method::Pause,
                        _ => Method::Partition,
                    };
                    down.push((node, method));
                }
                Planned::MajorityDown {
                    nodes: down,
                    // Long enough that killed masters come back after the TTL.
                    length: between(rng, ttl_ms + 300, ttl_ms + 1000),
                }
            },
            Planned::ClientPause {
                length: between(rng, ttl_ms * 3 / 2, ttl_ms * 3),
            },
            Planned::ClientKill,
        ];
        shuffle(rng, &mut cycle);
        plan.extend(cycle);
    }
    plan
}

/// The sharp scenarios' fault on master 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Sharp {
    RestartDelayed,
    /// In model: the clients see the restart (another run id) and do not
    /// count the master's votes for a TTL.
    RestartEmpty,
    /// The same with the planted bug `RestartedNodeVotes` in the workers:
    /// plain Redlock, out of model.
    RestartEmptyVotingAtOnce,
    ClockJump,
}

impl Sharp {
    pub(super) fn name(self) -> &'static str {
        match self {
            Sharp::RestartDelayed => "restart_delayed",
            Sharp::RestartEmpty => "restart_empty",
            Sharp::RestartEmptyVotingAtOnce => "restart_empty_voting_at_once",
            Sharp::ClockJump => "clock_jump",
        }
    }

    pub(super) fn in_model(self) -> bool {
        matches!(self, Sharp::RestartDelayed | Sharp::RestartEmpty)
    }

    /// The planted bug its workers run with, if any.
    pub(super) fn planted(self) -> Option<&'static str> {
        (self == Sharp::RestartEmptyVotingAtOnce).then_some("RestartedNodeVotes")
    }
}

/// A fault of a schedule ([`Context::run_schedule`]).
pub(super) trait ScheduledFault {
    /// Its class, as windows and the report name it.
    fn class(&self) -> &'static str;
    /// Whether undoing it leaves clients reconnecting (a master was killed).
    fn breaks_connections(&self) -> bool;
}

impl Context<'_> {
    /// Runs `faults` in turn with `inject` (given the fault's index) and
    /// logs each window; a `None` from it is noted with `skipped`'s reason,
    /// an error is a failure after which `restore` puts everything back.
    /// After a fault that broke connections the schedule waits
    /// [`RECONNECT_ALLOWANCE`] (clients reconnect to a restarted master with
    /// a backoff of up to 2 s: the next window tests its own fault), and 300
    /// to 600 ms after every fault.
    pub(super) async fn run_schedule<F: ScheduledFault>(
        &self,
        (name, faults): (&str, &[F]),
        rng: &mut StdRng,
        (notes, failures): (&mut Vec<String>, &mut Vec<String>),
        mut inject: impl AsyncFnMut(usize, &F, &mut StdRng) -> std::io::Result<Option<Window>>,
        mut restore: impl AsyncFnMut(),
        skipped: impl Fn(usize) -> String,
    ) -> Vec<Window> {
        let mut windows = Vec::new();
        for (i, fault) in faults.iter().enumerate() {
            match inject(i, fault, rng).await {
                Ok(Some(window)) => {
                    self.log.say(format!(
                        "{name}: fault {}/{}: {} ({:.0} ms)",
                        i + 1,
                        faults.len(),
                        window.label,
                        ms(window.end_ns - window.start_ns)
                    ));
                    windows.push(window);
                }
                Ok(None) => notes.push(format!(
                    "fault {} ({}) skipped: {}",
                    i + 1,
                    fault.class(),
                    skipped(i)
                )),
                Err(err) => {
                    failures.push(format!("fault {} ({}): {err}", i + 1, fault.class()));
                    restore().await;
                }
            }
            if fault.breaks_connections() {
                tokio::time::sleep(RECONNECT_ALLOWANCE).await;
            }
            tokio::time::sleep(between(rng, 300, 600)).await;
        }
        windows
    }
}

/// What one try of an out-of-model round found ([`run_rounds`]).
pub(super) enum Try {
    /// The checker found the violation: what it found.
    Found(String),
    /// Nothing to find this time (the contender was too slow): why.
    Missed(String),
    /// The round cannot go on: a failure was recorded.
    Broken,
}

/// Runs `rounds` rounds of an out-of-model fault, each tried up to
/// [`SHARP_TRIES`] times with `attempt` (given the round, the try and where
/// failures go) until the checker finds the violation; notes what each
/// round found and why a try was made again. A round whose tries all missed
/// fails the run: `violation` was not reproduced, or the checker missed it.
/// How many rounds found theirs.
pub(super) async fn run_rounds(
    rounds: usize,
    (notes, failures): (&mut Vec<String>, &mut Vec<String>),
    mut attempt: impl AsyncFnMut(usize, usize, &mut Vec<String>) -> Try,
    violation: &str,
) -> usize {
    let mut found = 0;
    for round in 0..rounds {
        let mut reproduced = false;
        for tried in 0..SHARP_TRIES {
            match attempt(round, tried, failures).await {
                Try::Found(what) => {
                    notes.push(format!("round {}: {what}", round + 1));
                    reproduced = true;
                    break;
                }
                Try::Missed(why) if tried + 1 < SHARP_TRIES => notes.push(format!(
                    "round {} try {}: {why}; tried again",
                    round + 1,
                    tried + 1
                )),
                Try::Missed(_) => {}
                Try::Broken => break,
            }
        }
        if reproduced {
            found += 1;
        } else {
            failures.push(format!(
                "round {}: {violation} not found in {SHARP_TRIES} tries: the out-of-model fault was not reproduced, or the checker missed it",
                round + 1
            ));
        }
    }
    found
}
