//! The **election** scenarios: one leader election (`redlock.election`)
//! under faults, on local processes.
//!
//! - **election** (in model): three masters with AOF (`appendfsync
//!   always`: terms, like fencing counters, need their data kept), master 1
//!   under the clock-shift library; three worker processes campaign for one
//!   name (lease 1000 ms, renew deadline 600 ms, retry period 200 ms), lead
//!   for 0.5 to 1.5 s, writing to the protected resource with their term as
//!   the token, and resign. A seeded schedule pauses a master, kills a
//!   master and restarts it with its data, stops (SIGSTOP) the leader for
//!   longer than its lease and continues it, kills (SIGKILL) the leader and
//!   starts a new process in its place, and jumps master 1's clock forward
//!   by less than the drift allowance. The checks: no two leaders at once
//!   (the ordinary checker's overlaps, on the election's name), terms
//!   strictly rising in grant order ([`leaders`](crate::chaos::leaders)),
//!   no write of a deposed leader accepted after a newer leader's (stale
//!   writes), and a leader stopped past its lease told so by its loss
//!   signal. The failover times, from each SIGKILL to the next leader's
//!   grant, are printed.
//! - **election_restart_empty** (out of model): two workers that lead until
//!   told to resign, renewing every 2.5 s. With master 3 down the leader is
//!   told to resign, so the next one is elected on exactly masters 1-2;
//!   master 3 comes back with its data and master 1 is restarted empty at
//!   once. The other worker then wins masters 1 and 3 while the leader still
//!   leads (its next renewal finds the name taken), with a term no higher
//!   (master 1 forgot its counter). The checker must find the two leaders
//!   or the falling term in every round (a round in which the other worker
//!   was too slow is tried again, a few times).

use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use super::instruments::{Held, Probe, Workers, signal};
use super::nodes::{MasterFault, NodeAction, act, restore_nodes, start_masters};
use super::schedule::{ScheduledFault, Try, between, run_rounds, shuffle};
use super::victims::{kill_in_hold, stop_in_hold};
use super::{
    Context, Finished, GRANT_CAP, GRANT_WAIT, NODE_TIMEOUT, SHARP_TRIES, ScenarioResult, blocking,
    hold_open,
};
use crate::RedisNode;
use crate::chaos::checker::{self, Window};
use crate::chaos::clock::{mono_ns, ms, nanos};
use crate::chaos::clock_shift::ClockShift;
use crate::chaos::leaders;
use crate::chaos::worker::{self, ElectionConfig};

/// Masters of both scenarios.
const MASTERS: usize = 3;

/// Worker processes of the in-model scenario (a killed one is replaced).
const WORKERS: u32 = 3;

/// The election's name.
const NAME: &str = "leader";

/// The in-model timings: lease, renew deadline, retry period.
const TIMING: [Duration; 3] = [
    Duration::from_millis(1000),
    Duration::from_millis(600),
    Duration::from_millis(200),
];

/// The out-of-model timings: a leader renews only every 2.5 s, so the
/// other worker can reconnect to the restarted masters and win them first.
const SLOW_TIMING: [Duration; 3] = [
    Duration::from_millis(5000),
    Duration::from_millis(3500),
    Duration::from_millis(2500),
];

/// The drift allowance of the in-model lease: 1% of it and 2 ms.
const DRIFT: Duration = Duration::from_millis(12);

/// What the election scenarios found: the suite's `election summary` line.
#[derive(Clone, Debug, Default)]
pub struct ElectionSummary {
    /// Terms granted in model.
    pub terms: usize,
    /// Two leaders at once, in model.
    pub overlaps: usize,
    /// Writes of a deposed leader the resource accepted, in model.
    pub stale_writes_accepted: usize,
    /// From each leader's SIGKILL to the next leader's grant, in ms.
    pub failover_ms: Vec<f64>,
    /// Out-of-model rounds run.
    pub rounds: usize,
    /// Of those, the rounds whose violation the checker found.
    pub found: usize,
}

impl ElectionSummary {
    /// The line `make chaos` prints.
    pub fn line(&self) -> String {
        let quantile = |q| {
            leaders::quantile(&self.failover_ms, q)
                .map_or_else(|| "n/a".to_owned(), |v| format!("{v:.0}ms"))
        };
        format!(
            "election summary: terms={} overlaps={} stale_writes_accepted={} failover_p50={} failover_p99={} out_of_model_violations_found={}/{}",
            self.terms,
            self.overlaps,
            self.stale_writes_accepted,
            quantile(0.5),
            quantile(0.99),
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
    /// SIGSTOP the leader for its lease and this much.
    LeaderPause { past_lease: Duration },
    /// SIGKILL the leader; a new process takes its place.
    LeaderKill,
    /// Master 1's wall clock jumps forward by this much.
    ClockJump { by: Duration },
}

impl ScheduledFault for Fault {
    fn class(&self) -> &'static str {
        match self {
            Fault::Master(MasterFault::Pause { .. }) => "election_master_pause",
            Fault::Master(MasterFault::Kill { .. }) => "election_master_kill",
            Fault::LeaderPause { .. } => "election_leader_paused",
            Fault::LeaderKill => "election_leader_kill",
            Fault::ClockJump { .. } => "election_clock_jump",
        }
    }

    fn breaks_connections(&self) -> bool {
        matches!(self, Fault::Master(MasterFault::Kill { .. }))
    }
}

fn plan(rng: &mut StdRng, cycles: usize, clock_jumps: bool) -> Vec<Fault> {
    let mut faults = Vec::new();
    for _ in 0..cycles {
        let mut cycle: Vec<Fault> = MasterFault::both(rng, MASTERS).map(Fault::Master).into();
        cycle.push(Fault::LeaderPause {
            past_lease: between(rng, 200, 600),
        });
        cycle.push(Fault::LeaderKill);
        let by = between(rng, 4, 10);
        if clock_jumps {
            cycle.push(Fault::ClockJump { by });
        }
        shuffle(rng, &mut cycle);
        faults.extend(cycle);
    }
    faults
}

/// What the in-model faults keep across the schedule.
struct Cast {
    /// The id the next replacement process gets.
    next_id: u32,
    /// When each leader was killed, on the shared clock.
    deaths: Vec<u64>,
    /// Master 1's clock shift, if the library was built.
    shift: Option<ClockShift>,
    /// How far master 1's clock was moved so far.
    shifted: Duration,
}

impl Context<'_> {
    /// An election worker's configuration.
    #[allow(clippy::too_many_arguments)]
    fn election_worker(
        &self,
        dir: &std::path::Path,
        scenario: &str,
        worker: u32,
        urls: &[String],
        [lease, renew_deadline, retry_period]: [Duration; 3],
        lead_ms: (u64, u64),
        seed: u64,
        run_for: Duration,
    ) -> worker::Config {
        let mut config = self.worker_config(dir, scenario, worker, urls, lease, seed, run_for);
        config.keys = vec![NAME.into()];
        config.tasks = 1;
        config.idle_ms = (2, 40);
        config.announce = true;
        config.election = Some(ElectionConfig {
            renew_deadline_ms: renew_deadline.as_millis() as u64,
            retry_period_ms: retry_period.as_millis() as u64,
            lead_ms,
            retry_delay_ms: 20,
        });
        config
    }

    /// The in-model election scenario (see the module docs), and the
    /// failover times it measured.
    pub(super) async fn election(&self, seed: u64, cycles: usize) -> (ScenarioResult, Vec<f64>) {
        let started = Instant::now();
        let name = format!("{}/election", self.part);
        let dir = self.dir("election");
        let mut rng = StdRng::seed_from_u64(seed);
        let mut notes = Vec::new();
        let shift = match ClockShift::build(&dir.join("clock-shift")) {
            Ok(shift) => Some(shift),
            Err(err) => {
                notes.push(format!("no clock jumps: {err}"));
                None
            }
        };
        let env = shift.as_ref().map(ClockShift::env).unwrap_or_default();
        let nodes = Arc::new(blocking(move || start_masters(MASTERS, true, env)).await);
        let urls: Vec<String> = nodes.iter().map(RedisNode::url).collect();
        let faults = plan(&mut rng, cycles, shift.is_some());
        let run_for =
            (Duration::from_secs(6) + GRANT_CAP) * faults.len() as u32 + Duration::from_secs(60);
        let [lease, renew_deadline, retry_period] = TIMING;
        notes.push(format!(
            "{MASTERS} masters with AOF (appendfsync always), no proxies; {WORKERS} worker processes campaign for one name: lease {} ms, renew deadline {} ms, retry period {} ms, per-node timeout {} ms; leaders resign after 0.5-1.5 s",
            lease.as_millis(),
            renew_deadline.as_millis(),
            retry_period.as_millis(),
            NODE_TIMEOUT.as_millis(),
        ));
        self.log.say(format!(
            "{name}: seed {seed}, {} faults, {WORKERS} worker processes",
            faults.len()
        ));
        let configs = (0..WORKERS)
            .map(|worker| {
                self.election_worker(
                    &dir,
                    "election",
                    worker,
                    &urls,
                    TIMING,
                    (500, 1500),
                    rng.random(),
                    run_for,
                )
            })
            .collect();
        let (probe, monitor, mut workers) = self
            .start_run(&name, &dir, configs, (&urls, lease), run_for)
            .await;
        let mut cast = Cast {
            next_id: WORKERS,
            deaths: Vec::new(),
            shift,
            shifted: Duration::ZERO,
        };
        let mut failures = Vec::new();
        let windows = self
            .run_schedule(
                (&name, &faults),
                &mut rng,
                (&mut notes, &mut failures),
                async |_, &fault, rng: &mut StdRng| {
                    inject(&nodes, &probe, &mut workers, &mut cast, fault, rng).await
                },
                async || restore_nodes(&nodes).await,
                |_| "no leader was caught inside its term".to_owned(),
            )
            .await;
        let run = self
            .finish_run(
                &dir,
                (probe, monitor, workers),
                &windows,
                &mut notes,
                &mut failures,
            )
            .await;
        // Terms not above the one before fail the run in `finish_run`'s
        // in-model checks (the checker's falling tokens: terms are tokens).
        let Finished {
            analysis, records, ..
        } = &run;
        let count = |class: &str| windows.iter().filter(|w| w.class == class).count();
        if count("election_leader_paused") > 0 && analysis.paused_past_validity == 0 {
            failures.push(
                "no leader pause landed inside a term: the paused-leader check did not run".into(),
            );
        }
        let kills = count("election_leader_kill");
        if kills > analysis.open_holds {
            failures.push(format!(
                "{kills} leaders killed mid-term, but only {} open terms in the records: a record was lost",
                analysis.open_holds
            ));
        }
        let failovers = leaders::failovers_ms(&cast.deaths, &records.holds);
        if failovers.iter().any(Option::is_none) {
            failures.push("no leader was elected after a leader's SIGKILL".into());
        }
        let failovers: Vec<f64> = failovers.into_iter().flatten().collect();
        notes.push(format!(
            "{} terms; failovers after SIGKILL (ms): {:?}; {} leaders stopped past their term, {} told by their loss signal",
            analysis.granted(),
            failovers.iter().map(|f| f.round()).collect::<Vec<_>>(),
            analysis.paused_past_validity,
            analysis.paused_and_noticed
        ));
        let result = ScenarioResult {
            name,
            in_model: true,
            analysis: run.analysis,
            windows: run.reports,
            faults: windows.len(),
            probes: run.probes,
            notes,
            failures,
            seconds: started.elapsed().as_secs_f64(),
        };
        (result, failovers)
    }

    /// The out-of-model election scenario (see the module docs), and how
    /// many of its rounds the checker caught.
    pub(super) async fn election_restart_empty(
        &self,
        seed: u64,
        rounds: usize,
    ) -> (ScenarioResult, usize) {
        let started = Instant::now();
        let name = format!("{}/election_restart_empty", self.part);
        let dir = self.dir("election_restart_empty");
        let mut rng = StdRng::seed_from_u64(seed);
        // With AOF: only master 1's restart (empty, by the fault) loses data.
        let nodes = Arc::new(blocking(|| start_masters(MASTERS, true, vec![])).await);
        let urls: Vec<String> = nodes.iter().map(RedisNode::url).collect();
        let [lease, renew_deadline, retry_period] = SLOW_TIMING;
        let run_for = (lease * 2 + Duration::from_secs(10)) * (rounds * SHARP_TRIES) as u32
            + Duration::from_secs(60);
        let lead_ms = nanos(run_for) / 1_000_000;
        let configs = (0..2)
            .map(|worker| {
                let mut config = self.election_worker(
                    &dir,
                    "election_restart_empty",
                    worker,
                    &urls,
                    SLOW_TIMING,
                    (lead_ms, lead_ms),
                    rng.random(),
                    run_for,
                );
                // Plain Redlock: a restarted master votes at once (the
                // client's delayed restart off), so the fault is out of model.
                config.planted = Some("RestartedNodeVotes".into());
                config
            })
            .collect();
        self.log.say(format!(
            "{name}: {rounds} round(s), lease {} ms, renew deadline {} ms, retry period {} ms, out of model: expect two leaders",
            lease.as_millis(),
            renew_deadline.as_millis(),
            retry_period.as_millis(),
        ));
        let mut workers = Workers::spawn(&self.options.worker_exe, &dir, configs).await;
        let (mut windows, mut failures, mut notes) = (Vec::new(), Vec::new(), Vec::new());
        // The first leader, elected with every master up.
        if workers
            .next_grant(Instant::now() + GRANT_WAIT, |_| true)
            .await
            .is_none()
        {
            failures.push(format!(
                "no leader elected within {} s",
                GRANT_WAIT.as_secs()
            ));
        }
        let act = |f: NodeAction| act(&nodes, f);
        let found = run_rounds(
            rounds,
            (&mut notes, &mut failures),
            async |round, attempt, failures: &mut Vec<String>| {
                let round_start = mono_ns();
                // Master 3 down, and the leader (elected with it up) steps
                // down: the next leader holds exactly masters 1-2.
                act(Box::new(|n| n[2].kill())).await;
                workers.drain();
                let first = elect_anew(&mut workers).await;
                act(Box::new(|n| n[2].restart_keeping_data())).await;
                let first = match first {
                    Ok(Some(first)) => first,
                    Ok(None) => {
                        failures.push(format!(
                            "round {}: no leader elected with 2 of 3 masters up within {} s",
                            round + 1,
                            GRANT_WAIT.as_secs()
                        ));
                        return Try::Broken;
                    }
                    Err(err) => {
                        failures.push(format!("round {}: {err}", round + 1));
                        return Try::Broken;
                    }
                };
                act(Box::new(|n| n[0].restart())).await;
                let start_ns = mono_ns();
                let leads_until = first.at_ns + nanos(renew_deadline);
                let window = Window {
                    label: format!(
                        "round {} (try {}): worker {} elected on masters 1-2; master 3 back with its data, master 1 restarted empty {:.0} ms after the grant",
                        round + 1,
                        attempt + 1,
                        first.worker,
                        ms(start_ns - first.at_ns)
                    ),
                    class: "election_restart_empty".to_owned(),
                    majority_up: true,
                    start_ns,
                    end_ns: leads_until,
                };
                self.log.say(format!("{name}: {}", window.label));
                windows.push(window);
                // The other worker's grant, while the first still leads (at
                // most until its renew deadline); then its term's end lands.
                let wait = Duration::from_nanos(leads_until.saturating_sub(mono_ns()));
                let other = workers
                    .next_grant(Instant::now() + wait, |w| w != first.worker)
                    .await;
                tokio::time::sleep(
                    Duration::from_nanos(leads_until.saturating_sub(mono_ns()))
                        + Duration::from_millis(300),
                )
                .await;
                let holds = workers.holds_since(round_start);
                let overlaps = checker::overlaps(&holds);
                let falling = leaders::falling_terms(&holds);
                if overlaps.is_empty() && falling.is_empty() {
                    return Try::Missed(format!(
                        "one leader at a time ({})",
                        if other.is_some() {
                            "the other worker won after the leader's term"
                        } else {
                            "the other worker never won: the leader's renewal came first"
                        }
                    ));
                }
                Try::Found(format!(
                    "the checker found {} pair(s) of leaders at once (longest {:.0} ms) and {} term(s) not above the one before ({})",
                    overlaps.len(),
                    overlaps.iter().map(|o| o.overlap_ms).fold(0.0, f64::max),
                    falling.len(),
                    falling
                        .iter()
                        .map(|f| format!("{} after {}", f.after_term, f.before_term))
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            },
            "two leaders at once or a falling term",
        )
        .await;
        let result = self
            .finish_rounds((name, false, started), workers, &windows, notes, failures)
            .await;
        (result, found)
    }
}

/// Tells the leader of the out-of-model scenario's two workers to resign
/// and waits for the next grant. Told again each second while no grant
/// comes: a leader whose grant record was not written yet when asked.
async fn elect_anew(workers: &mut Workers) -> std::io::Result<Option<Held>> {
    for _ in 0..GRANT_WAIT.as_secs() {
        for worker in 0..2 {
            if workers.in_hold(worker) {
                workers.tell(worker, "resign").await?;
            }
        }
        let grant = workers
            .next_grant(Instant::now() + Duration::from_secs(1), |_| true)
            .await;
        if grant.is_some() {
            return Ok(grant);
        }
    }
    Ok(None)
}

/// Applies one fault of the in-model schedule; the window is the time it
/// was in force. `None`: no leader was caught inside its term.
async fn inject(
    nodes: &Arc<Vec<RedisNode>>,
    probe: &Probe,
    workers: &mut Workers,
    cast: &mut Cast,
    fault: Fault,
    rng: &mut StdRng,
) -> std::io::Result<Option<Window>> {
    let class = fault.class();
    let window = |label: String, start_ns: u64| Window {
        label,
        class: class.to_owned(),
        majority_up: true,
        start_ns,
        end_ns: mono_ns(),
    };
    Ok(Some(match fault {
        Fault::Master(master) => master.inject(nodes, probe, class).await,
        Fault::LeaderPause { past_lease } => {
            let Some((held, pid)) = stop_in_hold(workers, rng, |_| true).await? else {
                return Ok(None);
            };
            let start = mono_ns();
            hold_open(probe, start, TIMING[0] + past_lease).await;
            let next = workers
                .next_grant(Instant::now(), |w| w != held.worker)
                .await;
            let w = window(
                format!(
                    "SIGSTOP the leader (worker {}) {:.0} ms into its term, for the lease and {} ms; {}",
                    held.worker,
                    ms(start - held.at_ns),
                    past_lease.as_millis(),
                    match next {
                        Some(next) => format!(
                            "worker {} elected {:.0} ms into the pause",
                            next.worker,
                            ms(next.at_ns.saturating_sub(start))
                        ),
                        None => "no leader elected meanwhile".to_owned(),
                    }
                ),
                start,
            );
            signal(pid, Signal::SIGCONT)?;
            w
        }
        Fault::LeaderKill => {
            // A new process takes the dead leader's place.
            let replacement = || {
                cast.next_id += 1;
                cast.next_id - 1
            };
            let Some(killed) =
                kill_in_hold(workers, rng, |_| true, replacement, |_, _| true).await?
            else {
                return Ok(None);
            };
            cast.deaths.push(killed.at_ns);
            window(
                format!(
                    "SIGKILL the leader (worker {}) {:.0} ms into its term; worker {} elected {:.0} ms later (lease {} ms)",
                    killed.held.worker,
                    ms(killed.at_ns - killed.held.at_ns),
                    killed.next.worker,
                    ms(killed.next.at_ns.saturating_sub(killed.at_ns)),
                    TIMING[0].as_millis()
                ),
                killed.at_ns,
            )
        }
        Fault::ClockJump { by } => {
            let Some(shift) = &cast.shift else {
                return Ok(None);
            };
            cast.shifted += by;
            shift.set(cast.shifted)?;
            let start = mono_ns();
            // A lease apart: no key lives through two jumps.
            hold_open(probe, start, TIMING[0]).await;
            window(
                format!(
                    "master 1's clock jumped {} ms forward (drift allowance {} ms; {} ms in all)",
                    by.as_millis(),
                    DRIFT.as_millis(),
                    cast.shifted.as_millis()
                ),
                start,
            )
        }
    }))
}
