//! (k) Throughput under faults: 64 tasks of one client (as in (b)), each
//! cycling `lock` then `release` on keys of its own, against the masters in
//! one fault state after another, for this library and `rslock`:
//!
//! - healthy (first, and again last: "vs healthy" divides by the mean of
//!   the two, as the machine's load drifts over a run);
//! - the last master paused (`SIGSTOP`), then the last two (where the quorum
//!   survives it): requests reach the kernel, nothing answers;
//! - the last master killed (`SIGKILL`): connections refused; restarted
//!   empty (as a master without persistence comes back) after the phase;
//! - the last master slowed: both contenders get clients of their own for
//!   that state whose connections to it pass through a proxy
//!   ([`redlock_tests::chaos::proxy`], on a runtime of its own) that delays
//!   every chunk by 10 ms each way, so every round trip to it takes
//!   [`SLOW_ROUND_TRIP`] more.
//!
//! Why: (d) times one acquire at a fixed pace, which does not show what a
//! fault costs a loaded client. With one master of five paused, every
//! release of this library waited out its per-node timeout there, and 64
//! tasks made 0.07x their healthy cycles (issue 35); no figure showed it.
//!
//! Each contender's phase is on its own, the fault put in place at its start
//! and lifted at its end, so neither meets a backlog the other left; the
//! contenders' order rotates by state. What ends in the first
//! [`FaultPlan::warm_up`] of a phase is not counted (the client meets the
//! fault: timeouts, a refused reconnection); cycles that end between then
//! and the deadline are. At the deadline no task starts another cycle; the
//! cycles in flight get [`GRACE`] to end (one `rslock` cycle against a
//! paused master: two of its 500 ms response timeouts), so that their locks
//! are released, and the tasks still running then are aborted ("cut off").
//! Then the fault ends (resume, restart, proxy back to no delay), this
//! library's client runs `shutdown`, a resumed master gets [`SETTLE`] to
//! work through what queued up while it was stopped, and the keys of the
//! phase left on every master are counted: 0 when every lock was released.
//!
//! Memory: the resident set of this process (`VmRSS`, every client of the
//! run, the proxy and the runtime together) at the start of the phase, at
//! its deadline, and the peak of samples taken every [`RSS_EVERY`] from the
//! start until the keys are counted.
//!
//! Stalls (issue 51): a paused master once froze the whole client runtime
//! for about 2 s, one TTL after the pause began, which cycles per second
//! over a phase averaged away. So each phase also gives the worst gap
//! between two consecutive grants across its tasks, the largest lateness
//! of a [`Heartbeat`] (a 10 ms timer on the same runtime: the whole runtime
//! held up) and the longest one worker of the runtime stayed in one stretch
//! of polls (one worker blocked while the other kept the runtime going, as
//! under (k)'s load), all from the end of the warm-up until the last task
//! ended (a stall across the deadline still shows). (k) runs clients of its own with the TTL of
//! [`FaultPlan::ttl`] (shorter than the other scenarios', with their
//! per-node timeout), and a paused state lasts at least three of them
//! ([`FaultPlan::paused`]): long enough for what happens one TTL after a
//! master stops answering to happen inside the phase.
//!
//! Figures are printed, never judged.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use redlock_tests::RedisCluster;
use redlock_tests::chaos::proxy::{Fault, Proxy};
use redlock_tests::heartbeat::Heartbeat;
use tokio::runtime::Runtime;
use tokio_util::sync::CancellationToken;

use crate::contenders::{Common, Contenders, Kind};
use crate::scenarios::{rotated, warm_up};
use crate::stats::{Latencies, ratio_value};

/// What a round trip to the slowed master takes more: half of it each way.
pub(crate) const SLOW_ROUND_TRIP: Duration = Duration::from_millis(20);
/// How long the cycles in flight at a phase's deadline may still take: one
/// `rslock` cycle against a paused master (an acquire and a release, each
/// waiting out redis' 500 ms response timeout), and some.
pub(crate) const GRACE: Duration = Duration::from_millis(1_200);
/// How long a resumed master gets before its keys are counted.
pub(crate) const SETTLE: Duration = Duration::from_millis(200);
/// How often the resident set is sampled during a phase.
pub(crate) const RSS_EVERY: Duration = Duration::from_millis(20);
/// How long this library's client may take to reconnect to a restarted
/// master before the last healthy phase (its longest backoff is 2 s).
const RECONNECT_BUDGET: Duration = Duration::from_secs(3);
/// Bound on this library's `shutdown` after a phase.
const SHUTDOWN_BUDGET: Duration = Duration::from_secs(5);
/// After a failed acquire, a task waits this long: a failure that comes at
/// once must not spin.
const AFTER_FAILURE: Duration = Duration::from_millis(1);
/// Upper bound on the cycles of one task in one phase, besides its time.
const MAX_CYCLES_PER_TASK: u64 = 10_000_000;
/// `PING`s that time the slowed master's round trip, with and without the
/// proxy.
pub(crate) const PINGS: usize = 20;

/// How long each phase of (k) lasts, and the TTL of its locks.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FaultPlan {
    /// The whole phase, from the fault's start to the deadline, in a state
    /// with no master paused.
    pub(crate) phase: Duration,
    /// Its first part, not counted.
    pub(crate) warm_up: Duration,
    /// The TTL of (k)'s clients (both contenders): a paused state lasts
    /// [`PAUSED_TTLS`] of it.
    pub(crate) ttl: Duration,
}

/// How many TTLs a paused state lasts at least: a stall of one TTL, one
/// TTL after the pause, shows whole inside it.
pub(crate) const PAUSED_TTLS: u32 = 3;

impl FaultPlan {
    /// Phases of 3 s, paused ones of 6 s: a TTL of 2 s.
    pub(crate) fn full() -> Self {
        Self {
            phase: Duration::from_secs(3),
            warm_up: Duration::from_millis(200),
            ttl: Duration::from_secs(2),
        }
    }

    /// Eight phases of 0.7 s and four paused ones of 3 s (a TTL of 1 s),
    /// about 20 s in all (`make bench-quick` runs inside `make test`). A
    /// smoke run, but a paused state still lasts three TTLs.
    pub(crate) fn quick() -> Self {
        Self {
            phase: Duration::from_millis(700),
            warm_up: Duration::from_millis(200),
            ttl: Duration::from_secs(1),
        }
    }

    /// A paused state's phase: [`PAUSED_TTLS`] TTLs, or the usual phase
    /// where that is longer.
    pub(crate) fn paused(&self) -> Duration {
        self.phase.max(self.ttl * PAUSED_TTLS)
    }

    /// This plan for `state`: a paused one lasts [`paused`](Self::paused).
    fn of(&self, state: State) -> Self {
        match state {
            State::Paused(_) => Self {
                phase: self.paused(),
                ..*self
            },
            _ => *self,
        }
    }

    /// The counted part of a phase.
    pub(crate) fn counted(&self) -> Duration {
        self.phase.saturating_sub(self.warm_up)
    }
}

/// A fault state; the faulted masters are always the last ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    Healthy,
    /// Healthy again, after every fault: with the first, the baseline of
    /// "vs healthy" (the machine's load drifts over a run).
    HealthyAgain,
    /// This many masters stopped with `SIGSTOP`.
    Paused(usize),
    /// One master killed, restarted empty after the phase.
    Killed,
    /// One master behind the delaying proxy.
    Slowed,
}

impl State {
    /// Part of the phase's key names.
    fn tag(self) -> String {
        match self {
            State::Healthy => "healthy".to_owned(),
            State::HealthyAgain => "healthy-again".to_owned(),
            State::Paused(n) => format!("paused{n}"),
            State::Killed => "killed1".to_owned(),
            State::Slowed => "slowed1".to_owned(),
        }
    }

    pub(crate) fn label(self, nodes: usize) -> String {
        match self {
            State::Healthy => format!("healthy, {nodes} masters"),
            State::HealthyAgain => "healthy again, after the faults".to_owned(),
            State::Paused(n) => format!("{n} of {nodes} paused"),
            State::Killed => format!("1 of {nodes} killed"),
            State::Slowed => format!("1 of {nodes} slowed by {} ms", SLOW_ROUND_TRIP.as_millis()),
        }
    }

    /// The masters this state faults: the last ones.
    fn faulted(self, nodes: usize) -> Range<usize> {
        let count = match self {
            State::Healthy | State::HealthyAgain => 0,
            State::Paused(n) => n,
            State::Killed | State::Slowed => 1,
        };
        nodes.saturating_sub(count)..nodes
    }
}

/// The states a run of `nodes` masters goes through: a fault only where the
/// quorum survives it (none with one master).
pub(crate) fn states(nodes: usize) -> Vec<State> {
    let tolerated = nodes.saturating_sub(1) / 2;
    if tolerated == 0 {
        return Vec::new();
    }
    let mut states = vec![State::Healthy, State::Paused(1)];
    if tolerated >= 2 {
        states.push(State::Paused(2));
    }
    states.extend([State::Killed, State::Slowed, State::HealthyAgain]);
    states
}

/// One contender in one state.
#[derive(Clone, Default)]
pub(crate) struct Phase {
    /// Cycles (acquire and release) that ended in the counted part.
    pub(crate) cycles: u64,
    /// Acquires that failed in the counted part.
    pub(crate) failures: u64,
    /// Why, the error's text cut short, and how often.
    pub(crate) errors: BTreeMap<String, u64>,
    /// The counted part's length.
    pub(crate) counted: Duration,
    /// Acquires that ended in the counted part, successful ones.
    pub(crate) acquire: Latencies,
    /// Tasks still in a cycle at the end of the grace, aborted.
    pub(crate) cut_off: u64,
    /// The longest time without a grant, across the tasks, from the end of
    /// the warm-up until the last task ended.
    pub(crate) worst_gap: Duration,
    /// The largest lateness of the [`Heartbeat`] on the client's runtime
    /// over the same time: the whole runtime held up.
    pub(crate) runtime_stall: Duration,
    /// The longest one worker of that runtime stayed in one stretch of
    /// polls over the same time: one poll blocked it, even where the other
    /// worker kept the runtime going.
    pub(crate) worker_stall: Duration,
    /// Keys of the phase on each master once it was over.
    pub(crate) keys_left: Vec<u64>,
    /// Resident set of this process in KiB: at the start, at the deadline,
    /// and the peak of the samples.
    pub(crate) rss_start: u64,
    pub(crate) rss_end: u64,
    pub(crate) rss_peak: u64,
}

impl Phase {
    pub(crate) fn per_second(&self) -> f64 {
        if self.counted.is_zero() {
            return f64::NAN;
        }
        self.cycles as f64 / self.counted.as_secs_f64()
    }

    pub(crate) fn keys_left_total(&self) -> u64 {
        self.keys_left.iter().sum()
    }

    fn failed(&mut self, error: &str) {
        self.failures += 1;
        let error: String = error.chars().take(160).collect();
        if self.errors.len() < 10 || self.errors.contains_key(&error) {
            *self.errors.entry(error).or_insert(0) += 1;
        }
    }

    fn merge(&mut self, other: &Phase) {
        self.cycles += other.cycles;
        self.failures += other.failures;
        for (error, count) in &other.errors {
            if self.errors.len() < 10 || self.errors.contains_key(error) {
                *self.errors.entry(error.clone()).or_insert(0) += count;
            }
        }
        self.acquire.merge(&other.acquire);
    }
}

/// Everything (k) measured.
#[derive(Default)]
pub(crate) struct Faults {
    pub(crate) nodes: usize,
    pub(crate) tasks: usize,
    pub(crate) plan: Option<FaultPlan>,
    /// This library's per-node timeout in (k)'s clients.
    pub(crate) node_timeout: Duration,
    pub(crate) states: Vec<(State, BTreeMap<Kind, Phase>)>,
    /// A `PING` to the slowed master through the proxy with its delay on,
    /// and straight to it: p50 of [`PINGS`] one after the other, in µs.
    pub(crate) ping_slowed: Option<(f64, f64)>,
}

impl Faults {
    pub(crate) fn phase(&self, state: State, kind: Kind) -> Option<&Phase> {
        self.states
            .iter()
            .find(|(s, _)| *s == state)
            .and_then(|(_, phases)| phases.get(&kind))
    }

    /// `kind`'s cycles per second in `state` over the mean of its healthy
    /// phases (the first, and the last where it ran).
    pub(crate) fn vs_healthy(&self, state: State, kind: Kind) -> Option<f64> {
        let healthy: Vec<f64> = [State::Healthy, State::HealthyAgain]
            .into_iter()
            .filter_map(|healthy| self.phase(healthy, kind))
            .map(Phase::per_second)
            .collect();
        if healthy.is_empty() {
            return None;
        }
        let mean = healthy.iter().sum::<f64>() / healthy.len() as f64;
        ratio_value(self.phase(state, kind)?.per_second(), mean)
    }
}

/// Runs (k) for `kinds` (ours and rslock; the floors are left out), on
/// clients of its own: `common` with the TTL of `plan` and the per-node
/// timeout `node_timeout` (the other scenarios').
pub(crate) fn run(
    runtime: &Runtime,
    cluster: &RedisCluster,
    common: Common,
    node_timeout: Duration,
    kinds: &[Kind],
    tasks: usize,
    plan: FaultPlan,
) -> Result<Faults, String> {
    let nodes = cluster.len();
    let started = Instant::now();
    let kinds: Vec<Kind> = kinds
        .iter()
        .copied()
        .filter(|kind| matches!(kind, Kind::Ours | Kind::Rslock))
        .collect();
    let common = Common {
        ttl: plan.ttl,
        node_timeout: Some(node_timeout),
        ..common
    };
    let contenders = Arc::new(runtime.block_on(Contenders::connect(&cluster.urls(), common))?);
    let contenders = &contenders;
    runtime.block_on(warm_up(contenders, 20, Duration::from_secs(5)));
    let mut out = Faults {
        nodes,
        tasks,
        plan: Some(plan),
        node_timeout: contenders.ours.settings().node_timeout(),
        states: Vec::new(),
        ping_slowed: None,
    };
    // A short phase each first, not counted, as in (b): the first burst of
    // 64 tasks also pays for growing the runtime's and the allocator's
    // structures, which would fall on whoever goes first.
    for &kind in &kinds {
        let first = FaultPlan {
            phase: plan.phase / 4,
            warm_up: Duration::ZERO,
            ..plan
        };
        runtime.block_on(async {
            let tag = format!("k:first:{}", kind.short());
            let _ = measure(contenders, kind, tasks, &tag, first).await;
            let _ = tokio::time::timeout(SHUTDOWN_BUDGET, contenders.ours.settled()).await;
        });
    }
    for (turn, state) in states(nodes).into_iter().enumerate() {
        if state == State::HealthyAgain {
            // The killed master came back empty: this library's client
            // reconnects in the background, within its longest backoff.
            runtime.block_on(connected(contenders, nodes));
        }
        let plan = plan.of(state);
        crate::progress(&format!(
            "(k) {}: {} per contender",
            state.label(nodes),
            seconds(plan.phase)
        ));
        let slowed = match state {
            State::Slowed => Some(Slowed::start(
                runtime,
                cluster,
                state.faulted(nodes).start,
                contenders.common,
            )?),
            _ => None,
        };
        if let Some(slowed) = &slowed {
            out.ping_slowed = Some(slowed.calibrate(runtime, cluster)?);
        }
        let clients = slowed.as_ref().map_or(contenders, |s| &s.contenders);
        let mut phases = BTreeMap::new();
        for kind in rotated(&kinds, turn) {
            let fault = Faulting {
                cluster,
                state,
                proxy: slowed.as_ref().map(|s| &s.proxy),
            };
            phases.insert(kind, one_phase(runtime, &fault, clients, kind, tasks, plan));
        }
        if let Some(slowed) = slowed {
            slowed.stop(runtime);
        }
        out.states.push((state, phases));
    }
    runtime.block_on(async {
        let _ = tokio::time::timeout(SHUTDOWN_BUDGET, contenders.ours.shutdown()).await;
    });
    crate::progress(&format!("(k) done in {}", seconds(started.elapsed())));
    Ok(out)
}

/// Waits (at most [`RECONNECT_BUDGET`]) until this library's client has
/// every node connected.
async fn connected(contenders: &Contenders, nodes: usize) {
    let deadline = Instant::now() + RECONNECT_BUDGET;
    while contenders.ours.connected_nodes() < nodes && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub(crate) fn seconds(duration: Duration) -> String {
    format!("{:.1} s", duration.as_secs_f64())
}

/// The proxy's fault in the slowed state: half the added round trip each
/// way, no jitter, no stalls.
fn slow() -> Fault {
    Fault::Slow {
        latency: SLOW_ROUND_TRIP / 2,
        jitter: Duration::ZERO,
        stall_rate: 0.0,
        stall: Duration::ZERO,
    }
}

/// Puts a state's fault in place and lifts it.
struct Faulting<'a> {
    cluster: &'a RedisCluster,
    state: State,
    proxy: Option<&'a Proxy>,
}

impl Faulting<'_> {
    fn faulted(&self) -> Range<usize> {
        self.state.faulted(self.cluster.len())
    }

    fn begin(&self) {
        match self.state {
            State::Healthy | State::HealthyAgain => {}
            State::Paused(_) => self.faulted().for_each(|i| self.cluster.node(i).pause()),
            State::Killed => self.faulted().for_each(|i| self.cluster.node(i).kill()),
            State::Slowed => {
                if let Some(proxy) = self.proxy {
                    proxy.set(slow());
                }
            }
        }
    }

    fn end(&self) {
        match self.state {
            State::Healthy | State::HealthyAgain => {}
            State::Paused(_) => self.faulted().for_each(|i| self.cluster.node(i).resume()),
            State::Killed => self.faulted().for_each(|i| self.cluster.node(i).restart()),
            State::Slowed => {
                if let Some(proxy) = self.proxy {
                    proxy.set(Fault::None);
                }
            }
        }
    }
}

/// One contender's phase in one state, the fault put in place and lifted.
fn one_phase(
    runtime: &Runtime,
    fault: &Faulting<'_>,
    clients: &Arc<Contenders>,
    kind: Kind,
    tasks: usize,
    plan: FaultPlan,
) -> Phase {
    let peak = Arc::new(AtomicU64::new(0));
    let sampling = CancellationToken::new();
    let rss_start = rss_kib();
    runtime.spawn(sample_rss(Arc::clone(&peak), sampling.clone()));
    let tag = format!("k:{}:{}", fault.state.tag(), kind.short());
    fault.begin();
    let mut phase = runtime.block_on(measure(clients, kind, tasks, &tag, plan));
    fault.end();
    runtime.block_on(async {
        if kind == Kind::Ours {
            let _ = tokio::time::timeout(SHUTDOWN_BUDGET, clients.ours.settled()).await;
        }
        if matches!(fault.state, State::Paused(_)) {
            tokio::time::sleep(SETTLE).await;
        }
    });
    let pattern = format!("{tag}:*");
    phase.keys_left = fault
        .cluster
        .nodes()
        .iter()
        .map(|node| node.keys(&pattern).len() as u64)
        .collect();
    sampling.cancel();
    phase.rss_start = rss_start;
    phase.rss_peak = peak.load(Ordering::Relaxed).max(rss_kib());
    phase
}

/// `tasks` tasks cycling until the deadline; see the module docs for what
/// counts.
async fn measure(
    clients: &Arc<Contenders>,
    kind: Kind,
    tasks: usize,
    tag: &str,
    plan: FaultPlan,
) -> Phase {
    let started = Instant::now();
    let counted = (started + plan.warm_up)..(started + plan.phase);
    let deadline = counted.end;
    let heartbeat = Heartbeat::start(Heartbeat::EVERY);
    let gaps = Arc::new(Gaps::new(counted.start));
    // One tally per task, read after the task ended or was aborted.
    let tallies: Vec<Arc<Mutex<Phase>>> = (0..tasks).map(|_| Arc::default()).collect();
    let handles: Vec<_> = tallies
        .iter()
        .enumerate()
        .map(|(task, tally)| {
            let clients = Arc::clone(clients);
            let tally = Arc::clone(tally);
            let gaps = Arc::clone(&gaps);
            let counted = counted.clone();
            let tag = tag.to_owned();
            tokio::spawn(async move {
                for i in 0..MAX_CYCLES_PER_TASK {
                    if Instant::now() >= deadline {
                        break;
                    }
                    let key = format!("{tag}:{task}:{i}");
                    let began = Instant::now();
                    match clients.try_acquire(kind, &key).await {
                        Ok(acquired) => {
                            let acquired_at = Instant::now();
                            gaps.grant(acquired_at);
                            clients.release(acquired.held).await;
                            let ended = Instant::now();
                            let mut tally = tally.lock().unwrap_or_else(PoisonError::into_inner);
                            if counted.contains(&acquired_at) {
                                tally.acquire.record(acquired_at - began);
                            }
                            if counted.contains(&ended) {
                                tally.cycles += 1;
                            }
                        }
                        Err(error) => {
                            if counted.contains(&Instant::now()) {
                                tally
                                    .lock()
                                    .unwrap_or_else(PoisonError::into_inner)
                                    .failed(&error);
                            }
                            tokio::time::sleep(AFTER_FAILURE).await;
                        }
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep_until(counted.start.into()).await;
    // The warm-up's lateness is not counted.
    heartbeat.take();
    tokio::time::sleep_until(deadline.into()).await;
    let rss_end = rss_kib();
    let aborts: Vec<_> = handles.iter().map(|h| h.abort_handle()).collect();
    let ended = tokio::time::timeout_at(
        (deadline + GRACE).into(),
        futures::future::join_all(handles),
    )
    .await;
    let mut cut_off = 0;
    match ended {
        Ok(results) => {
            for result in results {
                // A task only panics on a bug in this program.
                result.expect("a (k) task panicked");
            }
        }
        Err(_) => {
            for abort in aborts.iter().filter(|abort| !abort.is_finished()) {
                abort.abort();
                cut_off += 1;
            }
        }
    }
    let stalls = heartbeat.worst();
    let mut total = Phase {
        counted: plan.counted(),
        cut_off,
        worst_gap: gaps.worst(),
        runtime_stall: stalls.runtime,
        worker_stall: stalls.worker,
        rss_end,
        ..Phase::default()
    };
    for tally in &tallies {
        total.merge(&tally.lock().unwrap_or_else(PoisonError::into_inner));
    }
    total
}

/// The longest time without a grant across the tasks of a phase, from
/// `from` (the end of its warm-up) on. Grants are stamped by their tasks
/// and may arrive a few µs out of order; only a later one ends a gap.
struct Gaps {
    from: Instant,
    /// The latest grant, in µs after `from`.
    last_us: AtomicU64,
    worst_us: AtomicU64,
}

impl Gaps {
    fn new(from: Instant) -> Self {
        Self {
            from,
            last_us: AtomicU64::new(0),
            worst_us: AtomicU64::new(0),
        }
    }

    fn grant(&self, at: Instant) {
        let Some(since) = at.checked_duration_since(self.from) else {
            return;
        };
        let us = u64::try_from(since.as_micros()).unwrap_or(u64::MAX);
        let last = self.last_us.fetch_max(us, Ordering::Relaxed);
        if us > last {
            self.worst_us.fetch_max(us - last, Ordering::Relaxed);
        }
    }

    fn worst(&self) -> Duration {
        Duration::from_micros(self.worst_us.load(Ordering::Relaxed))
    }
}

/// The slowed state's clients and the proxy in front of its master.
struct Slowed {
    /// The proxy's own runtime, so that its timers do not queue behind the
    /// 64 tasks.
    runtime: Runtime,
    proxy: Proxy,
    contenders: Arc<Contenders>,
}

impl Slowed {
    fn start(
        runtime: &Runtime,
        cluster: &RedisCluster,
        node: usize,
        common: Common,
    ) -> Result<Self, String> {
        let proxy_runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("bench-proxy")
            .enable_all()
            .build()
            .map_err(|err| format!("proxy runtime: {err}"))?;
        let upstream = SocketAddr::from((Ipv4Addr::LOCALHOST, cluster.node(node).port()));
        let proxy = proxy_runtime
            .block_on(Proxy::start(upstream, 35))
            .map_err(|err| format!("proxy: {err}"))?;
        let mut urls = cluster.urls();
        urls[node] = proxy.url();
        let contenders = Arc::new(runtime.block_on(Contenders::connect(&urls, common))?);
        // rslock connects on first use and loads its script on the first
        // NOSCRIPT: not inside the phase.
        runtime.block_on(warm_up(&contenders, 20, Duration::from_secs(5)));
        Ok(Self {
            runtime: proxy_runtime,
            proxy,
            contenders,
        })
    }

    /// The round trip the phase's clients meet: `PING`s through the proxy
    /// with its delay on, and straight to the master, one after the other;
    /// p50s in µs.
    fn calibrate(&self, runtime: &Runtime, cluster: &RedisCluster) -> Result<(f64, f64), String> {
        let master = self.proxy.upstream().port();
        let direct = cluster
            .nodes()
            .iter()
            .find(|node| node.port() == master)
            .map(redlock_tests::RedisNode::url)
            .ok_or("the slowed master is not in the cluster")?;
        self.proxy.set(slow());
        let through = runtime.block_on(ping_p50(&self.proxy.url()));
        self.proxy.set(Fault::None);
        Ok((through?, runtime.block_on(ping_p50(&direct))?))
    }

    fn stop(self, runtime: &Runtime) {
        let Slowed {
            runtime: proxy_runtime,
            proxy,
            contenders,
        } = self;
        runtime.block_on(async {
            let _ = tokio::time::timeout(SHUTDOWN_BUDGET, contenders.ours.shutdown()).await;
        });
        drop(contenders);
        drop(proxy);
        proxy_runtime.shutdown_timeout(Duration::from_secs(1));
    }
}

/// The p50 of [`PINGS`] `PING`s to `url`, one after the other, in µs.
async fn ping_p50(url: &str) -> Result<f64, String> {
    let client = redis::Client::open(url).map_err(|err| format!("{url}: {err}"))?;
    let mut connection = client
        .get_multiplexed_async_connection()
        .await
        .map_err(|err| format!("{url}: {err}"))?;
    let mut latencies = Latencies::new();
    for _ in 0..PINGS {
        let started = Instant::now();
        redis::cmd("PING")
            .query_async::<String>(&mut connection)
            .await
            .map_err(|err| format!("{url}: PING: {err}"))?;
        latencies.record(started.elapsed());
    }
    Ok(latencies.p50())
}

/// `VmRSS` of this process in KiB, 0 where `/proc` does not tell.
pub(crate) fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Keeps the highest [`rss_kib`] in `peak` until `stop` (or about half an
/// hour of samples).
async fn sample_rss(peak: Arc<AtomicU64>, stop: CancellationToken) {
    for _ in 0..100_000 {
        peak.fetch_max(rss_kib(), Ordering::Relaxed);
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep(RSS_EVERY) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_fault_only_what_the_quorum_survives() {
        assert!(states(1).is_empty());
        assert_eq!(
            states(3),
            [
                State::Healthy,
                State::Paused(1),
                State::Killed,
                State::Slowed,
                State::HealthyAgain
            ]
        );
        assert_eq!(states(5).len(), 6);
        assert_eq!(State::Paused(2).faulted(5), 3..5);
        assert_eq!(State::Killed.faulted(5), 4..5);
        assert_eq!(State::Healthy.faulted(5), 5..5);
    }

    #[test]
    fn a_paused_state_lasts_three_ttls() {
        for plan in [FaultPlan::full(), FaultPlan::quick()] {
            assert!(plan.of(State::Paused(1)).phase >= plan.ttl * 3);
            assert_eq!(plan.of(State::Killed).phase, plan.phase);
        }
    }

    #[test]
    fn the_worst_gap_is_the_longest_time_without_a_grant() {
        let from = Instant::now();
        let gaps = Gaps::new(from);
        let ms = Duration::from_millis;
        // Before the count: no gap. Out of order: no gap either.
        gaps.grant(from.checked_sub(ms(50)).unwrap_or(from));
        gaps.grant(from + ms(3));
        gaps.grant(from + ms(10));
        gaps.grant(from + ms(8));
        gaps.grant(from + ms(40));
        gaps.grant(from + ms(41));
        assert_eq!(gaps.worst(), ms(30));
    }

    #[test]
    fn rss_is_read_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(rss_kib() > 0);
        }
    }
}
