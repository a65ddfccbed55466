//! The client sim: the real `redlock-tokio` client (builder, driver,
//! per-node order, node connections, guards, keep-alive, shutdown) run in
//! virtual time against simulated masters, one seed per run.
//!
//! Each run builds one to three clients through [`Builder`](redlock_tokio::Builder) with a
//! [`Simulation`](redlock_tokio::sim::Simulation) hook: every connection to a master is an in-memory stream
//! (`tokio::io::duplex`) to a master (a node of `redlock_testkit`'s [`Quorum`], its
//! faults set through the kit's controls, `master.rs`) that speaks RESP and answers from
//! the kit's script model, the same model `tests/tests/lua_model.rs`
//! checks against the real Lua. The runtime is current-thread with paused
//! time (it jumps ahead whenever every task waits on a timer), lock values
//! and jitter come from the seed, so a seed replays exactly: the same
//! commands reach the same masters at the same virtual instants, and the
//! run's history hash ([`Report::history`]) is the same.
//!
//! Faults, chosen by the seed ([`Plan`]): per-master latency and jitter, a
//! master paused (reads, runs and writes nothing for a while), connections
//! dropped mid-request (the command run or not), small stream buffers
//! (backpressure on the connection queue), `lock()` futures dropped at
//! random instants, and, by [`Mode`], the process exiting with guards alive
//! (the runtime dropped) or a master restarting empty (outside Redlock's
//! model: overlaps are counted, not judged).
//!
//! Judged after every run ([`Report::failures`]): no two holds of one key
//! overlap while valid, fencing tokens grow with grants, no key is left on
//! a master once every client shut down (or, at exit, once the blocking
//! releases ran) unless that master missed a request (a dropped
//! connection, a pause at exit), every wait limit is honoured, and a
//! kept-alive lock whose validity ran out was signalled lost; in
//! [`Mode::Notices`], no waiter is stranded by a release.
//!
//! Release notices are on in most seeds ([`Plan::notices`]): the masters
//! speak `SUBSCRIBE` and publish what a release script publishes, so
//! waiting (marks, notices, the client's own hand-overs, resubscribing
//! after a dropped connection) runs under the same faults and replays.

mod master;

use std::collections::BTreeMap;
use std::future::IntoFuture;
use std::hash::{DefaultHasher, Hasher};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use redlock_tokio::{KeepAlive, Redlock, Wait};
use tokio::time::Instant;

pub use master::MasterFaults;
use redlock_testkit::{Node, Quorum, Tap};

/// What a run does besides its faults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Clients shut down at the end.
    Faults,
    /// The process "exits" with guards alive: the runtime is dropped, and
    /// the guards' releases go out on blocking connections.
    Exit,
    /// One master restarts empty mid-run: outside Redlock's model, so
    /// overlaps are a figure here, not a failure.
    Restart,
    /// Waiting by release notices alone: one client, no faults, a retry
    /// delay longer than any wait limit (so only a notice or a hand-over
    /// wakes a waiter), and waiters that give up the moment a lock they
    /// wait for is released (the first of them may have been told). Judged
    /// besides: a lock released while valid is taken again soon whenever
    /// someone waited through its release ([`STRANDED_AFTER`]). In half
    /// the seeds the masters answer as Valkey 9.1.2
    /// ([`MasterFaults::valkey`]: `DELIFEQ`).
    Notices,
}

/// How long a lock released while valid may stay free, while a waiter
/// waits through the release, before the waiter counts as stranded (the
/// [`Mode::Notices`] runs): far above a hand-over's round trip (at most a
/// few ms here), far below the retry delay that would wake it otherwise.
pub const STRANDED_AFTER: Duration = Duration::from_millis(250);

/// A bug planted in the client through the sim's hooks, to show the sim
/// finds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Planted {
    /// Connections whose queue holds two requests (the `redis` crate makes
    /// a sender wait for room): a release can overtake its acquire.
    BoundedQueue,
    /// A cancelled acquire sends no withdraws: what it won stays set
    /// (`redlock_core::planted::Bug::CancelSkipsWithdraws`).
    NoCancelledWithdraws,
    /// The core's notice hub forgets to replay a channel's events to the
    /// waiter that becomes first after one that left without the lock
    /// (`redlock_core::planted::Bug::HubForgetsReplay`).
    HubForgetsReplay,
    /// The core hands a release over to its client's waiter as soon as it
    /// is queued, and lets it go as a plain `DELIFEQ` where the client's
    /// own waiters wait: on Valkey, the waiter's attempt runs before the
    /// script that deletes a value a waiter marked
    /// (`redlock_core::planted::Bug::HandOverBeforeFollowUp`, issue 52).
    HandOverBeforeFollowUp,
}

/// The run's choices, all drawn from the seed.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The masters and their faults.
    pub masters: Vec<MasterFaults>,
    /// Clients, each with its own connections.
    pub clients: usize,
    /// Tasks per client, each taking locks one after another.
    pub tasks: usize,
    /// Locks each task tries.
    pub rounds: usize,
    /// Resource names the tasks share.
    pub resources: usize,
    /// The lock TTL.
    pub ttl: Duration,
    /// The per-node timeout.
    pub node_timeout: Duration,
    /// Whether acquires use `SET NX PX GET` where the master has it.
    pub native: bool,
    /// Whether locks carry fencing tokens.
    pub fencing: bool,
    /// Whether locks are fair (first come, first served across clients,
    /// by the masters' queues); never with fencing.
    pub fair: bool,
    /// When the process exits (the [`Mode::Exit`] runs).
    pub exit_at: Duration,
    /// Whether waiting acquires listen for release notices (pub/sub on
    /// their own connections, marks, hand-overs), or only retry.
    pub notices: bool,
    /// The clients' retry delay (40 ms, jittered by up to 60; in
    /// [`Mode::Notices`], 10 s: longer than any wait limit).
    pub retry_delay: Duration,
}

impl Plan {
    /// The plan of `seed`.
    pub fn of(seed: u64, mode: Mode) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let nodes = if rng.random_bool(0.5) { 3 } else { 5 };
        let node_timeout = Duration::from_millis(rng.random_range(5..=50));
        let faulty = rng.random_range(0..=nodes / 2);
        let restart = (mode == Mode::Restart).then(|| rng.random_range(0..nodes));
        let masters = (0..nodes)
            .map(|i| {
                let mut faults = MasterFaults {
                    latency: Duration::from_micros(rng.random_range(50..2_000)),
                    jitter: Duration::from_micros(rng.random_range(0..3_000)),
                    buffer: [256, 4096, 65536][rng.random_range(0..3)],
                    ..MasterFaults::default()
                };
                if i < faulty {
                    match rng.random_range(0..4) {
                        0 => {
                            faults.latency = node_timeout.mul_f64(rng.random_range(0.5..2.0));
                        }
                        1 => faults.drops_per_mille = rng.random_range(5..60),
                        _ => {
                            for _ in 0..rng.random_range(1..=2) {
                                let from = Duration::from_millis(rng.random_range(0..800));
                                let length = Duration::from_millis(rng.random_range(5..400));
                                faults.pauses.push((from, length));
                            }
                        }
                    }
                }
                if restart == Some(i) {
                    faults.restart_at = Some(Duration::from_millis(rng.random_range(50..600)));
                }
                faults
            })
            .collect();
        Self {
            masters,
            clients: rng.random_range(1..=3),
            tasks: rng.random_range(1..=4),
            rounds: rng.random_range(1..=4),
            resources: rng.random_range(1..=3),
            ttl: Duration::from_millis(rng.random_range(300..3_000)),
            node_timeout,
            native: rng.random_bool(0.5),
            fencing: rng.random_bool(0.3),
            fair: rng.random_bool(0.25),
            exit_at: Duration::from_millis(rng.random_range(20..600)),
            notices: rng.random_bool(0.8),
            retry_delay: Duration::from_millis(40),
        }
        .with_mode(seed, mode)
    }

    /// What [`Mode::Notices`] changes: its choices drawn from a generator
    /// of their own, so that the other modes' plans stay as they were.
    fn with_mode(mut self, seed: u64, mode: Mode) -> Self {
        if mode != Mode::Notices {
            return self;
        }
        let mut rng = StdRng::seed_from_u64(seed.rotate_left(17));
        for master in &mut self.masters {
            *master = MasterFaults {
                // Not the slow master's latency: as drawn for the others.
                latency: master.latency.min(Duration::from_millis(2)),
                jitter: master.jitter,
                buffer: master.buffer,
                ..MasterFaults::default()
            };
        }
        // Above any round trip here (latency up to 2 ms and jitter up to
        // 3 ms each way): an attempt that times out goes back to its retry
        // timer, as it should, and that is a fault this mode leaves out.
        self.node_timeout = Duration::from_millis(rng.random_range(20..=50));
        self.clients = 1;
        self.tasks = rng.random_range(2..=4);
        self.resources = rng.random_range(1..=2);
        self.fair = false;
        self.notices = true;
        self.retry_delay = Duration::from_secs(10);
        // Half the seeds on Valkey 9, where a release nobody of its client
        // waits for is one `DELIFEQ` and a value a waiter marked is deleted
        // by the script that follows it (issue 52).
        let valkey = rng.random_bool(0.5);
        for master in &mut self.masters {
            master.valkey = valkey;
        }
        self
    }

    /// Many tasks on distinct resources and one master paused behind a
    /// small stream buffer: connection queues fill up (for
    /// [`Planted::BoundedQueue`]).
    fn backpressure(&mut self, seed: u64) {
        let mut rng = StdRng::seed_from_u64(!seed);
        self.tasks = rng.random_range(8..=16);
        self.resources = 64;
        self.ttl = Duration::from_secs(5);
        let paused = &mut self.masters[0];
        paused.buffer = 256;
        paused.drops_per_mille = 0;
        paused.pauses = vec![(
            // After the clients connected (a master paused then is only
            // down for them), while the tasks take their first locks.
            Duration::from_millis(rng.random_range(10..60)),
            Duration::from_millis(rng.random_range(100..400)),
        )];
    }

    /// How many faults the plan injects (besides cancellations).
    pub fn faults(&self) -> usize {
        self.masters
            .iter()
            .map(|m| {
                m.pauses.len()
                    + usize::from(m.drops_per_mille > 0)
                    + usize::from(m.restart_at.is_some())
                    + usize::from(m.latency > self.node_timeout / 2)
            })
            .sum()
    }
}

/// What happened in a run, as a hash of every command each master ran (at
/// its virtual instant, with its reply) and of every hold. Each master has
/// its own hash: at exit, the blocking releases of one guard reach the
/// masters from parallel threads.
#[derive(Default)]
pub struct History {
    masters: Mutex<BTreeMap<usize, (DefaultHasher, u64)>>,
    notes: Mutex<(DefaultHasher, Vec<String>)>,
    verbose: bool,
    /// Commands the masters ran, to tell when they have gone quiet.
    commands: std::sync::atomic::AtomicU64,
    /// Release notices the masters sent to subscribed connections.
    notices: std::sync::atomic::AtomicU64,
}

impl History {
    fn with_log(verbose: bool) -> Self {
        Self {
            verbose,
            ..Self::default()
        }
    }

    fn record(&self, master: usize, clock: f64, frozen: bool, words: &[Vec<u8>], reply: &[u8]) {
        self.commands
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        {
            let mut one = DefaultHasher::new();
            one.write_u64(clock as u64);
            for word in words {
                one.write(word);
            }
            one.write(reply);
            let mut masters = self.masters.lock().unwrap_or_else(PoisonError::into_inner);
            let (hasher, at_exit) = masters.entry(master).or_default();
            if frozen {
                // At exit the runtime drops its tasks in an order that
                // depends on task ids, which count across runtimes: the
                // blocking releases are a set, summed.
                *at_exit = at_exit.wrapping_add(one.finish());
            } else {
                hasher.write_u64(one.finish());
            }
        }
        if self.verbose {
            let words: Vec<String> = words
                .iter()
                .map(|w| String::from_utf8_lossy(w).chars().take(44).collect())
                .collect();
            let line = format!(
                "{:>10.3} ms m{master} {} -> {}",
                clock / 1e3,
                words.join(" "),
                String::from_utf8_lossy(reply).trim_end()
            );
            if std::env::var_os("SIM_TRACE").is_some() {
                eprintln!("{line}");
            }
            let mut notes = self.notes.lock().unwrap_or_else(PoisonError::into_inner);
            notes.1.push(line);
        }
    }

    fn note(&self, text: String) {
        let mut notes = self.notes.lock().unwrap_or_else(PoisonError::into_inner);
        notes.0.write(text.as_bytes());
        if self.verbose {
            notes.1.push(text);
        }
    }

    fn finish(&self) -> (u64, Vec<String>) {
        let notes = self.notes.lock().unwrap_or_else(PoisonError::into_inner);
        let mut hasher = notes.0.clone();
        for (master, (hash, at_exit)) in self.masters.lock().unwrap().iter() {
            hasher.write_usize(*master);
            hasher.write_u64(hash.finish());
            hasher.write_u64(*at_exit);
        }
        (hasher.finish(), notes.1.clone())
    }
}

impl Tap for History {
    fn command(&self, node: usize, clock: f64, frozen: bool, words: &[Vec<u8>], reply: &[u8]) {
        self.record(node, clock, frozen, words, reply);
    }

    fn note(&self, text: String) {
        History::note(self, text);
    }

    fn notice(&self) {
        self.notices
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// One hold of a lock, in virtual ms since the run started.
#[derive(Clone, Debug)]
struct Hold {
    key: Vec<u8>,
    resource: String,
    value: String,
    who: String,
    granted: f64,
    /// The end of its validity (the last one known, for a kept-alive lock).
    valid_until: f64,
    /// When its holder let go (release called, guard dropped), if it did.
    let_go: Option<f64>,
    token: Option<u64>,
}

impl Hold {
    fn end(&self) -> f64 {
        self.let_go
            .map_or(self.valid_until, |t| t.min(self.valid_until))
    }
}

/// One acquire call, from its start to its end (granted, failed,
/// cancelled or given up), in virtual ms since the run started.
#[derive(Clone, Debug)]
struct Waited {
    resource: String,
    who: String,
    begun: f64,
    ended: f64,
    /// How it ended: granted, failed, or stopped (cancelled, given up).
    outcome: &'static str,
}

#[derive(Default)]
struct Log {
    holds: Vec<Hold>,
    waits: Vec<Waited>,
    cancelled: u64,
    inspects: u64,
    failures: Vec<String>,
}

/// What one run found.
#[derive(Debug, Default)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// The history hash: the same seed gives the same hash.
    pub history: u64,
    /// Locks granted.
    pub locks: u64,
    /// `lock()` futures dropped before they finished.
    pub cancelled: u64,
    /// `inspect()` calls (the read behind `redlock status`).
    pub inspects: u64,
    /// Release notices the masters sent to subscribed connections.
    pub notices: u64,
    /// Faults injected (pauses, dropping masters, slow masters, restarts).
    pub faults: u64,
    /// Holds of one key that overlapped while valid.
    pub overlaps: u64,
    /// Keys left on masters that missed no request.
    pub keys_left: u64,
    /// Keys left on masters that missed a request (not judged).
    pub keys_excused: u64,
    /// Every broken promise, one line each (empty: the run passed).
    pub failures: Vec<String>,
    /// Every command with its reply, when asked for (`SIM_VERBOSE`).
    pub log: Vec<String>,
}

fn ms(at: Instant, start: Instant) -> f64 {
    (at - start).as_secs_f64() * 1e3
}

fn ms_std(at: std::time::Instant, start: Instant) -> f64 {
    ms(Instant::from_std(at), start)
}

/// Runs seed `seed`.
pub fn run(seed: u64, mode: Mode, planted: Option<Planted>, verbose: bool) -> Report {
    let mut plan = Plan::of(seed, mode);
    if planted == Some(Planted::BoundedQueue) {
        plan.backpressure(seed);
    }
    let history = Arc::new(History::with_log(verbose));
    let log = Arc::new(Mutex::new(Log::default()));
    // The core's bug, on this thread: the runtime is current-thread.
    redlock_tokio::core::planted::set(match planted {
        Some(Planted::HubForgetsReplay) => {
            Some(redlock_tokio::core::planted::Bug::HubForgetsReplay)
        }
        Some(Planted::HandOverBeforeFollowUp) => {
            Some(redlock_tokio::core::planted::Bug::HandOverBeforeFollowUp)
        }
        Some(Planted::NoCancelledWithdraws) => {
            Some(redlock_tokio::core::planted::Bug::CancelSkipsWithdraws)
        }
        _ => None,
    });
    let report = run_plan(seed, mode, &plan, planted, &history, &log);
    redlock_tokio::core::planted::set(None);
    report
}

fn run_plan(
    seed: u64,
    mode: Mode,
    plan: &Plan,
    planted: Option<Planted>,
    history: &Arc<History>,
    log: &Arc<Mutex<Log>>,
) -> Report {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a runtime");
    let (quorum, masters, start) = runtime.block_on(async {
        let start = Instant::now();
        let quorum = Quorum::builder()
            .nodes(plan.masters.len())
            .seed(seed)
            .valkey(plan.masters.iter().any(|m| m.valkey))
            .buffers(plan.masters.iter().map(|m| m.buffer).collect())
            .tap(Arc::clone(history) as Arc<dyn Tap>)
            .build();
        let masters = quorum.nodes();
        for (faults, master) in plan.masters.iter().zip(&masters) {
            faults.apply(master);
        }
        (quorum, masters, start)
    });
    let clients = runtime.block_on(async {
        for master in &masters {
            tokio::spawn(master.restart_when_due());
        }
        let mut clients = Vec::new();
        for c in 0..plan.clients {
            clients.push(build(plan, &quorum, c, planted).await);
        }
        clients
    });
    let tasks = runtime.block_on(async {
        let releases = tokio::sync::broadcast::Sender::new(64);
        let mut tasks = Vec::new();
        for (c, client) in clients.iter().enumerate() {
            for t in 0..plan.tasks {
                let rng = StdRng::seed_from_u64(seed ^ ((c as u64) << 40) ^ ((t as u64) << 24));
                tasks.push(tokio::spawn(work(
                    client.clone(),
                    plan.clone(),
                    rng,
                    format!("c{c}t{t}"),
                    Arc::clone(log),
                    (mode == Mode::Notices).then(|| releases.clone()),
                    start,
                )));
            }
        }
        tasks
    });
    let runtime = if mode == Mode::Exit {
        runtime.block_on(async {
            tokio::time::sleep(plan.exit_at).await;
            // On the virtual clock, which only a runtime reads.
            for master in &masters {
                master.freeze();
            }
        });
        drop(clients);
        drop(tasks);
        // The process exits: every task is dropped with its guards.
        drop(runtime);
        None
    } else {
        runtime.block_on(async {
            for task in tasks {
                if let Err(error) = task.await {
                    log.lock()
                        .unwrap()
                        .failures
                        .push(format!("a task panicked: {error}"));
                }
            }
            for client in &clients {
                client.shutdown().await;
            }
            // Past every pause, the late releases reach their masters.
            let last_pause = masters.iter().map(|m| m.last_pause_end()).max();
            tokio::time::sleep_until(start + last_pause.unwrap_or_default()).await;
            tokio::time::sleep(plan.node_timeout * 4).await;
            // A master paused long works through its backlog one command
            // at a time after it resumes: wait until every master has gone
            // quiet (bounded), so a release queued behind that backlog is
            // judged once it ran, not while it waits its turn.
            for _ in 0..1_000 {
                let ran = history.commands.load(std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(plan.node_timeout * 2).await;
                if history.commands.load(std::sync::atomic::Ordering::Relaxed) == ran {
                    break;
                }
            }
            for client in &clients {
                client.shutdown().await;
            }
        });
        Some(runtime)
    };
    // The lock keys left now; then, past a TTL more, anything left at all:
    // a waiter's mark and a fair lock's queue outlive their waiter on
    // purpose, for a bounded time (the exit mode's frozen clock judges
    // lock keys only). Read on the runtime: the masters' clock is virtual.
    let live = || -> Vec<Vec<Vec<u8>>> { masters.iter().map(|m| m.live_keys()).collect() };
    let left: Vec<Vec<Vec<u8>>> = match runtime {
        None => live()
            .into_iter()
            .map(|keys| keys.into_iter().filter(|key| !is_derived(key)).collect())
            .collect(),
        Some(runtime) => runtime.block_on(async {
            let locks = live();
            // A waiter's mark lives one retry (delay and jitter) and two
            // per-node timeouts past its last attempt.
            let mark = plan.retry_delay + Duration::from_millis(60) + plan.node_timeout * 2;
            tokio::time::sleep(plan.ttl.max(mark) + Duration::from_secs(1)).await;
            let later = live();
            locks
                .into_iter()
                .zip(later)
                .map(|(locks, later)| {
                    let mut keys: Vec<Vec<u8>> =
                        locks.into_iter().filter(|k| !is_derived(k)).collect();
                    keys.extend(later);
                    keys.sort();
                    keys.dedup();
                    keys
                })
                .collect()
        }),
    };
    judge(seed, mode, plan, &masters, &left, log, history)
}

/// A key the lock keeps beside its lock key (a waiter's mark, a fair lock's
/// queue): the lock key, a NUL byte and a name.
fn is_derived(key: &[u8]) -> bool {
    key.contains(&0)
}

async fn build(plan: &Plan, quorum: &Quorum, client: usize, planted: Option<Planted>) -> Redlock {
    let mut simulation = quorum.simulation(client);
    match planted {
        Some(Planted::BoundedQueue) => simulation = simulation.connection_queue(2),
        Some(
            Planted::NoCancelledWithdraws
            | Planted::HubForgetsReplay
            | Planted::HandOverBeforeFollowUp,
        )
        | None => {}
    }
    Redlock::builder(quorum.urls())
        .ttl(plan.ttl)
        .node_timeout(plan.node_timeout)
        .connect_timeout(Duration::from_millis(200))
        .retry_delay(plan.retry_delay)
        .retry_jitter(Duration::from_millis(60))
        .native_commands(plan.native)
        .release_notices(plan.notices)
        .simulation(simulation)
        .build()
        .await
        .expect("the sim's client builds")
}

/// One task: takes locks one after another, holds, extends, releases,
/// drops guards and cancels acquires, as the seed says.
async fn work(
    client: Redlock,
    plan: Plan,
    mut rng: StdRng,
    name: String,
    log: Arc<Mutex<Log>>,
    releases: Option<tokio::sync::broadcast::Sender<String>>,
    start: Instant,
) {
    for round in 0..plan.rounds {
        let who = format!("{name}r{round}");
        let resource = format!("res{}", rng.random_range(0..plan.resources));
        if rng.random_bool(0.2) {
            inspect(&client, &plan, &resource, None, &who, &log).await;
        }
        let limit = match releases {
            // Long enough to wait through a hold or two.
            Some(_) => Duration::from_millis(rng.random_range(1..2_000)),
            None => Duration::from_millis(rng.random_range(1..400)),
        };
        // What the hold will be, drawn before the acquire: keep-alive is
        // chosen on the request.
        let held_for = plan.ttl.mul_f64(rng.random_range(0.0..1.5));
        let hold_as = rng.random_range(0..4);
        // Kept alive: the defaults, or a lead and a limit from the seed
        // (the limit's loss must be signalled like any other).
        let keep_alive = (hold_as == 2).then(|| {
            if rng.random_bool(0.5) {
                KeepAlive::default()
            } else {
                KeepAlive::default()
                    .extend_when_left(rng.random_range(0.05..0.95))
                    .max_extensions(rng.random_range(0..4))
            }
        });
        let begun = Instant::now();
        let mut request = client.lock(&resource).wait(Wait::AtMost(limit));
        if let Some(options) = keep_alive {
            request = request.keep_alive(options);
        }
        // The kind is chosen per lock; the plan asks one of every lock.
        let acquire = if plan.fair {
            request.fair().into_future()
        } else if plan.fencing {
            request.fencing().into_future()
        } else {
            request.into_future()
        };
        let cancel_after = rng
            .random_bool(0.25)
            .then(|| Duration::from_micros(rng.random_range(0..20_000)));
        // In the notices mode, half the waiters give up the moment a lock
        // of their resource is released: the first of them may have been
        // told its turn came, and the next must be told instead.
        let give_up = releases
            .as_ref()
            .filter(|_| rng.random_bool(0.5))
            .map(tokio::sync::broadcast::Sender::subscribe);
        let acquire = async {
            match give_up {
                Some(heard) => tokio::select! {
                    biased;
                    result = acquire => Some(result),
                    () = released(heard, &resource) => None,
                },
                None => Some(acquire.await),
            }
        };
        let result = match cancel_after {
            Some(after) => tokio::time::timeout(after, acquire).await.ok().flatten(),
            None => acquire.await,
        };
        let returned = Instant::now();
        log.lock().unwrap().waits.push(Waited {
            resource: resource.clone(),
            who: who.clone(),
            begun: ms(begun, start),
            ended: ms(returned, start),
            outcome: match &result {
                Some(Ok(_)) => "granted",
                Some(Err(_)) => "failed",
                None => "stopped",
            },
        });
        let Some(result) = result else {
            log.lock().unwrap().cancelled += 1;
            continue;
        };
        if returned - begun > limit {
            log.lock().unwrap().failures.push(format!(
                "{who}: a wait limit of {limit:?} took {:?}",
                returned - begun
            ));
        }
        let Ok(mut guard) = result else {
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..30))).await;
            continue;
        };
        let mut hold = Hold {
            key: guard.key().as_bytes().to_vec(),
            resource: resource.clone(),
            value: guard.value().as_str().to_owned(),
            who: who.clone(),
            granted: ms(returned, start),
            valid_until: ms_std(guard.valid_until(), start),
            let_go: None,
            token: guard.fencing_token(),
        };
        if ms_std(guard.acquired_at(), start) > ms(begun, start) + limit.as_secs_f64() * 1e3 {
            log.lock().unwrap().failures.push(format!(
                "{who}: granted by a round sent past its wait limit"
            ));
        }
        match hold_as {
            // Held, maybe extended once, released.
            0 | 1 => {
                let index = log_hold(&log, hold.clone());
                tokio::time::sleep(held_for / 2).await;
                if rng.random_bool(0.3) {
                    let ours = (guard.value().as_str(), guard.valid_until());
                    inspect(&client, &plan, &resource, Some(ours), &who, &log).await;
                }
                if rng.random_bool(0.5) && guard.extend(plan.ttl).await.is_ok() {
                    hold.valid_until = ms_std(guard.valid_until(), start);
                    update_hold(&log, index, |h| h.valid_until = hold.valid_until);
                }
                tokio::time::sleep(held_for / 2).await;
                let at = ms(Instant::now(), start);
                update_hold(&log, index, |h| h.let_go = Some(at));
                if rng.random_bool(0.5) {
                    let _report = guard.release().await;
                } else {
                    drop(guard);
                }
            }
            // Kept alive for a while: its loss must be signalled.
            2 => {
                let index = log_hold(&log, hold.clone());
                let until = Instant::now() + held_for * 2;
                while Instant::now() < until {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    // A read of the key while extensions run on it.
                    if rng.random_bool(0.05) && !guard.is_lost() {
                        let ours = (guard.value().as_str(), guard.valid_until());
                        inspect(&client, &plan, &resource, Some(ours), &who, &log).await;
                    }
                    let now = ms(Instant::now(), start);
                    // The loss first, then the window: an extension in
                    // between only moves the window later.
                    if guard.is_lost() {
                        break;
                    }
                    let valid = ms_std(guard.valid_until(), start);
                    update_hold(&log, index, |h| h.valid_until = valid);
                    // Decided at the end of the extension round in
                    // flight, so up to one per-node timeout late.
                    if valid + plan.node_timeout.as_secs_f64() * 1e3 < now {
                        log.lock().unwrap().failures.push(format!(
                            "{who}: a kept-alive lock ran out at {valid:.3} ms unsignalled"
                        ));
                        break;
                    }
                }
                let at = ms(Instant::now(), start);
                update_hold(&log, index, |h| h.let_go = Some(at));
                let _report = guard.release().await;
            }
            // Held past its validity maybe, then released.
            _ => {
                let index = log_hold(&log, hold);
                tokio::time::sleep(held_for * 2).await;
                let at = ms(Instant::now(), start);
                update_hold(&log, index, |h| h.let_go = Some(at));
                let _report = guard.release().await;
            }
        }
        if let Some(releases) = &releases {
            let _ = releases.send(resource.clone());
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..30))).await;
    }
}

/// Waits for a release of `resource` (the notices mode's waiters that
/// give up).
async fn released(mut heard: tokio::sync::broadcast::Receiver<String>, resource: &str) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        match heard.recv().await {
            Ok(released) if released == resource => return,
            Ok(_) | Err(RecvError::Lagged(_)) => {}
            Err(RecvError::Closed) => std::future::pending().await,
        }
    }
}

/// Reads `resource` on every master ([`Redlock::inspect`], the read
/// behind `redlock status`), judged: one entry per master, an answer by
/// the core's per-node timeout, and, while `ours` (our value and the end
/// of its validity) lasts, no other value on a quorum of masters (ours is
/// on a quorum then, and two quorums meet). A master restarted empty is
/// outside that promise.
async fn inspect(
    client: &Redlock,
    plan: &Plan,
    resource: &str,
    ours: Option<(&str, std::time::Instant)>,
    who: &str,
    log: &Mutex<Log>,
) {
    let begun = Instant::now();
    let reads = client.inspect(resource).await;
    let returned = Instant::now();
    let mut log = log.lock().unwrap();
    log.inspects += 1;
    if reads.len() != plan.masters.len() {
        log.failures.push(format!(
            "{who}: inspect gave {} entries for {} masters",
            reads.len(),
            plan.masters.len()
        ));
    }
    // Tokio's timer fires on whole milliseconds: up to one late.
    if returned - begun > plan.node_timeout + Duration::from_millis(1) {
        log.failures.push(format!(
            "{who}: inspect took {:?}, past the per-node timeout of {:?}",
            returned - begun,
            plan.node_timeout
        ));
    }
    let restarts = plan.masters.iter().any(|m| m.restart_at.is_some());
    let Some((value, valid_until)) = ours else {
        return;
    };
    if restarts || returned.into_std() >= valid_until {
        return;
    }
    let status = redlock_tokio::core::LockStatus::from_reads(reads.iter().map(|r| r.read()));
    if let Some(holder) = &status.holder
        && holder.value != value.as_bytes()
    {
        log.failures.push(format!(
            "{who}: while our lock was valid, inspect saw another value on {} masters",
            holder.nodes
        ));
    }
}

fn log_hold(log: &Mutex<Log>, hold: Hold) -> usize {
    let mut log = log.lock().unwrap();
    log.holds.push(hold);
    log.holds.len() - 1
}

fn update_hold(log: &Mutex<Log>, index: usize, change: impl FnOnce(&mut Hold)) {
    change(&mut log.lock().unwrap().holds[index]);
}

/// Waiters stranded by a release ([`Mode::Notices`]): a lock released
/// while valid stayed free for longer than [`STRANDED_AFTER`] while a
/// waiter for it waited through the release and past that time. Its turn
/// came at the release, and only a notice or a hand-over could tell it
/// (the retry delay is longer than its wait limit).
fn stranded(log: &Log) -> Vec<String> {
    let after = STRANDED_AFTER.as_secs_f64() * 1e3;
    let mut failures = Vec::new();
    for hold in &log.holds {
        // Released while valid: a release that came after its validity may
        // find the key expired, which no notice tells.
        let Some(released) = hold.let_go.filter(|&at| at + 10.0 < hold.valid_until) else {
            continue;
        };
        let retaken = log
            .holds
            .iter()
            .filter(|next| next.resource == hold.resource && next.granted > released)
            .map(|next| next.granted)
            .min_by(f64::total_cmp);
        if retaken.is_some_and(|at| at - released <= after) {
            continue;
        }
        if let Some(waiter) = log.waits.iter().find(|w| {
            w.resource == hold.resource && w.begun < released && w.ended > released + after
        }) {
            failures.push(format!(
                "{} released by {} at {released:.3} ms while valid, free until {}, while {} \
                 waited [{:.3}, {:.3}] ms: stranded",
                hold.resource,
                hold.who,
                retaken.map_or("the end".to_owned(), |at| format!("{at:.3} ms")),
                waiter.who,
                waiter.begun,
                waiter.ended
            ));
        }
    }
    failures
}

fn judge(
    seed: u64,
    mode: Mode,
    plan: &Plan,
    masters: &[Node],
    left: &[Vec<Vec<u8>>],
    log: &Mutex<Log>,
    history: &History,
) -> Report {
    let log = log.lock().unwrap();
    let mut report = Report {
        seed,
        locks: log.holds.len() as u64,
        cancelled: log.cancelled,
        inspects: log.inspects,
        notices: history.notices.load(std::sync::atomic::Ordering::Relaxed),
        faults: plan.faults() as u64,
        failures: log.failures.clone(),
        ..Report::default()
    };
    let mut by_key: BTreeMap<&[u8], Vec<&Hold>> = BTreeMap::new();
    for hold in &log.holds {
        by_key.entry(&hold.key).or_default().push(hold);
    }
    // The overlaps by the test kit's checker, the one users run.
    let who: BTreeMap<&[u8], &str> = log
        .holds
        .iter()
        .map(|hold| (hold.value.as_bytes(), hold.who.as_str()))
        .collect();
    let at = |ms: f64| Duration::from_secs_f64(ms.max(0.0) / 1e3);
    let holds: Vec<redlock_testkit::Hold> = log
        .holds
        .iter()
        .map(|hold| redlock_testkit::Hold {
            key: hold.key.clone(),
            holder: hold.value.clone().into_bytes(),
            from: at(hold.granted),
            until: at(hold.end()),
            shared: false,
        })
        .collect();
    for overlap in redlock_testkit::overlaps(&holds) {
        report.overlaps += 1;
        if mode != Mode::Restart {
            report.failures.push(format!(
                "overlap on {}: {} held [{:.3}, {:.3}] ms, {} granted at {:.3} ms",
                String::from_utf8_lossy(&overlap.first.key),
                who[overlap.first.holder.as_slice()],
                overlap.first.from.as_secs_f64() * 1e3,
                overlap.first.until.as_secs_f64() * 1e3,
                who[overlap.second.holder.as_slice()],
                overlap.second.from.as_secs_f64() * 1e3,
            ));
        }
    }
    for holds in by_key.values_mut() {
        holds.sort_by(|a, b| a.granted.total_cmp(&b.granted));
        for (i, first) in holds.iter().enumerate() {
            let next = holds.get(i + 1).and_then(|next| next.token);
            if let (Some(a), Some(b), false) = (first.token, next, mode == Mode::Restart)
                && b <= a
            {
                report.failures.push(format!(
                    "fencing token {b} of {} not above {a} of {}",
                    holds[i + 1].who,
                    first.who
                ));
            }
        }
    }
    if mode == Mode::Notices {
        report.failures.extend(stranded(&log));
    }
    for (i, master) in masters.iter().enumerate() {
        let keys = left[i].clone();
        if master.missed_requests() {
            report.keys_excused += keys.len() as u64;
            continue;
        }
        report.keys_left += keys.len() as u64;
        // Exit too: a release whose connection the dying runtime dropped
        // first is sent again on a blocking connection (about 2.5% of exit
        // seeds left a key before that was so).
        for key in keys {
            report.failures.push(format!(
                "key {} left on master {i}",
                String::from_utf8_lossy(&key)
            ));
        }
    }
    for wait in &log.waits {
        history.note(format!(
            "wait of {} for {}: [{:.3}, {:.3}] ms, {}",
            wait.who, wait.resource, wait.begun, wait.ended, wait.outcome
        ));
    }
    for hold in &log.holds {
        history.note(format!(
            "hold {} of {} by {}: [{:.3}, {:.3}] ms, token {:?}",
            hold.value,
            String::from_utf8_lossy(&hold.key),
            hold.who,
            hold.granted,
            hold.end(),
            hold.token
        ));
    }
    let (hash, lines) = history.finish();
    report.history = hash;
    report.log = lines;
    report
}
