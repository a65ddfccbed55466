//! The **semaphore** scenarios: one semaphore of [`PERMITS`] permits under
//! faults, on local processes.
//!
//! - **semaphore** (in model): three masters with AOF (`appendfsync
//!   always`: a killed master comes back with its slots and fencing
//!   counters); four worker processes of two tasks each take fenced permits
//!   (`.permits(k).fencing()`), write to the protected resource under each
//!   slot's token, extend or keep some alive, while a seeded schedule
//!   pauses a master, kills a master and restarts it, and stops (SIGSTOP) a
//!   worker that holds a permit for longer than its TTL. The checks: no two
//!   holders of one slot and no stale write accepted (the ordinary checker,
//!   per slot), and at most k holders of the semaphore at any instant (the
//!   semaphore checker, [`permits`](crate::chaos::permits)); the maximum is
//!   printed.
//! - **semaphore_restart_empty** (out of model): with master 3 down, k
//!   workers take the k permits, so each slot is held on exactly masters
//!   1-2; master 3 comes back and master 1 is restarted empty at once. The
//!   last worker then finds a free slot on masters 1 and 3, and the
//!   semaphore checker must count k + 1 holders, in every round (a round in
//!   which that worker was too slow is tried again, a few times).

use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use super::instruments::{Probe, Workers, signal};
use super::nodes::{MasterFault, NodeAction, act, restore_nodes, start_masters};
use super::schedule::{ScheduledFault, Try, between, run_rounds};
use super::{
    Context, Finished, GRANT_CAP, GRANT_WAIT, MIXED_TTL, NODE_TIMEOUT, SHARP_TRIES, ScenarioResult,
    blocking, hold_open, stop_in_hold,
};
use crate::RedisNode;
use crate::chaos::checker::Window;
use crate::chaos::clock::{mono_ns, ms, nanos};
use crate::chaos::permits;

/// The semaphore's permits, in both scenarios.
pub const PERMITS: u32 = 3;

/// Masters of both scenarios.
const MASTERS: usize = 3;

/// Worker processes of the in-model scenario.
const WORKERS: u32 = 4;

/// What the semaphore scenarios found: the suite's `semaphore summary` line.
#[derive(Clone, Debug, Default)]
pub struct SemaphoreSummary {
    /// Permits of the semaphore.
    pub permits: u32,
    /// Permits granted in model.
    pub grants: usize,
    /// The most holders at one instant, in model.
    pub max_concurrent_holders: usize,
    /// Stale writes the resource accepted, in model.
    pub stale_writes_accepted: usize,
    /// Out-of-model rounds run.
    pub rounds: usize,
    /// Of those, the rounds whose violation (k + 1 holders) the checker found.
    pub found: usize,
}

impl SemaphoreSummary {
    /// The line `make chaos` prints.
    pub fn line(&self) -> String {
        format!(
            "semaphore summary: permits={} grants={} max_concurrent_holders={} stale_writes_accepted={} out_of_model_violations_found={}/{}",
            self.permits,
            self.grants,
            self.max_concurrent_holders,
            self.stale_writes_accepted,
            self.found,
            self.rounds
        )
    }
}

/// One fault of the in-model schedule.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// A master paused, or killed and restarted with its data.
    Master(MasterFault),
    /// SIGSTOP a worker inside a permit's hold for the TTL and this much.
    StopHolder { past_ttl: Duration },
}

impl ScheduledFault for Fault {
    fn class(&self) -> &'static str {
        match self {
            Fault::Master(MasterFault::Pause { .. }) => "semaphore_master_pause",
            Fault::Master(MasterFault::Kill { .. }) => "semaphore_master_kill",
            Fault::StopHolder { .. } => "semaphore_holder_paused",
        }
    }

    fn breaks_connections(&self) -> bool {
        matches!(self, Fault::Master(MasterFault::Kill { .. }))
    }
}

fn plan(rng: &mut StdRng, cycles: usize) -> Vec<Fault> {
    let mut faults = Vec::new();
    for _ in 0..cycles {
        faults.extend(MasterFault::both(rng, MASTERS).map(Fault::Master));
        faults.push(Fault::StopHolder {
            past_ttl: between(rng, 100, 400),
        });
    }
    faults
}

impl Context<'_> {
    /// The in-model semaphore scenario (see the module docs), and the most
    /// holders it saw at one instant.
    pub(super) async fn semaphore(&self, seed: u64, cycles: usize) -> (ScenarioResult, usize) {
        let started = Instant::now();
        let name = format!("{}/semaphore", self.part);
        let dir = self.dir("semaphore");
        let mut rng = StdRng::seed_from_u64(seed);
        let nodes = Arc::new(blocking(|| start_masters(MASTERS, true, vec![])).await);
        let urls: Vec<String> = nodes.iter().map(RedisNode::url).collect();
        let faults = plan(&mut rng, cycles);
        let run_for =
            (Duration::from_secs(6) + GRANT_CAP) * faults.len() as u32 + Duration::from_secs(60);
        let mut notes = vec![format!(
            "{MASTERS} masters with AOF (appendfsync always), no proxies; one semaphore of {PERMITS} fenced permits, {WORKERS} worker processes x 2 tasks; TTL {} ms, per-node timeout {} ms",
            MIXED_TTL.as_millis(),
            NODE_TIMEOUT.as_millis(),
        )];
        self.log.say(format!(
            "{name}: seed {seed}, {} faults, {WORKERS} worker processes, {PERMITS} permits",
            faults.len()
        ));
        let configs = (0..WORKERS)
            .map(|worker| {
                let mut config = self.worker_config(
                    &dir,
                    "semaphore",
                    worker,
                    &urls,
                    MIXED_TTL,
                    rng.random(),
                    run_for,
                );
                config.keys = vec!["sem".into()];
                config.permits = Some(PERMITS);
                config.tasks = 2;
                config.try_lock_share = 0.3;
                config.keep_alive_share = 0.1;
                config.extend_share = 0.05;
                config.hold_ms = (5, 40);
                config.idle_ms = (0, 5);
                config.announce = true;
                config
            })
            .collect();
        let (probe, monitor, mut workers) = self
            .start_run(&name, &dir, configs, (&urls, MIXED_TTL), run_for)
            .await;
        let mut failures = Vec::new();
        let victim = |i: usize| i as u32 % WORKERS;
        let windows = self
            .run_schedule(
                (&name, &faults),
                &mut rng,
                (&mut notes, &mut failures),
                async |i, &fault, rng: &mut StdRng| {
                    inject(&nodes, &probe, &mut workers, fault, victim(i), rng).await
                },
                async || restore_nodes(&nodes).await,
                |i| format!("worker {} was never caught inside a hold", victim(i)),
            )
            .await;
        let Finished {
            analysis,
            reports,
            probes,
            records,
        } = self
            .finish_run(
                &dir,
                (probe, monitor, workers),
                &windows,
                &mut notes,
                &mut failures,
            )
            .await;
        let most = permits::max_over_all(&records.holds);
        notes.push(format!(
            "max_concurrent_holders={most} of {PERMITS} permits"
        ));
        if most > PERMITS as usize {
            failures.push(format!(
                "SAFETY: {most} holders of a semaphore of {PERMITS} permits at once"
            ));
        }
        let faults = windows.len();
        let result = ScenarioResult {
            name,
            in_model: true,
            analysis,
            windows: reports,
            faults,
            probes,
            notes,
            failures,
            seconds: started.elapsed().as_secs_f64(),
        };
        (result, most)
    }

    /// The out-of-model semaphore scenario (see the module docs), and how
    /// many of its rounds the checker caught.
    pub(super) async fn semaphore_restart_empty(
        &self,
        seed: u64,
        rounds: usize,
    ) -> (ScenarioResult, usize) {
        let started = Instant::now();
        let name = format!("{}/semaphore_restart_empty", self.part);
        let dir = self.dir("semaphore_restart_empty");
        let mut rng = StdRng::seed_from_u64(seed);
        let nodes = Arc::new(blocking(|| start_masters(MASTERS, false, vec![])).await);
        let urls: Vec<String> = nodes.iter().map(RedisNode::url).collect();
        // Long holds: the last worker must reconnect to the restarted
        // masters (backoff up to 2 s) and win them while the k still hold.
        let (ttl, hold) = (Duration::from_millis(3500), Duration::from_millis(2500));
        let workers_count = PERMITS + 1;
        let run_for = (ttl * 3 + Duration::from_secs(10)) * (rounds * SHARP_TRIES) as u32
            + Duration::from_secs(60);
        let configs = (0..workers_count)
            .map(|worker| {
                let mut config = self.worker_config(
                    &dir,
                    "semaphore_restart_empty",
                    worker,
                    &urls,
                    ttl,
                    rng.random(),
                    run_for,
                );
                config.tasks = 1;
                config.keys = vec!["sem".into()];
                config.permits = Some(PERMITS);
                config.try_lock_share = 1.0;
                config.extend_share = 0.0;
                let hold_ms = hold.as_millis() as u64;
                config.hold_ms = (hold_ms, hold_ms);
                config.idle_ms = (2, 4);
                config.announce = true;
                // Plain Redlock: a restarted master votes at once (the
                // client's delayed restart off), so the fault is out of model.
                config.planted = Some("RestartedNodeVotes".into());
                config
            })
            .collect();
        self.log.say(format!(
            "{name}: {rounds} round(s), {PERMITS} permits, TTL {} ms, hold {} ms, out of model: expect {} holders",
            ttl.as_millis(),
            hold.as_millis(),
            PERMITS + 1
        ));
        let mut workers = Workers::spawn(&self.options.worker_exe, &dir, configs).await;
        let (mut windows, mut failures, mut notes) = (Vec::new(), Vec::new(), Vec::new());
        let act = |f: NodeAction| act(&nodes, f);
        let found = run_rounds(
            rounds,
            (&mut notes, &mut failures),
            async |round, attempt, failures: &mut Vec<String>| {
                let round_start = mono_ns();
                // Master 3 down: every permit taken now is held on exactly
                // masters 1-2.
                act(Box::new(|n| n[2].kill())).await;
                workers.drain();
                let mut holders: Vec<u32> = Vec::new();
                let mut first_at = None;
                let deadline = Instant::now() + GRANT_WAIT;
                while holders.len() < PERMITS as usize {
                    let taken = holders.clone();
                    match workers
                        .next_grant(deadline, move |w| !taken.contains(&w))
                        .await
                    {
                        Some(held) => {
                            first_at.get_or_insert(held.at_ns);
                            holders.push(held.worker);
                        }
                        None => break,
                    }
                }
                act(Box::new(|n| n[2].restart())).await;
                let Some(first_at) = first_at.filter(|_| holders.len() == PERMITS as usize) else {
                    failures.push(format!(
                        "round {}: {} of {PERMITS} permits granted with 2 of 3 masters up within {} s",
                        round + 1,
                        holders.len(),
                        GRANT_WAIT.as_secs()
                    ));
                    return Try::Broken;
                };
                act(Box::new(|n| n[0].restart())).await;
                let start_ns = mono_ns();
                let first_ends = first_at + nanos(hold);
                let window = Window {
                    label: format!(
                        "round {} (try {}): workers {holders:?} hold the {PERMITS} permits on masters 1-2; master 3 back, master 1 restarted empty {:.0} ms after the first grant",
                        round + 1,
                        attempt + 1,
                        ms(start_ns - first_at)
                    ),
                    class: "semaphore_restart_empty".to_owned(),
                    majority_up: true,
                    start_ns,
                    end_ns: first_ends,
                };
                self.log.say(format!("{name}: {}", window.label));
                windows.push(window);
                let wait = Duration::from_nanos(first_ends.saturating_sub(mono_ns()))
                    + Duration::from_millis(300);
                let taken = holders.clone();
                let extra = workers
                    .next_grant(Instant::now() + wait, move |w| !taken.contains(&w))
                    .await;
                let last_end = extra
                    .as_ref()
                    .map_or(first_ends, |s| s.at_ns + nanos(hold))
                    .max(first_ends + nanos(Duration::from_millis(100)));
                tokio::time::sleep(
                    Duration::from_nanos(last_end.saturating_sub(mono_ns()))
                        + Duration::from_millis(200),
                )
                .await;
                let most = permits::max_over_all(&workers.holds_since(round_start));
                if most > PERMITS as usize {
                    Try::Found(format!(
                        "the checker counted {most} holders of {PERMITS} permits"
                    ))
                } else {
                    Try::Missed(format!(
                        "at most {most} holders (the last worker may have won too late)"
                    ))
                }
            },
            &format!("{} holders of {PERMITS} permits", PERMITS + 1),
        )
        .await;
        let result = self
            .finish_rounds((name, false, started), workers, &windows, notes, failures)
            .await;
        (result, found)
    }
}

/// Applies one fault, keeps it while the probe has not been granted a lock
/// (up to [`GRANT_CAP`] more), undoes it; the window is the time it was in
/// force. `None`: the victim was never caught inside a hold.
async fn inject(
    nodes: &Arc<Vec<RedisNode>>,
    probe: &Probe,
    workers: &mut Workers,
    fault: Fault,
    victim: u32,
    rng: &mut StdRng,
) -> std::io::Result<Option<Window>> {
    Ok(Some(match fault {
        Fault::Master(master) => master.inject(nodes, probe, fault.class()).await,
        Fault::StopHolder { past_ttl } => {
            let Some((held, pid)) = stop_in_hold(workers, rng, |w| w == victim).await? else {
                return Ok(None);
            };
            let start = mono_ns();
            hold_open(probe, start, MIXED_TTL + past_ttl).await;
            let w = Window {
                label: format!(
                    "SIGSTOP worker {victim} {:.0} ms into a permit's hold, for the TTL and {} ms",
                    ms(start - held.at_ns),
                    past_ttl.as_millis()
                ),
                class: fault.class().to_owned(),
                majority_up: true,
                start_ns: start,
                end_ns: mono_ns(),
            };
            signal(pid, Signal::SIGCONT)?;
            w
        }
    }))
}
