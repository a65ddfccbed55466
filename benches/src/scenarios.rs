//! The scenarios. Each runs the contenders interleaved (by cycle or by short
//! phase, in an order that rotates), so machine noise hits them alike.
//!
//! Every loop is bounded twice: by a count and by a time budget.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use redlock_tests::RedisCluster;
use tokio::runtime::Runtime;
use tokio_util::sync::CancellationToken;

use crate::contenders::{Contenders, Kind};
use crate::cpu;
use crate::monitor::Monitor;
use crate::stats::Latencies;

/// Longest any single acquire or release may take before it counts as failed
/// (rslock waits for its 500 ms response timeout on a paused node).
const OP_TIMEOUT: Duration = Duration::from_secs(5);

/// `rounds` rounded up to a whole number of rotations of `kinds`: then every
/// contender runs in every position of a round equally often. (Run last in a
/// round, a contender meets a machine that the others warmed up and left
/// with the most allocator and runtime state; in contention, the last one
/// won whichever library it was.)
pub(crate) fn fair_rounds<T>(rounds: usize, kinds: &[T]) -> usize {
    let len = kinds.len().max(1);
    rounds.max(1).div_ceil(len) * len
}

/// `kinds` rotated by `turn`, so that nobody always goes first.
pub(crate) fn rotated(kinds: &[Kind], turn: usize) -> Vec<Kind> {
    let mut order = kinds.to_vec();
    if !order.is_empty() {
        let len = order.len();
        order.rotate_left(turn % len);
    }
    order
}

/// Scenario (a), and each paused level of (d): one client, acquire then
/// release on a fresh key, one after the other.
#[derive(Clone, Default)]
pub(crate) struct Sequential {
    pub(crate) acquire: Latencies,
    pub(crate) release: Latencies,
    /// Floor only: when the quorum-th `OK` arrived.
    pub(crate) quorum: Latencies,
    pub(crate) attempts: u64,
    pub(crate) failures: u64,
    pub(crate) timeouts: u64,
    /// Why acquires failed: the error's text (cut short), and how often.
    pub(crate) errors: BTreeMap<String, u64>,
}

impl Sequential {
    pub(crate) fn success_rate(&self) -> f64 {
        if self.attempts == 0 {
            return f64::NAN;
        }
        (self.attempts - self.failures - self.timeouts) as f64 / self.attempts as f64
    }

    /// An acquire that got no answer within [`OP_TIMEOUT`].
    pub(crate) fn timed_out(&mut self) {
        self.timeouts += 1;
        *self
            .errors
            .entry("no answer within 5 s".to_owned())
            .or_insert(0) += 1;
    }

    /// An acquire that failed: its error, cut short, is counted among at
    /// most 20 different ones.
    pub(crate) fn failed(&mut self, error: &str) {
        self.failures += 1;
        let error: String = error.chars().take(160).collect();
        if self.errors.len() < 20 || self.errors.contains_key(&error) {
            *self.errors.entry(error).or_insert(0) += 1;
        }
    }
}

/// One acquire+release cycle on `key`, recorded into `stats`.
async fn cycle(contenders: &Contenders, kind: Kind, key: &str, stats: &mut Sequential) {
    stats.attempts += 1;
    let started = Instant::now();
    let acquired = tokio::time::timeout(OP_TIMEOUT, contenders.try_acquire(kind, key)).await;
    let acquired = match acquired {
        Err(_) => return stats.timed_out(),
        Ok(Err(error)) => return stats.failed(&error),
        Ok(Ok(acquired)) => acquired,
    };
    stats.acquire.record(started.elapsed());
    if let Some(at) = acquired.quorum_at {
        stats.quorum.record(at - started);
    }
    let releasing = Instant::now();
    if tokio::time::timeout(OP_TIMEOUT, contenders.release(acquired.held))
        .await
        .is_ok()
    {
        stats.release.record(releasing.elapsed());
    }
}

/// Warms every contender up: connections (rslock connects on first use),
/// script caches (rslock loads its release script on the first NOSCRIPT),
/// allocator and branch predictors.
pub(crate) async fn warm_up(contenders: &Contenders, cycles: usize, budget: Duration) {
    let deadline = Instant::now() + budget;
    let mut ignored = Sequential::default();
    for i in 0..cycles {
        if Instant::now() >= deadline {
            break;
        }
        for kind in Kind::ALL {
            cycle(
                contenders,
                kind,
                &format!("warm:{}:{i}", kind.short()),
                &mut ignored,
            )
            .await;
        }
    }
}

/// (a) One client, acquire then release on fresh keys; the contenders take
/// turns cycle by cycle.
pub(crate) async fn single_client(
    contenders: &Contenders,
    kinds: &[Kind],
    cycles: usize,
    budget: Duration,
) -> BTreeMap<Kind, Sequential> {
    let deadline = Instant::now() + budget;
    let mut results: BTreeMap<Kind, Sequential> = BTreeMap::new();
    for i in 0..cycles {
        if Instant::now() >= deadline {
            break;
        }
        for kind in rotated(kinds, i) {
            let key = format!("a:{}:{i}", kind.short());
            cycle(contenders, kind, &key, results.entry(kind).or_default()).await;
        }
    }
    results
}

/// (b) Many tasks, each on its own keys, as fast as they can.
#[derive(Clone, Default)]
pub(crate) struct Throughput {
    pub(crate) cycles: u64,
    pub(crate) failures: u64,
    pub(crate) elapsed: Duration,
    pub(crate) acquire: Latencies,
    /// CPU time of this process (the client) during the phases.
    pub(crate) client_cpu: Duration,
    /// CPU time of the redis-servers during the phases.
    pub(crate) server_cpu: Duration,
    /// Ours only: nodes where a release of a held lock found no key of ours
    /// ([`Contenders::node_misses`]).
    pub(crate) node_misses: u64,
    /// Keys of the phases still on the servers once the contender is done
    /// (for ours, after `shutdown`): locks left behind until their TTL.
    pub(crate) keys_left: u64,
    /// Each round's phase on its own: cycles per second and CPU per cycle
    /// (µs), in round order, so that two contenders can be compared round
    /// by round ([`paired_median`]).
    pub(crate) rounds: Vec<(f64, f64)>,
}

impl Throughput {
    pub(crate) fn per_second(&self) -> f64 {
        if self.elapsed.is_zero() {
            return f64::NAN;
        }
        self.cycles as f64 / self.elapsed.as_secs_f64()
    }

    /// Microseconds of client CPU per cycle.
    pub(crate) fn client_us_per_cycle(&self) -> f64 {
        per_cycle(self.client_cpu, self.cycles)
    }

    /// Microseconds of server CPU (all nodes) per cycle.
    pub(crate) fn server_us_per_cycle(&self) -> f64 {
        per_cycle(self.server_cpu, self.cycles)
    }

    /// Microseconds of CPU per cycle, client and servers together: what a
    /// cycle costs the machine.
    pub(crate) fn cpu_us_per_cycle(&self) -> f64 {
        per_cycle(self.client_cpu + self.server_cpu, self.cycles)
    }
}

/// The median over rounds of `figure(ours) / figure(theirs)`, each ratio
/// taken within one round. Phases minutes apart on a shared VM move by
/// ±15 %; the two phases of one round are seconds apart, so their ratio
/// moves much less, and the median drops the round a burst of other work
/// fell into.
pub(crate) fn paired_median(
    ours: &Throughput,
    theirs: &Throughput,
    figure: fn(&(f64, f64)) -> f64,
) -> f64 {
    crate::stats::paired_median(
        ours.rounds
            .iter()
            .zip(&theirs.rounds)
            .map(|(o, t)| (figure(o), figure(t))),
    )
    .unwrap_or(f64::NAN)
}

fn per_cycle(cpu: Duration, cycles: u64) -> f64 {
    if cpu.is_zero() || cycles == 0 {
        return f64::NAN;
    }
    cpu.as_secs_f64() * 1e6 / cycles as f64
}

/// (b) `tasks` tasks on distinct keys for `rounds` phases of `phase` per
/// contender, phases interleaved.
pub(crate) async fn throughput(
    contenders: &Arc<Contenders>,
    kinds: &[Kind],
    cluster: &RedisCluster,
    servers: &[u32],
    tasks: usize,
    rounds: usize,
    phase: Duration,
) -> BTreeMap<Kind, Throughput> {
    // A short phase each first, not counted: the first burst of 64 tasks
    // also pays for growing the runtime's and the allocator's structures.
    for &kind in kinds {
        let _ = throughput_phase(contenders, kind, tasks, usize::MAX, phase / 4).await;
    }
    let mut results: BTreeMap<Kind, Throughput> = BTreeMap::new();
    for round in 0..fair_rounds(rounds, kinds) {
        for kind in rotated(kinds, round) {
            let (client_before, servers_before) = cpu::snapshot(servers);
            let misses_before = contenders.node_misses.load(Ordering::Relaxed);
            let outcome = throughput_phase(contenders, kind, tasks, round, phase).await;
            let (client_after, servers_after) = cpu::snapshot(servers);
            let total = results.entry(kind).or_default();
            let mut phase_figures = outcome.clone();
            phase_figures.client_cpu = client_after.saturating_sub(client_before);
            phase_figures.server_cpu = servers_after.saturating_sub(servers_before);
            total
                .rounds
                .push((phase_figures.per_second(), phase_figures.cpu_us_per_cycle()));
            if kind == Kind::Ours {
                contenders.ours.settled().await;
                total.node_misses += contenders.node_misses.load(Ordering::Relaxed) - misses_before;
            }
            let pattern = format!("b:{}:{round}:*", kind.short());
            total.keys_left += cluster
                .nodes()
                .iter()
                .map(|node| node.keys(&pattern).len() as u64)
                .sum::<u64>();
            total.cycles += outcome.cycles;
            total.failures += outcome.failures;
            total.elapsed += outcome.elapsed;
            total.acquire.merge(&outcome.acquire);
            total.client_cpu += client_after.saturating_sub(client_before);
            total.server_cpu += servers_after.saturating_sub(servers_before);
        }
    }
    results
}

/// Upper bound on the cycles of one task in one phase, besides its time.
const MAX_CYCLES_PER_TASK: u64 = 10_000_000;

async fn throughput_phase(
    contenders: &Arc<Contenders>,
    kind: Kind,
    tasks: usize,
    round: usize,
    phase: Duration,
) -> Throughput {
    let started = Instant::now();
    let deadline = started + phase;
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let contenders = Arc::clone(contenders);
            tokio::spawn(async move {
                let mut mine = Throughput::default();
                let mut stats = Sequential::default();
                for i in 0..MAX_CYCLES_PER_TASK {
                    if Instant::now() >= deadline {
                        break;
                    }
                    let key = format!("b:{}:{round}:{task}:{i}", kind.short());
                    cycle(&contenders, kind, &key, &mut stats).await;
                }
                mine.cycles = stats.attempts - stats.failures - stats.timeouts;
                mine.failures = stats.failures + stats.timeouts;
                mine.acquire = stats.acquire;
                mine
            })
        })
        .collect();
    let mut total = Throughput::default();
    for handle in handles {
        // A task only panics on a bug in this program.
        let mine = handle.await.expect("a throughput task panicked");
        total.cycles += mine.cycles;
        total.failures += mine.failures;
        total.acquire.merge(&mine.acquire);
    }
    // Tasks finish the cycle they are in at the deadline: count that time.
    total.elapsed = started.elapsed();
    total
}

/// (c) Many tasks contending for one key.
#[derive(Clone, Default)]
pub(crate) struct Contention {
    pub(crate) holds: u64,
    pub(crate) elapsed: Duration,
    /// From the moment a holder starts its release to the moment the next
    /// holder's acquire returns.
    pub(crate) idle_gap: Latencies,
    /// Time some task held the lock: from its acquire's return to the start
    /// of its release (its work under the lock, [`HOLD`] asked), summed over
    /// the `timed_holds` holds that ended within the phase.
    pub(crate) held: Duration,
    pub(crate) timed_holds: u64,
    /// Two holders at once, as seen by this process: must stay 0.
    pub(crate) overlaps: u64,
    pub(crate) errors: u64,
}

impl Contention {
    pub(crate) fn holds_per_second(&self) -> f64 {
        if self.elapsed.is_zero() {
            return f64::NAN;
        }
        self.holds as f64 / self.elapsed.as_secs_f64()
    }

    /// The share of the phase during which some task held the lock.
    pub(crate) fn held_share(&self) -> f64 {
        self.held.as_secs_f64() / self.elapsed.as_secs_f64()
    }

    /// The mean time a holder held the lock, in ms: [`HOLD`] and the hop to
    /// the blocking pool and back.
    pub(crate) fn mean_hold_ms(&self) -> f64 {
        self.held.as_secs_f64() * 1_000.0 / self.timed_holds as f64
    }

    /// The holds per second the phase would have made with the lock never
    /// idle: the most any contender can reach with these holds.
    pub(crate) fn ceiling(&self) -> f64 {
        1_000.0 / self.mean_hold_ms()
    }
}

/// How long a task of (c) holds the lock: its work under the lock.
pub(crate) const HOLD: Duration = Duration::from_millis(1);
/// The work of a (c) holder: [`HOLD`] slept on a thread of the blocking
/// pool, which the kernel wakes within tens of microseconds; Tokio's timer
/// counts whole milliseconds, and a 1 ms `tokio::time::sleep` lasted about
/// 2.1 ms, so holds/s measured the timer more than the hand-over.
async fn work() {
    tokio::task::spawn_blocking(|| std::thread::sleep(HOLD))
        .await
        .expect("the work under the lock panicked");
}

/// How long a task of (c) waits after releasing before it wants the lock
/// again, so that the lock goes to one of the tasks waiting for it rather
/// than straight back to the releasing task. Short enough that 16 tasks
/// want the lock about three times as often as it can be held (16 / (5 ms
/// on Tokio's timer, about 6 ms, + the hold) against 1 / the hold): the
/// phase measures the hand-over, not how often tasks come back.
pub(crate) const REST: Duration = Duration::from_millis(5);

#[derive(Default)]
struct Shared {
    holding: bool,
    released_at: Option<Instant>,
    holds: u64,
    held: Duration,
    timed_holds: u64,
    overlaps: u64,
    idle_gap: Latencies,
}

/// (c) `tasks` tasks of one client contend for one key until `holds` holds
/// (or `budget`), `rounds` times per contender, interleaved.
pub(crate) async fn contention(
    contenders: &Arc<Contenders>,
    kinds: &[Kind],
    tasks: usize,
    holds: u64,
    rounds: usize,
    budget: Duration,
) -> BTreeMap<Kind, Contention> {
    let mut results: BTreeMap<Kind, Contention> = BTreeMap::new();
    for round in 0..fair_rounds(rounds, kinds) {
        for kind in rotated(kinds, round) {
            let outcome = contention_phase(contenders, kind, tasks, holds, round, budget).await;
            let total = results.entry(kind).or_default();
            total.holds += outcome.holds;
            total.elapsed += outcome.elapsed;
            total.held += outcome.held;
            total.timed_holds += outcome.timed_holds;
            total.overlaps += outcome.overlaps;
            total.errors += outcome.errors;
            total.idle_gap.merge(&outcome.idle_gap);
        }
    }
    results
}

async fn contention_phase(
    contenders: &Arc<Contenders>,
    kind: Kind,
    tasks: usize,
    target: u64,
    round: usize,
    budget: Duration,
) -> Contention {
    let started = Instant::now();
    let deadline = started + budget;
    let key = Arc::<str>::from(format!("c:{}:{round}", kind.short()));
    let shared = Arc::new(Mutex::new(Shared::default()));
    let done = CancellationToken::new();
    let finished_at = Arc::new(Mutex::new(None::<Instant>));
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let contenders = Arc::clone(contenders);
            let key = Arc::clone(&key);
            let shared = Arc::clone(&shared);
            let done = done.clone();
            let finished_at = Arc::clone(&finished_at);
            tokio::spawn(async move {
                let mut errors = 0u64;
                // Each turn ends in a hold, an error, the deadline or `done`;
                // the count bound is a second guard.
                for _ in 0..target.saturating_mul(1_000).max(1_000) {
                    let acquired = tokio::select! {
                        () = done.cancelled() => break,
                        acquired = contenders.acquire_until(kind, &key, deadline) => acquired,
                    };
                    let held = match acquired {
                        Ok(Some(held)) => held,
                        Ok(None) => break,
                        Err(_) => {
                            errors += 1;
                            continue;
                        }
                    };
                    let now = Instant::now();
                    let reached = {
                        let mut s = shared.lock().unwrap_or_else(PoisonError::into_inner);
                        if s.holding {
                            s.overlaps += 1;
                        }
                        s.holding = true;
                        if let Some(released_at) = s.released_at.take() {
                            s.idle_gap
                                .record(now.saturating_duration_since(released_at));
                        }
                        s.holds += 1;
                        s.holds >= target
                    };
                    // The work done under the lock; a second holder meanwhile
                    // would be seen.
                    work().await;
                    {
                        let mut s = shared.lock().unwrap_or_else(PoisonError::into_inner);
                        let released_at = Instant::now();
                        s.holding = false;
                        // The phase ends when its last hold begins.
                        if !reached {
                            s.held += released_at.saturating_duration_since(now);
                            s.timed_holds += 1;
                        }
                        s.released_at = Some(released_at);
                    }
                    if reached {
                        finished_at
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .get_or_insert(now);
                        done.cancel();
                    }
                    let _ = tokio::time::timeout(OP_TIMEOUT, contenders.release(held)).await;
                    // Other work before wanting the lock again, so that it
                    // passes to a task that was waiting for it.
                    tokio::select! {
                        () = done.cancelled() => break,
                        () = tokio::time::sleep(REST) => {}
                    }
                }
                errors
            })
        })
        .collect();
    let mut errors = 0;
    for handle in handles {
        errors += handle.await.expect("a contention task panicked");
    }
    let finished = finished_at
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .unwrap_or_else(Instant::now);
    let shared = std::mem::take(&mut *shared.lock().unwrap_or_else(PoisonError::into_inner));
    Contention {
        holds: shared.holds,
        elapsed: finished - started,
        idle_gap: shared.idle_gap,
        held: shared.held,
        timed_holds: shared.timed_holds,
        overlaps: shared.overlaps,
        errors,
    }
}

/// (d) One level of paused nodes (0: the healthy baseline).
pub(crate) struct PausedLevel {
    pub(crate) paused: usize,
    pub(crate) nodes: usize,
    pub(crate) results: BTreeMap<Kind, Sequential>,
}

/// How many cycles each contender runs per turn in (d), and the bounds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PausedPlan {
    pub(crate) ours_per_turn: usize,
    pub(crate) others_per_turn: usize,
    pub(crate) ours_cycles: u64,
    pub(crate) budget: Duration,
}

/// (d) For each level in `levels`, pauses nodes `0..level` (SIGSTOP) and
/// runs single-client cycles of this library and rslock against the
/// cluster. The floor waits for every node, so it only runs at level 0.
///
/// Level 0 is the healthy baseline at the same pace: with a node paused,
/// this library's release waits one per-node timeout for it, and the
/// machine idles meanwhile; an idle 2-vCPU VM answers the next round trip
/// much more slowly than a busy one (its vCPUs and the servers have to be
/// woken), whatever the client. So the healthy cycles are followed by the
/// same idle time (`pace`), and only the paused nodes differ.
pub(crate) fn paused(
    runtime: &Runtime,
    cluster: &RedisCluster,
    contenders: &Contenders,
    levels: &[usize],
    kinds: &[Kind],
    pace: Duration,
    plan: PausedPlan,
) -> Vec<PausedLevel> {
    let mut out = Vec::new();
    let mut paused_now = 0;
    for &level in levels {
        for node in paused_now..level {
            cluster.node(node).pause();
        }
        paused_now = paused_now.max(level);
        let kinds: Vec<Kind> = kinds
            .iter()
            .copied()
            .filter(|kind| match kind {
                Kind::Ours | Kind::Rslock => true,
                Kind::Floor => level == 0,
                Kind::ScriptFloor | Kind::SafeFloor => false,
            })
            .collect();
        let pace = if level == 0 { pace } else { Duration::ZERO };
        let results = runtime.block_on(paused_level(contenders, &kinds, level, pace, plan));
        out.push(PausedLevel {
            paused: level,
            nodes: cluster.len(),
            results,
        });
    }
    for node in 0..paused_now {
        cluster.node(node).resume();
    }
    out
}

async fn paused_level(
    contenders: &Contenders,
    kinds: &[Kind],
    level: usize,
    pace: Duration,
    plan: PausedPlan,
) -> BTreeMap<Kind, Sequential> {
    let deadline = Instant::now() + plan.budget;
    let mut results: BTreeMap<Kind, Sequential> = BTreeMap::new();
    let mut i = 0usize;
    for turn in 0..usize::MAX {
        let ours_done = results.get(&Kind::Ours).map_or(0, |s| s.attempts);
        if ours_done >= plan.ours_cycles || Instant::now() >= deadline {
            break;
        }
        for kind in rotated(kinds, turn) {
            let per_turn = match kind {
                Kind::Ours => plan.ours_per_turn,
                // Healthy, everyone is as quick as we are.
                _ if level == 0 => plan.ours_per_turn.div_ceil(4),
                _ => plan.others_per_turn,
            };
            for _ in 0..per_turn {
                if Instant::now() >= deadline {
                    break;
                }
                let key = format!("d{level}:{}:{i}", kind.short());
                i += 1;
                cycle(contenders, kind, &key, results.entry(kind).or_default()).await;
                if !pace.is_zero() {
                    tokio::time::sleep(pace).await;
                }
            }
        }
    }
    results
}

/// (e) Commands per node per operation.
#[derive(Clone, Debug, Default)]
pub(crate) struct Commands {
    pub(crate) operations: u64,
    /// Commands sent by the client, per node per acquire: mean over nodes.
    pub(crate) per_acquire: f64,
    /// The same, on the node that got the most.
    pub(crate) per_acquire_max: f64,
    pub(crate) per_release: f64,
    pub(crate) per_release_max: f64,
    /// `INFO commandstats` calls per node per acquire, which also counts the
    /// commands run inside scripts: mean over nodes.
    pub(crate) calls_per_acquire: f64,
    pub(crate) calls_per_release: f64,
    /// Commands the client sent during the acquires, summed over nodes.
    pub(crate) acquire_breakdown: BTreeMap<String, u64>,
    pub(crate) release_breakdown: BTreeMap<String, u64>,
    pub(crate) failures: u64,
}

/// Waits this long after a batch before reading the stats, so that requests
/// completing in the background (slow nodes after a quorum) are counted.
const SETTLE: Duration = Duration::from_millis(100);

/// (e) For each contender: `operations` acquires on fresh keys, counted,
/// then their releases, counted. Counted twice: `INFO commandstats` (every
/// call, scripts' own included) and `MONITOR` (what the client sent).
pub(crate) fn commands(
    runtime: &Runtime,
    cluster: &RedisCluster,
    contenders: &Contenders,
    kinds: &[Kind],
    operations: u64,
) -> Result<BTreeMap<Kind, Commands>, String> {
    let mut out = BTreeMap::new();
    for &kind in kinds {
        let mut result = Commands {
            operations,
            ..Commands::default()
        };
        let counting = Counting::start(cluster)?;
        let held = runtime.block_on(async {
            let mut held = Vec::new();
            for i in 0..operations {
                let key = format!("e:{}:{i}", kind.short());
                match tokio::time::timeout(OP_TIMEOUT, contenders.try_acquire(kind, &key)).await {
                    Ok(Ok(acquired)) => held.push(acquired.held),
                    _ => result.failures += 1,
                }
            }
            tokio::time::sleep(SETTLE).await;
            held
        });
        let counted = counting.finish(cluster, operations)?;
        result.per_acquire = counted.mean;
        result.per_acquire_max = counted.max;
        result.calls_per_acquire = counted.calls;
        result.acquire_breakdown = counted.breakdown;
        let counting = Counting::start(cluster)?;
        runtime.block_on(async {
            for lock in held {
                let _ = tokio::time::timeout(OP_TIMEOUT, contenders.release(lock)).await;
            }
            tokio::time::sleep(SETTLE).await;
        });
        let counted = counting.finish(cluster, operations)?;
        result.per_release = counted.mean;
        result.per_release_max = counted.max;
        result.calls_per_release = counted.calls;
        result.release_breakdown = counted.breakdown;
        out.insert(kind, result);
    }
    Ok(out)
}

/// Stats reset and a `MONITOR` on every node.
struct Counting {
    monitors: Vec<Monitor>,
}

struct Counted {
    mean: f64,
    max: f64,
    calls: f64,
    breakdown: BTreeMap<String, u64>,
}

/// The counting's own commands, left out.
fn harness_command(name: &str) -> bool {
    name == "info" || name == "monitor" || name.starts_with("config")
}

impl Counting {
    fn start(cluster: &RedisCluster) -> Result<Self, String> {
        for node in cluster.nodes() {
            node.reset_stats();
        }
        let monitors = cluster
            .nodes()
            .iter()
            .map(|node| Monitor::start(node.port()))
            .collect::<Result<_, _>>()?;
        Ok(Self { monitors })
    }

    fn finish(self, cluster: &RedisCluster, operations: u64) -> Result<Counted, String> {
        let operations = operations.max(1) as f64;
        let mut breakdown = BTreeMap::new();
        let mut per_node = Vec::new();
        for monitor in self.monitors {
            let seen = monitor.finish()?;
            let mut total = 0;
            for (name, count) in seen.from_clients {
                if harness_command(&name) {
                    continue;
                }
                total += count;
                *breakdown.entry(name).or_insert(0) += count;
            }
            per_node.push(total as f64 / operations);
        }
        let mut calls = 0;
        for node in cluster.nodes() {
            calls += node
                .commandstats()
                .into_iter()
                .filter(|(name, _)| !harness_command(name))
                .map(|(_, count)| count)
                .sum::<u64>();
        }
        let nodes = per_node.len().max(1) as f64;
        Ok(Counted {
            mean: per_node.iter().sum::<f64>() / nodes,
            max: per_node.iter().copied().fold(0.0, f64::max),
            calls: calls as f64 / operations / nodes,
            breakdown,
        })
    }
}
