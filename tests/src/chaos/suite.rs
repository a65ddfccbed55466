//! The chaos suite: its scenarios, the seeded fault schedule, the report.
//!
//! Scenarios, each with its own worker processes and its own namespace in
//! the protected resource:
//!
//! - **mixed** (in model), on local processes and on compose containers:
//!   four worker processes contend for four keys while a seeded schedule
//!   runs every in-model fault class in turn: a master killed and restarted
//!   empty only after longer than the TTL; a master paused; a master
//!   partitioned (healed with its connections kept or reset); latency and
//!   packet loss on one master; a majority of masters down (killed, paused or
//!   partitioned); a worker process stopped (SIGSTOP) past its validity while
//!   it holds a lock; a worker process killed (SIGKILL) while it holds a
//!   lock, replaced by a new process that wants the same key. A probe
//!   acquires a fresh key every 20 ms: a fault that leaves a majority up
//!   stays in force until the probe was granted a lock (within a cap), and
//!   with a majority down its calls show the no-quorum timing.
//! - **cluster** (in model), on local processes: one of three nodes is a
//!   Redis Cluster of three shards; a shard master is paused, a shard
//!   master killed and restarted (empty, taking its slots back) after the
//!   TTL, a plain master killed and restarted after the TTL (see
//!   `suite/cluster.rs`).
//! - **semaphore** (in model) and **semaphore_restart_empty** (out of
//!   model), on local processes: permits of one semaphore of [`PERMITS`]
//!   under paused, killed and restarted masters and holders paused past
//!   their TTL, counted by the semaphore checker (see `suite/semaphore.rs`).
//! - **election** (in model) and **election_restart_empty** (out of
//!   model), on local processes: worker processes campaign for one
//!   election's name under paused, killed and restarted masters, a leader
//!   stopped past its lease, a leader killed and replaced, and small clock
//!   jumps; the checker finds no two leaders at once, terms rising and no
//!   stale write, and times failovers; out of model, a master restarted
//!   empty under a leader elected on exactly a quorum gives two leaders,
//!   which the checker must find every round (see `suite/election.rs`).
//! - **fenced_restart** and **fenced_restart_counter_only**, on local
//!   processes: two workers take one fenced lock and write to the protected
//!   resource with its token; the holder is stopped (SIGSTOP) past its TTL
//!   and every master is restarted empty meanwhile, the other worker is
//!   granted the lock and writes, then the stopped holder resumes and sends
//!   its late write. With the tokens floored by the servers' clocks no stale
//!   write is accepted and no token goes back (judged like an in-model
//!   scenario: the fencing promise covers a quorum that lost every byte,
//!   though mutual exclusion does not); with the planted bug
//!   `TokenFromCounterOnly` the tokens start again from 1 and the checker
//!   must find the token that went back in every round (see
//!   `suite/fenced.rs`).
//! - **sharp** scenarios, one fault each, with two workers and a long hold:
//!   two masters are down while one worker gets the lock, so it holds it on
//!   exactly a quorum (masters 1-3); the two come back, and master 1 is then
//!   - restarted only after the TTL (**restart_delayed**, in model: no
//!     overlap),
//!   - restarted empty at once (**restart_empty**, out of model), or
//!   - has its clock jumped forward past the TTL (**clock_jump**, out of
//!     model).
//!
//!   In the last two the other worker gets a quorum (masters 1, 4, 5) while
//!   the first still holds the lock: the checker must report the overlap,
//!   in every round. A round in which the other worker was too slow to win
//!   the lock in time (nothing to find) is tried again, a few times.
//!
//! What fails the run is only what a broken lock or a broken suite does: an
//! overlap, a stale write or a token (a term) not above the one before in
//! model, a
//! lock won without a majority, a window with a majority up and no grant at
//! all, an acquire with a majority down that is not a no-quorum error or
//! takes over ten per-node timeouts, an out-of-model round the checker does
//! not catch, a lost hold record, a crash. Counts and timings are printed.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

mod cluster;
mod election;
mod fenced;
mod instruments;
mod nodes;
mod report;
mod schedule;
mod semaphore;
mod victims;

pub use election::ElectionSummary;
pub use fenced::FencedSummary;
pub use instruments::{LagMonitor, STALL_THRESHOLD};
pub use report::render;
pub use semaphore::{PERMITS, SemaphoreSummary};

use instruments::{Probe, Workers, signal};
use schedule::{Method, Planned, ScheduledFault, Sharp, schedule};
use victims::{kill_in_hold, stop_in_hold};

use super::checker::{self, Analysis, Records, Verdict, Window, WindowReport};
use super::clock::{mono_ns, ms, nanos};
use super::clock_shift::ClockShift;
use super::masters::Masters;
use super::proxy::{Fault, Proxy};
use super::record::{Attempt, Record};
use super::worker;

/// The TTL of the mixed scenarios' locks.
pub const MIXED_TTL: Duration = Duration::from_millis(400);

/// The per-node timeout of every client in the suite.
pub const NODE_TIMEOUT: Duration = Duration::from_millis(25);

/// With a majority down, a probe's acquire must fail within this many
/// per-node timeouts. It takes about one; the bound is ten so that only a
/// client that waits out something it should not (a response timeout, a
/// TTL, a retry schedule) fails the run, never a busy machine whose timers
/// fire late. How long it really took is a printed figure.
pub const GROSS_FACTOR: u32 = 10;

/// How long a fault with a majority up stays in force, past its planned
/// length, waiting for the probe to be granted a lock; a window that ends
/// without any grant fails the run.
const GRANT_CAP: Duration = Duration::from_secs(10);

/// How many times a sharp round is tried until the second worker's grant
/// lands inside the first worker's hold (out of model: the overlap the
/// checker must then find; in model: the grant the fault must not allow).
const SHARP_TRIES: usize = 4;

/// How long after a killed master is back before the next fault: longer
/// than the client's longest reconnection backoff (2 s).
const RECONNECT_ALLOWANCE: Duration = Duration::from_millis(2200);

/// How long the suite waits for a grant announcement in a sharp round.
const GRANT_WAIT: Duration = Duration::from_secs(10);

/// CI (`make test`) or full (`make chaos`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Shorter schedules.
    Ci,
    /// Longer schedules and more rounds.
    Full,
}

impl Mode {
    fn mixed_cycles(self, compose: bool) -> usize {
        match (self, compose) {
            (Mode::Ci, false) => 5,
            (Mode::Ci, true) => 3,
            (Mode::Full, false) => 12,
            (Mode::Full, true) => 8,
        }
    }

    fn cluster_cycles(self) -> usize {
        match self {
            Mode::Ci => 2,
            Mode::Full => 5,
        }
    }

    fn semaphore_cycles(self) -> usize {
        match self {
            Mode::Ci => 1,
            Mode::Full => 3,
        }
    }

    fn semaphore_rounds(self) -> usize {
        match self {
            Mode::Ci => 1,
            Mode::Full => 2,
        }
    }

    fn election_cycles(self) -> usize {
        match self {
            Mode::Ci => 2,
            Mode::Full => 5,
        }
    }

    fn election_rounds(self) -> usize {
        match self {
            Mode::Ci => 2,
            Mode::Full => 4,
        }
    }

    fn fenced_rounds(self) -> usize {
        match self {
            Mode::Ci => 3,
            Mode::Full => 6,
        }
    }

    fn sharp_rounds(self, compose: bool) -> usize {
        match (self, compose) {
            (Mode::Ci, false) => 2,
            (Mode::Ci, true) => 1,
            (Mode::Full, false) => 4,
            (Mode::Full, true) => 2,
        }
    }
}

/// The compose project to break, started by `scripts/chaos.sh`.
#[derive(Clone, Debug)]
pub struct ComposeSpec {
    /// The compose project name.
    pub project: String,
    /// The published loopback ports of `redis1`..`redisN`.
    pub ports: Vec<u16>,
}

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// CI or full.
    pub mode: Mode,
    /// Seeds the schedule and every worker.
    pub seed: u64,
    /// Run the process-level part.
    pub process: bool,
    /// Run the compose part on this project.
    pub compose: Option<ComposeSpec>,
    /// Where the workers' files go (emptied first).
    pub out_dir: PathBuf,
    /// The `chaos-worker` binary.
    pub worker_exe: PathBuf,
    /// Run only these of [`SCENARIOS`] (`None`: all of them).
    pub only: Option<Vec<String>>,
}

/// The scenarios [`Options::only`] names: `semaphore` and `election` each
/// run their in-model and out-of-model scenarios, `fenced_restart` its
/// correct and its planted one (`fenced_restart_counter_only`).
pub const SCENARIOS: [&str; 9] = [
    "mixed",
    "restart_delayed",
    "restart_empty",
    "restart_empty_voting_at_once",
    "clock_jump",
    "cluster",
    "semaphore",
    "election",
    "fenced_restart",
];

impl Options {
    /// Whether scenario `name` (one of [`SCENARIOS`]) runs.
    pub fn runs(&self, name: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|only| only.iter().any(|n| n == name))
    }
}

/// What one scenario found.
#[derive(Clone, Debug)]
pub struct ScenarioResult {
    /// `process/mixed`, `compose/restart_empty`, ...
    pub name: String,
    /// Whether its faults stay inside Redlock's model.
    pub in_model: bool,
    /// Safety and fencing.
    pub analysis: Analysis,
    /// Liveness per fault window.
    pub windows: Vec<WindowReport>,
    /// Faults injected.
    pub faults: usize,
    /// The probe's calls.
    pub probes: Vec<Attempt>,
    /// Remarks for the report (mechanisms used, skipped parts).
    pub notes: Vec<String>,
    /// Why the scenario failed, if it did.
    pub failures: Vec<String>,
    /// Wall time.
    pub seconds: f64,
}

/// Everything, and the verdict.
#[derive(Debug)]
pub struct Report {
    /// Every scenario's result.
    pub scenarios: Vec<ScenarioResult>,
    /// Parts not run, and why.
    pub skipped: Vec<String>,
    /// Failures across the run.
    pub failures: Vec<String>,
    /// The semaphore scenarios' figures, when they ran.
    pub semaphore: Option<SemaphoreSummary>,
    /// The election scenarios' figures, when they ran.
    pub election: Option<ElectionSummary>,
    /// The fenced-restart scenarios' figures, when they ran.
    pub fenced: Option<FencedSummary>,
}

impl Report {
    /// Locks granted in model.
    pub fn granted(&self) -> usize {
        self.in_model().map(|s| s.analysis.granted()).sum()
    }

    /// Overlapping holds in model.
    pub fn overlaps(&self) -> usize {
        self.in_model().map(|s| s.analysis.overlaps.len()).sum()
    }

    /// Stale writes the resource accepted, in model.
    pub fn stale_writes_accepted(&self) -> usize {
        self.in_model()
            .map(|s| s.analysis.stale_writes_accepted)
            .sum()
    }

    /// Faults injected in model.
    pub fn in_model_faults(&self) -> usize {
        self.in_model().map(|s| s.faults).sum()
    }

    /// Violations found by the out-of-model scenarios: overlapping holds,
    /// stale writes accepted and tokens that went back.
    pub fn out_of_model_violations(&self) -> usize {
        self.scenarios
            .iter()
            .filter(|s| !s.in_model)
            .map(|s| {
                let a = &s.analysis;
                a.overlaps.len() + a.stale_writes_accepted + a.falling_tokens.len()
            })
            .sum()
    }

    fn in_model(&self) -> impl Iterator<Item = &ScenarioResult> {
        self.scenarios.iter().filter(|s| s.in_model)
    }

    /// The last line of the suite's output.
    pub fn summary_line(&self) -> String {
        format!(
            "chaos summary: granted={} overlaps={} stale_writes_accepted={} in_model_faults={} out_of_model_violations_found={}",
            self.granted(),
            self.overlaps(),
            self.stale_writes_accepted(),
            self.in_model_faults(),
            self.out_of_model_violations()
        )
    }
}

/// Log lines with the time since the suite started.
struct Log {
    start: Instant,
}

impl Log {
    fn say(&self, message: impl AsRef<str>) {
        println!(
            "[{:>6.1} s] {}",
            self.start.elapsed().as_secs_f64(),
            message.as_ref()
        );
    }
}

/// Runs the suite.
pub async fn run(options: Options) -> Report {
    let log = Log {
        start: Instant::now(),
    };
    let _ = std::fs::remove_dir_all(&options.out_dir);
    std::fs::create_dir_all(&options.out_dir).expect("the output dir can be created");
    let resource = Arc::new(blocking(crate::RedisNode::start).await);
    let mut rng = StdRng::seed_from_u64(options.seed);
    let mut scenarios = Vec::new();
    let mut skipped = Vec::new();
    let mut semaphore = None;
    let mut election = None;
    let mut fenced = None;

    if options.process {
        let ctx = Context {
            options: &options,
            log: &log,
            resource_url: resource.url(),
            part: "process",
        };
        // Every scenario's seed is drawn whether it runs or not: a seed
        // replays the same scenarios whatever `only` leaves out.
        let seed = rng.random();
        if options.runs("mixed") {
            let masters = Arc::new(blocking(|| Masters::local(5, 0, vec![])).await);
            scenarios.push(
                ctx.mixed(masters, seed, options.mode.mixed_cycles(false))
                    .await,
            );
        }
        let rounds = options.mode.sharp_rounds(false);
        for variant in [
            Sharp::RestartDelayed,
            Sharp::RestartEmpty,
            Sharp::RestartEmptyVotingAtOnce,
        ] {
            let seed = rng.random();
            if options.runs(variant.name()) {
                let masters = Arc::new(blocking(|| Masters::local(5, 0, vec![])).await);
                scenarios.push(ctx.sharp(masters, variant, rounds, None, seed).await);
            }
        }
        let seed = rng.random();
        if options.runs(Sharp::ClockJump.name()) {
            let shim_dir = options.out_dir.join("clock-shift");
            match ClockShift::build(&shim_dir) {
                Ok(shift) => {
                    let env = shift.env();
                    let masters = Arc::new(blocking(move || Masters::local(5, 1, env)).await);
                    scenarios.push(
                        ctx.sharp(
                            masters,
                            Sharp::ClockJump,
                            rounds,
                            Some(Arc::new(shift)),
                            seed,
                        )
                        .await,
                    );
                }
                Err(err) => skipped.push(format!("process/clock_jump: {err}")),
            }
        }
        let seed = rng.random();
        if options.runs("cluster") {
            scenarios.push(ctx.cluster(seed, options.mode.cluster_cycles()).await);
        }
        let seeds: [u64; 2] = [rng.random(), rng.random()];
        if options.runs("semaphore") {
            let (in_model, most) = ctx
                .semaphore(seeds[0], options.mode.semaphore_cycles())
                .await;
            let rounds = options.mode.semaphore_rounds();
            let (out_of_model, found) = ctx.semaphore_restart_empty(seeds[1], rounds).await;
            semaphore = Some(SemaphoreSummary {
                permits: PERMITS,
                grants: in_model.analysis.granted(),
                max_concurrent_holders: most,
                stale_writes_accepted: in_model.analysis.stale_writes_accepted,
                rounds,
                found,
            });
            scenarios.extend([in_model, out_of_model]);
        }
        let seeds: [u64; 2] = [rng.random(), rng.random()];
        if options.runs("election") {
            let (in_model, failover_ms) =
                ctx.election(seeds[0], options.mode.election_cycles()).await;
            let rounds = options.mode.election_rounds();
            let (out_of_model, found) = ctx.election_restart_empty(seeds[1], rounds).await;
            election = Some(ElectionSummary {
                terms: in_model.analysis.granted(),
                overlaps: in_model.analysis.overlaps.len(),
                stale_writes_accepted: in_model.analysis.stale_writes_accepted,
                failover_ms,
                rounds,
                found,
            });
            scenarios.extend([in_model, out_of_model]);
        }
        let seeds: [u64; 2] = [rng.random(), rng.random()];
        if options.runs("fenced_restart") {
            let rounds = options.mode.fenced_rounds();
            let (correct, _) = ctx.fenced_restart(seeds[0], rounds, None).await;
            let (planted, found) = ctx
                .fenced_restart(seeds[1], rounds, Some(fenced::PLANTED))
                .await;
            fenced = Some(FencedSummary {
                rounds,
                stale_writes_accepted: correct.analysis.stale_writes_accepted,
                falling_tokens: correct.analysis.falling_tokens.len(),
                late_writes_rejected: correct.analysis.superseded_writes_rejected,
                planted_rounds: rounds,
                planted_found: found,
            });
            scenarios.extend([correct, planted]);
        }
    } else {
        skipped.push("process part: not asked for".to_owned());
    }

    match &options.compose {
        Some(spec) if !(options.runs("mixed") || options.runs("restart_empty")) => skipped.push(
            format!("compose part ({}): its scenarios are not asked for", spec.project),
        ),
        Some(spec) => {
            let ctx = Context {
                options: &options,
                log: &log,
                resource_url: resource.url(),
                part: "compose",
            };
            let (project, ports) = (spec.project.clone(), spec.ports.clone());
            let seeds: [u64; 2] = [rng.random(), rng.random()];
            match blocking(move || Masters::compose(&project, &ports)).await {
                Ok(masters) => {
                    let masters = Arc::new(masters);
                    if options.runs("mixed") {
                        scenarios.push(
                            ctx.mixed(
                                Arc::clone(&masters),
                                seeds[0],
                                options.mode.mixed_cycles(true),
                            )
                            .await,
                        );
                    }
                    if options.runs("restart_empty") {
                        scenarios.push(
                            ctx.sharp(
                                masters,
                                Sharp::RestartEmpty,
                                options.mode.sharp_rounds(true),
                                None,
                                seeds[1],
                            )
                            .await,
                        );
                    }
                }
                Err(err) => skipped.push(format!("compose part: {err}")),
            }
        }
        None => skipped.push(
            "compose part: no compose project given (scripts/chaos.sh starts one where Docker runs)"
                .to_owned(),
        ),
    }

    // How many locks were granted is a figure of the machine's speed, not a
    // verdict on the lock: it is printed, never judged.
    let failures: Vec<String> = scenarios
        .iter()
        .flat_map(|s| s.failures.iter().map(move |f| format!("{}: {f}", s.name)))
        .collect();
    Report {
        scenarios,
        skipped,
        failures,
        semaphore,
        election,
        fenced,
    }
}

/// Runs `f` on Tokio's blocking pool; a panic there is a panic here.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(f).await {
        Ok(value) => value,
        Err(err) => std::panic::resume_unwind(err.into_panic()),
    }
}

/// Writes one JSON object per line (for a look after the run; best effort).
fn save_lines<T: serde::Serialize>(path: &Path, items: impl IntoIterator<Item = T>) {
    let mut text = String::new();
    for item in items {
        if let Ok(line) = serde_json::to_string(&item) {
            text.push_str(&line);
            text.push('\n');
        }
    }
    let _ = std::fs::write(path, text);
}

/// A fault action on the masters, run on the blocking pool.
type Action = Box<dyn FnOnce(&Masters) -> std::io::Result<()> + Send>;

async fn act(masters: &Arc<Masters>, action: Action) -> std::io::Result<()> {
    let masters = Arc::clone(masters);
    blocking(move || action(&masters)).await
}

/// The worker that gets stopped and killed, and the id its replacement
/// gets.
struct Victim {
    id: u32,
    next_id: u32,
}

/// Keeps a fault that leaves a majority up in force for `length`, then until
/// the probe was granted a lock it asked for after the fault took effect
/// (at most [`GRANT_CAP`] more): the window is then judged on a grant,
/// however slow the machine.
async fn hold_open(probe: &Probe, start_ns: u64, length: Duration) {
    tokio::time::sleep(length).await;
    let cap = Instant::now() + GRANT_CAP;
    while !probe.granted_since(start_ns) && Instant::now() < cap {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// With a majority down, the bound on a probe's time: [`GROSS_FACTOR`]
/// per-node timeouts, in ms.
pub fn gross_no_quorum_ms() -> f64 {
    ms(nanos(NODE_TIMEOUT * GROSS_FACTOR))
}

/// What [`Context::finish_run`] hands back to build a scenario's result.
struct Finished {
    analysis: Analysis,
    reports: Vec<WindowReport>,
    probes: Vec<Attempt>,
    /// Every worker's records.
    records: Records,
}

struct Context<'a> {
    options: &'a Options,
    log: &'a Log,
    resource_url: String,
    part: &'static str,
}

impl Context<'_> {
    fn dir(&self, scenario: &str) -> PathBuf {
        let dir = self
            .options
            .out_dir
            .join(format!("{}-{scenario}", self.part));
        std::fs::create_dir_all(&dir).expect("scenario dir");
        dir
    }

    #[allow(clippy::too_many_arguments)]
    fn worker_config(
        &self,
        dir: &Path,
        scenario: &str,
        worker: u32,
        urls: &[String],
        ttl: Duration,
        seed: u64,
        run_for: Duration,
    ) -> worker::Config {
        worker::Config {
            worker,
            // Shared by every worker of the scenario: one token history per key.
            scenario: format!("{}-{scenario}-{}", self.part, self.options.seed),
            urls: urls.to_vec(),
            resource_url: self.resource_url.clone(),
            keys: vec!["k0".into(), "k1".into(), "k2".into(), "k3".into()],
            tasks: 3,
            ttl_ms: ttl.as_millis() as u64,
            node_timeout_ms: NODE_TIMEOUT.as_millis() as u64,
            fencing: true,
            permits: None,
            try_lock_share: 0.5,
            keep_alive_share: 0.0,
            extend_share: 0.02,
            hold_ms: (0, 1),
            idle_ms: (0, 2),
            run_ms: run_for.as_millis() as u64,
            announce: false,
            seed,
            out: dir.join(format!("worker-{worker}.jsonl")),
            election: None,
            planted: None,
        }
    }

    /// The mixed in-model scenario.
    async fn mixed(&self, masters: Arc<Masters>, seed: u64, cycles: usize) -> ScenarioResult {
        let started = Instant::now();
        let name = format!("{}/mixed", self.part);
        let dir = self.dir("mixed");
        let mut rng = StdRng::seed_from_u64(seed);
        let mut victim = Victim { id: 0, next_id: 4 };
        let plan = schedule(&mut rng, cycles, masters.len());
        // An upper bound for the workers and the probe, should the
        // orchestrator never get to stop them.
        let run_for =
            (Duration::from_secs(6) + GRANT_CAP) * plan.len() as u32 + Duration::from_secs(60);

        let mut proxies = Vec::new();
        for i in 0..masters.len() {
            let proxy = Proxy::start(masters.addr(i), rng.random())
                .await
                .expect("a proxy binds a loopback port");
            proxies.push(proxy);
        }
        let urls: Vec<String> = proxies.iter().map(Proxy::url).collect();
        let mut notes = vec![format!(
            "{} masters behind fault-injecting proxies; TTL {} ms, per-node timeout {} ms; latency via {}",
            masters.kind(),
            MIXED_TTL.as_millis(),
            NODE_TIMEOUT.as_millis(),
            if masters.netem() {
                "tc netem"
            } else {
                "the proxy (no sch_netem in this kernel)"
            }
        )];
        self.log.say(format!(
            "{name}: seed {seed}, {} faults, 4 worker processes",
            plan.len()
        ));

        let mut configs = Vec::new();
        for worker in 0..4u32 {
            let mut config = self.worker_config(
                &dir,
                "mixed",
                worker,
                &urls,
                MIXED_TTL,
                rng.random(),
                run_for,
            );
            if worker == victim.id {
                // The client that gets stopped: one task, long holds on a
                // key the others want too, half of them kept alive.
                config.tasks = 1;
                config.keys = vec!["k0".into()];
                config.hold_ms = (120, 240);
                config.idle_ms = (40, 80);
                config.keep_alive_share = 0.5;
                config.extend_share = 0.3;
                config.announce = true;
            }
            configs.push(config);
        }
        let (probe, monitor, mut workers) = self
            .start_run(&name, &dir, configs, (&urls, MIXED_TTL), run_for)
            .await;

        let mut failures = Vec::new();
        let windows = self
            .run_schedule(
                (&name, &plan),
                &mut rng,
                (&mut notes, &mut failures),
                async |_, fault, rng: &mut StdRng| {
                    let victim = &mut victim;
                    self.inject(&masters, &proxies, &mut workers, &probe, victim, fault, rng)
                        .await
                },
                async || {
                    let masters = Arc::clone(&masters);
                    blocking(move || masters.restore_all()).await;
                    for proxy in &proxies {
                        proxy.set(Fault::None);
                    }
                },
                |_| "the victim was never caught inside a hold".to_owned(),
            )
            .await;
        let faults = windows.len();
        let Finished {
            analysis,
            reports,
            probes,
            ..
        } = self
            .finish_run(
                &dir,
                (probe, monitor, workers),
                &windows,
                &mut notes,
                &mut failures,
            )
            .await;
        let client_pauses = windows.iter().filter(|w| w.class == "client_pause").count();
        if client_pauses > 0 && analysis.paused_past_validity == 0 {
            failures.push(
                "no client pause landed inside a hold: the paused-client check did not run".into(),
            );
        }
        let client_kills = windows.iter().filter(|w| w.class == "client_kill").count();
        if client_kills > analysis.open_holds {
            failures.push(format!(
                "{client_kills} holders killed mid-hold, but only {} open holds in the records: a hold record was lost",
                analysis.open_holds
            ));
        }
        drop(proxies);
        ScenarioResult {
            name,
            in_model: true,
            analysis,
            windows: reports,
            faults,
            probes,
            notes,
            failures,
            seconds: started.elapsed().as_secs_f64(),
        }
    }

    /// Starts a run: its worker processes, the machine's lag monitor and
    /// the probe (a fresh key with `ttl` on `urls` every 20 ms), and lets
    /// them settle for a second.
    async fn start_run(
        &self,
        name: &str,
        dir: &Path,
        configs: Vec<worker::Config>,
        (urls, ttl): (&[String], Duration),
        run_for: Duration,
    ) -> (Probe, LagMonitor, Workers) {
        let workers = Workers::spawn(&self.options.worker_exe, dir, configs).await;
        let monitor = LagMonitor::start(run_for);
        let probe = Probe::start(urls.to_vec(), ttl, name.to_owned(), run_for);
        tokio::time::sleep(Duration::from_secs(1)).await;
        (probe, monitor, workers)
    }

    /// Ends a run of rounds (the sharp and out-of-model scenarios: no
    /// probe): stops the workers and judges their records (the in-model
    /// checks for an in-model one) into the scenario's result.
    async fn finish_rounds(
        &self,
        (name, in_model, started): (String, bool, Instant),
        workers: Workers,
        windows: &[Window],
        notes: Vec<String>,
        mut failures: Vec<String>,
    ) -> ScenarioResult {
        let (records, problems) = workers.stop().await;
        failures.extend(problems);
        let records: Records = records.into_iter().collect();
        let analysis = records.analyze();
        if in_model {
            self.check_in_model(&analysis, &mut failures);
        }
        ScenarioResult {
            name,
            in_model,
            analysis,
            windows: checker::liveness(windows, &records, &[], &[]),
            faults: windows.len(),
            probes: vec![],
            notes,
            failures,
            seconds: started.elapsed().as_secs_f64(),
        }
    }

    /// Ends a run: stops its probe, lag monitor and workers, saves what
    /// they saw in `dir`, and judges it (liveness of every window, the
    /// in-model checks) into `notes` and `failures`.
    async fn finish_run(
        &self,
        dir: &Path,
        (probe, monitor, workers): (Probe, LagMonitor, Workers),
        windows: &[Window],
        notes: &mut Vec<String>,
        failures: &mut Vec<String>,
    ) -> Finished {
        // The last holds and probes of the run land first.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let probes = probe.stop().await;
        let stalls = monitor.stop().await;
        save_lines(
            &dir.join("probe.jsonl"),
            probes.iter().cloned().map(Record::Attempt),
        );
        save_lines(&dir.join("faults.jsonl"), windows.iter());
        save_lines(&dir.join("stalls.jsonl"), stalls.iter());
        let (records, problems) = workers.stop().await;
        failures.extend(problems);
        let records: Records = records.into_iter().collect();
        let reports = checker::liveness(windows, &records, &probes, &stalls);
        let analysis = records.analyze();
        self.judge_liveness(&reports, &stalls, notes, failures);
        self.check_in_model(&analysis, failures);
        Finished {
            analysis,
            reports,
            probes,
            records,
        }
    }

    /// Notes the machine's stalls, and fails every window whose liveness
    /// verdict is a failure.
    fn judge_liveness(
        &self,
        reports: &[WindowReport],
        stalls: &[(u64, u64)],
        notes: &mut Vec<String>,
        failures: &mut Vec<String>,
    ) {
        let max_probe_ms = gross_no_quorum_ms();
        let stalled: u64 = stalls.iter().map(|(s, e)| e - s).sum();
        if stalled > 0 {
            notes.push(format!(
                        "the machine stalled {} times for {:.0} ms in all (threads not scheduled for over {} ms): probes during stalls are left out of the timings",
                        stalls.len(),
                        ms(stalled),
                        STALL_THRESHOLD.as_millis()
                ));
        }
        for report in reports {
            let verdict = report.verdict(max_probe_ms);
            if verdict == Verdict::Starved {
                notes.push(format!(
                    "no verdict on {} ({}): the machine stalled {:.0} ms of it",
                    report.window.label, report.window.class, report.stalled_ms
                ));
            }
            if verdict == Verdict::Failed {
                failures.push(format!(
                            "liveness: {} ({}): grants {}, probes {}/{} granted, {} no-quorum, max {:.1} ms (bound {max_probe_ms:.0} ms); worker calls {}/{} no-quorum, {} held; {} grants without a majority",
                            report.window.label,
                            report.window.class,
                            report.grants,
                            report.probes_granted,
                            report.probes,
                            report.probes_no_quorum,
                            report.probe_max_ms,
                            report.worker_no_quorum,
                            report.worker_attempts,
                            report.worker_held,
                            report.grants_without_majority
                        ));
            }
        }
    }

    fn check_in_model(&self, analysis: &Analysis, failures: &mut Vec<String>) {
        for overlap in analysis.overlaps.iter().take(5) {
            failures.push(format!(
                "SAFETY: overlapping holds of {}: worker {} hold {:#x} and worker {} hold {:#x}, {:.1} ms",
                overlap.key,
                overlap.first.worker,
                overlap.first.hold,
                overlap.second.worker,
                overlap.second.hold,
                overlap.overlap_ms
            ));
        }
        if analysis.overlaps.len() > 5 {
            failures.push(format!(
                "SAFETY: {} overlapping holds in all",
                analysis.overlaps.len()
            ));
        }
        if analysis.stale_writes_accepted > 0 {
            failures.push(format!(
                "FENCING: the resource accepted {} stale writes",
                analysis.stale_writes_accepted
            ));
        }
        for falling in analysis.falling_tokens.iter().take(5) {
            failures.push(format!(
                "FENCING: {}: worker {} hold {:#x} granted with token {} after worker {} hold {:#x} with token {}: the token went back",
                falling.key,
                falling.after.worker,
                falling.after.hold,
                falling.after_term,
                falling.before.worker,
                falling.before.hold,
                falling.before_term
            ));
        }
        if analysis.falling_tokens.len() > 5 {
            failures.push(format!(
                "FENCING: {} tokens not above the one before in all",
                analysis.falling_tokens.len()
            ));
        }
        if analysis.paused_and_noticed < analysis.paused_past_validity {
            failures.push(format!(
                "{} of {} clients paused past their validity did not notice the loss",
                analysis.paused_past_validity - analysis.paused_and_noticed,
                analysis.paused_past_validity
            ));
        }
    }

    /// Applies one fault, waits its length, undoes it; the window is the
    /// time it was in force.
    #[allow(clippy::too_many_arguments)]
    async fn inject(
        &self,
        masters: &Arc<Masters>,
        proxies: &[Proxy],
        workers: &mut Workers,
        probe: &Probe,
        victim: &mut Victim,
        fault: &Planned,
        rng: &mut StdRng,
    ) -> std::io::Result<Option<Window>> {
        let class = fault.class().to_owned();
        let act = |f: Action| act(masters, f);
        let window = |label: String, majority_up: bool, start_ns: u64| Window {
            label,
            class: class.clone(),
            majority_up,
            start_ns,
            end_ns: mono_ns(),
        };
        Ok(Some(match *fault {
            Planned::NodeKill { node, down } => {
                act(Box::new(move |m| m.kill(node))).await?;
                let start = mono_ns();
                hold_open(probe, start, down).await;
                let w = window(
                    format!(
                        "kill master {}, restart empty after {:.0} ms",
                        node + 1,
                        ms(mono_ns() - start)
                    ),
                    true,
                    start,
                );
                act(Box::new(move |m| m.restart(node))).await?;
                w
            }
            Planned::NodePause { node, length } => {
                act(Box::new(move |m| m.pause(node))).await?;
                let start = mono_ns();
                hold_open(probe, start, length).await;
                let w = window(format!("pause master {}", node + 1), true, start);
                act(Box::new(move |m| m.resume(node))).await?;
                w
            }
            Planned::Partition {
                node,
                length,
                reset,
            } => {
                let at_node = matches!(**masters, Masters::Compose { .. });
                if at_node {
                    act(Box::new(move |m| m.partition(node).map(drop))).await?;
                } else {
                    proxies[node].set(Fault::Blackhole);
                }
                let start = mono_ns();
                hold_open(probe, start, length).await;
                let how = if at_node {
                    "iptables DROP in its netns"
                } else {
                    "proxy blackhole"
                };
                let w = window(
                    format!(
                        "partition master {} ({how}), heal {}",
                        node + 1,
                        if reset {
                            "resetting connections"
                        } else {
                            "keeping connections"
                        }
                    ),
                    true,
                    start,
                );
                if at_node {
                    act(Box::new(move |m| m.heal(node))).await?;
                } else {
                    proxies[node].set(Fault::None);
                }
                if reset {
                    proxies[node].reset_connections();
                }
                w
            }
            Planned::SlowLossy {
                node,
                length,
                latency,
                jitter,
                loss,
            } => {
                let by_netem = masters.netem();
                if by_netem {
                    act(Box::new(move |m| m.delay(node, latency, jitter).map(drop))).await?;
                }
                let lost_at_node = matches!(**masters, Masters::Compose { .. });
                if lost_at_node {
                    act(Box::new(move |m| m.lose_packets(node, loss).map(drop))).await?;
                }
                proxies[node].set(Fault::Slow {
                    latency: if by_netem { Duration::ZERO } else { latency },
                    jitter: if by_netem { Duration::ZERO } else { jitter },
                    stall_rate: if lost_at_node { 0.0 } else { loss },
                    stall: Duration::from_millis(200),
                });
                let start = mono_ns();
                hold_open(probe, start, length).await;
                let w = window(
                    format!(
                        "master {}: +{:.1}±{:.1} ms latency ({}), {:.0}% loss ({})",
                        node + 1,
                        latency.as_secs_f64() * 1e3,
                        jitter.as_secs_f64() * 1e3,
                        if by_netem { "netem" } else { "proxy" },
                        loss * 100.0,
                        if lost_at_node {
                            "iptables statistic DROP"
                        } else {
                            "proxy: 200 ms retransmission stalls"
                        }
                    ),
                    true,
                    start,
                );
                proxies[node].set(Fault::None);
                if lost_at_node {
                    act(Box::new(move |m| m.stop_losing_packets(node, loss))).await?;
                }
                if by_netem {
                    act(Box::new(move |m| m.clear_delay(node))).await?;
                }
                w
            }
            Planned::MajorityDown { ref nodes, length } => {
                let compose = matches!(**masters, Masters::Compose { .. });
                let nodes = nodes.clone();
                let down = nodes.clone();
                act(Box::new(move |m| {
                    for (node, method) in down {
                        match method {
                            Method::Kill => m.kill(node)?,
                            Method::Pause => m.pause(node)?,
                            Method::Partition => {
                                m.partition(node)?;
                            }
                        }
                    }
                    Ok(())
                }))
                .await?;
                if !compose {
                    for &(node, method) in &nodes {
                        if method == Method::Partition {
                            proxies[node].set(Fault::Blackhole);
                        }
                    }
                }
                let start = mono_ns();
                tokio::time::sleep(length).await;
                let what: Vec<String> = nodes
                    .iter()
                    .map(|(node, method)| format!("{} {:?}", node + 1, method).to_lowercase())
                    .collect();
                let w = window(
                    format!("majority down: masters {}", what.join(", ")),
                    false,
                    start,
                );
                for &(node, method) in &nodes {
                    if method == Method::Partition && !compose {
                        proxies[node].set(Fault::None);
                    }
                }
                act(Box::new(move |m| {
                    for (node, method) in nodes {
                        match method {
                            Method::Kill => m.restart(node)?,
                            Method::Pause => m.resume(node)?,
                            Method::Partition => m.heal(node)?,
                        }
                    }
                    Ok(())
                }))
                .await?;
                w
            }
            Planned::ClientPause { length } => {
                // Land inside a hold: the victim's work lasts 120 ms or more.
                let id = victim.id;
                let Some((held, pid)) = stop_in_hold(workers, rng, |w| w == id).await? else {
                    return Ok(None);
                };
                let start = mono_ns();
                hold_open(probe, start, length).await;
                let w = window(
                    format!(
                        "SIGSTOP worker {} {:.0} ms into a hold",
                        victim.id,
                        ms(start - held.at_ns)
                    ),
                    true,
                    start,
                );
                signal(pid, Signal::SIGCONT)?;
                w
            }
            Planned::ClientKill => {
                // A new process takes the victim's part (and its key).
                let id = victim.id;
                let replacement = || {
                    victim.id = victim.next_id;
                    victim.next_id += 1;
                    victim.id
                };
                // The lock comes free once the dead holder's validity ends
                // (the checker verifies nobody got it before).
                let Some(killed) =
                    kill_in_hold(workers, rng, |w| w == id, replacement, |new, w| w == new).await?
                else {
                    return Ok(None);
                };
                window(
                    format!(
                        "SIGKILL worker {id} {:.0} ms into a hold; its key granted to worker {} {:.0} ms later (TTL {} ms)",
                        ms(killed.at_ns - killed.held.at_ns),
                        killed.next.worker,
                        ms(killed.next.at_ns.saturating_sub(killed.at_ns)),
                        MIXED_TTL.as_millis()
                    ),
                    true,
                    killed.at_ns,
                )
            }
        }))
    }

    /// A sharp scenario: see the module docs.
    async fn sharp(
        &self,
        masters: Arc<Masters>,
        variant: Sharp,
        rounds: usize,
        shift: Option<Arc<ClockShift>>,
        seed: u64,
    ) -> ScenarioResult {
        let started = Instant::now();
        let name = format!("{}/{}", self.part, variant.name());
        let dir = self.dir(variant.name());
        let compose = matches!(*masters, Masters::Compose { .. });
        // A hold long enough for the other worker to reconnect to the
        // restarted masters (backoff up to 2 s) and win them while the first
        // still holds; Docker actions take hundreds of ms more.
        let (ttl, hold) = if compose {
            (Duration::from_secs(7), Duration::from_millis(5500))
        } else {
            (Duration::from_millis(3500), Duration::from_millis(2500))
        };
        let urls = masters.urls();
        let mut rng = StdRng::seed_from_u64(seed);
        let tries = if variant.in_model() { 1 } else { SHARP_TRIES };
        let run_for =
            (ttl * 3 + Duration::from_secs(10)) * (rounds * tries) as u32 + Duration::from_secs(60);
        let configs = (0..2u32)
            .map(|worker| {
                let mut config = self.worker_config(
                    &dir,
                    variant.name(),
                    worker,
                    &urls,
                    ttl,
                    rng.random(),
                    run_for,
                );
                config.tasks = 1;
                config.keys = vec!["sharp".into()];
                config.try_lock_share = 1.0;
                config.extend_share = 0.0;
                let hold_ms = hold.as_millis() as u64;
                config.hold_ms = (hold_ms, hold_ms);
                config.idle_ms = (2, 4);
                config.announce = true;
                config.planted = variant.planted().map(str::to_owned);
                config
            })
            .collect();
        self.log.say(format!(
            "{name}: {rounds} round(s), TTL {} ms, hold {} ms, {}",
            ttl.as_millis(),
            hold.as_millis(),
            if variant.in_model() {
                "in model: expect no overlap"
            } else {
                "out of model: expect the checker to fire"
            }
        ));
        let mut workers = Workers::spawn(&self.options.worker_exe, &dir, configs).await;
        let mut windows = Vec::new();
        let mut failures = Vec::new();
        let mut notes = Vec::new();
        let act = |f: Action| act(&masters, f);
        let both = |f: fn(&Masters, usize) -> std::io::Result<()>| {
            Box::new(move |m: &Masters| {
                std::thread::scope(|scope| {
                    let a = scope.spawn(|| f(m, 3));
                    let b = scope.spawn(|| f(m, 4));
                    a.join().expect("no panic").and(b.join().expect("no panic"))
                })
            })
        };
        // Overlaps the checker finds in the records so far: an out-of-model
        // round counts as reproduced when it adds one. A round whose second
        // grant came too late (a slow reconnection) is tried again, so a
        // slow machine cannot make the positive control miss.
        let mut overlaps_seen = 0;
        for round in 0..rounds {
            let mut reproduced = false;
            for attempt in 0..tries {
                let result: std::io::Result<()> = async {
                // Masters 4 and 5 paused: the next holder holds exactly 1-3.
                // (Paused, not killed: a restarted master does not vote for
                // a TTL, which would keep the other worker from 4 and 5.)
                act(both(Masters::pause)).await?;
                workers.drain();
                let Some(first) = workers
                    .next_grant(Instant::now() + GRANT_WAIT, |_| true)
                    .await
                else {
                    failures.push(format!(
                        "round {}: no lock granted with 3 of 5 masters up within {} s",
                        round + 1,
                        GRANT_WAIT.as_secs()
                    ));
                    act(both(Masters::resume)).await?;
                    return Ok(());
                };
                act(both(Masters::resume)).await?;
                // What they queued while paused ran at their resume, the
                // holder's acquire too: they come back without the key,
                // as masters down at the grant would.
                act(both(forget_sharp_key)).await?;
                let label = match variant {
                    Sharp::RestartEmpty | Sharp::RestartEmptyVotingAtOnce => {
                        act(Box::new(|m| m.restart(0))).await?;
                        "master 1 restarted empty at once"
                    }
                    Sharp::RestartDelayed => {
                        act(Box::new(|m| m.kill(0))).await?;
                        tokio::time::sleep(ttl + Duration::from_millis(300)).await;
                        act(Box::new(|m| m.restart(0))).await?;
                        "master 1 killed, restarted empty after TTL + 300 ms"
                    }
                    Sharp::ClockJump => {
                        let shift = shift.as_ref().expect("a clock-jump scenario has a shift");
                        shift.set(ttl * 3 * (round as u32 + 1))?;
                        "master 1's clock jumped 3 TTL forward"
                    }
                };
                let start_ns = mono_ns();
                let window = Window {
                    label: format!(
                        "round {} (try {}): worker {} granted, masters 4-5 back, {label} {:.0} ms after the grant",
                        round + 1,
                        attempt + 1,
                        first.worker,
                        ms(start_ns - first.at_ns)
                    ),
                    class: variant.name().to_owned(),
                    majority_up: true,
                    start_ns,
                    end_ns: first.at_ns + nanos(hold),
                };
                self.log.say(format!("{name}: {}", window.label));
                windows.push(window);
                // The other worker's grant, if any, while the first holds.
                let first_ends = first.at_ns + nanos(hold);
                let wait = Duration::from_nanos(first_ends.saturating_sub(mono_ns()))
                    + Duration::from_millis(300);
                let second = workers
                    .next_grant(Instant::now() + wait, |w| w != first.worker)
                    .await;
                let last_end = second
                    .as_ref()
                    .map_or(first_ends, |s| s.at_ns + nanos(hold))
                    .max(first_ends);
                tokio::time::sleep(
                    Duration::from_nanos(last_end.saturating_sub(mono_ns()))
                        + Duration::from_millis(200),
                )
                .await;
                Ok(())
            }
            .await;
                if let Err(err) = result {
                    failures.push(format!("round {}: {err}", round + 1));
                    blocking({
                        let masters = Arc::clone(&masters);
                        move || masters.restore_all()
                    })
                    .await;
                }
                let overlaps = workers.records().analyze().overlaps.len();
                if overlaps > overlaps_seen {
                    overlaps_seen = overlaps;
                    reproduced = true;
                    break;
                }
                if !variant.in_model() && attempt + 1 < tries {
                    notes.push(format!(
                    "round {} try {}: the checker found no overlap (the other worker may have won the lock too late); tried again",
                    round + 1,
                    attempt + 1
                ));
                }
            }
            if !variant.in_model() && !reproduced {
                failures.push(format!(
                  "round {}: the checker found no overlap in {tries} tries: the out-of-model fault was not reproduced, or the checker missed it",
                  round + 1
              ));
            }
        }
        self.finish_rounds(
            (name, variant.in_model(), started),
            workers,
            &windows,
            notes,
            failures,
        )
        .await
    }
}

/// Deletes the sharp scenarios' key on master `i`, once the requests it
/// queued while paused had 200 ms to run.
fn forget_sharp_key(masters: &Masters, i: usize) -> std::io::Result<()> {
    std::thread::sleep(Duration::from_millis(200));
    let url = masters.urls()[i].clone();
    let client = redis::Client::open(url).map_err(std::io::Error::other)?;
    let mut connection = client
        .get_connection_with_timeout(Duration::from_secs(2))
        .map_err(std::io::Error::other)?;
    redis::cmd("DEL")
        .arg("sharp")
        .query::<()>(&mut connection)
        .map_err(std::io::Error::other)
}
