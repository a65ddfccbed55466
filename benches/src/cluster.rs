//! Cluster nodes: each of the N Redlock nodes a Redis Cluster of S shards
//! (`redis+cluster://h1:p1,h2:p2,...`), beside N plain masters (S = 0), in
//! one run (`redlock-bench --shards 0,1,3`).
//!
//! Every layout is started before anything is measured, and the layouts and
//! contenders take turns as in the main scenarios (by cycle in (f), by phase
//! in (g), in an order that rotates), so the machine's noise hits them alike.
//! The servers of the layouts not being measured sit idle meanwhile: their
//! CPU is not counted, only the cluster bus's background gossip is left of
//! them.
//!
//! - (f) one client, acquire then release on fresh keys: latency;
//! - (g) 64 tasks on distinct keys: cycles per second, CPU per cycle of the
//!   client and of every server process of the layout, and per shard: its
//!   CPU and its `INFO commandstats` calls, so the spread over the shards;
//! - (i) memory per held lock ([`crate::memory`]).
//!
//! The contenders: this library (release notices on, the default), this
//! library with notices off (a release then publishes nothing: on a cluster
//! a `PUBLISH` is forwarded to every shard, so it is the one cost that grows
//! with the shards), and the floor: raw `SET NX PX` and `DEL`, on a cluster
//! node through the `redis` crate's cluster client, which sends each to the
//! shard of the key. `rslock` 0.10 takes only `redis://` URLs (it has no
//! cluster client), so it runs on the plain masters only.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use redis::Value;
use redlock_tests::{RedisCluster, RedisNode, ShardedNode};
use redlock_tokio::{Redlock, Wait};

use crate::contenders::{Floor, FloorMode, Held};
use crate::cpu;
use crate::scenarios::Sequential;
use crate::stats::Latencies;

/// Longest any single acquire or release may take before it counts as failed.
const OP_TIMEOUT: Duration = Duration::from_secs(5);

/// N Redlock nodes of one shape: plain masters (`shards == 0`) or clusters
/// of `shards` masters each.
pub(crate) struct Layout {
    pub(crate) shards: usize,
    servers: Servers,
}

enum Servers {
    Plain(RedisCluster),
    Sharded(Vec<ShardedNode>),
}

impl Layout {
    /// Starts `nodes` nodes of `shards` shards (0: plain masters), in parallel.
    pub(crate) fn start(shards: usize, nodes: usize) -> Self {
        let servers = if shards == 0 {
            Servers::Plain(RedisCluster::start(nodes))
        } else {
            Servers::Sharded(thread::scope(|scope| {
                let starts: Vec<_> = (0..nodes)
                    .map(|_| scope.spawn(move || ShardedNode::start(shards)))
                    .collect();
                starts
                    .into_iter()
                    .map(|start| start.join().expect("a cluster node failed to start"))
                    .collect()
            }))
        };
        Self { shards, servers }
    }

    /// `plain masters`, `1-shard clusters`, `3-shard clusters`.
    pub(crate) fn label(&self) -> String {
        label(self.shards)
    }

    /// One URL per Redlock node.
    pub(crate) fn urls(&self) -> Vec<String> {
        match &self.servers {
            Servers::Plain(cluster) => cluster.urls(),
            Servers::Sharded(nodes) => nodes.iter().map(ShardedNode::url).collect(),
        }
    }

    /// The pid of every server process of the layout.
    pub(crate) fn pids(&self) -> Vec<u32> {
        self.node_servers()
            .into_iter()
            .flatten()
            .filter_map(RedisNode::pid)
            .collect()
    }

    /// Each node's server processes: one master, or its shards.
    pub(crate) fn node_servers(&self) -> Vec<Vec<&RedisNode>> {
        match &self.servers {
            Servers::Plain(cluster) => cluster.nodes().iter().map(|node| vec![node]).collect(),
            Servers::Sharded(nodes) => nodes
                .iter()
                .map(|node| node.shards().iter().collect())
                .collect(),
        }
    }
}

/// The label of a layout of `shards` shards per node.
pub(crate) fn label(shards: usize) -> String {
    match shards {
        0 => "plain masters".to_owned(),
        1 => "1-shard clusters".to_owned(),
        s => format!("{s}-shard clusters"),
    }
}

/// Who runs in a layout; also the row order of the tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Who {
    /// This library, release notices on (the default).
    Ours,
    /// This library, `release_notices(false)`: releases publish nothing.
    Quiet,
    /// Raw `SET NX PX` and `DEL`, through the cluster client on a cluster.
    Floor,
    /// rslock 0.10: plain masters only.
    Rslock,
}

impl Who {
    pub(crate) const ALL: [Who; 4] = [Who::Ours, Who::Quiet, Who::Floor, Who::Rslock];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Who::Ours => "redlock-tokio",
            Who::Quiet => "redlock-tokio, notices off",
            Who::Floor => "floor: raw SET NX PX",
            Who::Rslock => "rslock 0.10",
        }
    }

    fn short(self) -> &'static str {
        match self {
            Who::Ours => "ours",
            Who::Quiet => "quiet",
            Who::Floor => "floor",
            Who::Rslock => "rslock",
        }
    }

    /// Whether it can run against nodes of `shards` shards.
    pub(crate) fn runs_on(self, shards: usize) -> bool {
        self != Who::Rslock || shards == 0
    }
}

/// Why rslock has no figures on a cluster layout.
pub(crate) const RSLOCK_ON_CLUSTERS: &str =
    "cannot run: rslock 0.10 takes only redis:// URLs (no cluster client)";

/// The clients of one layout.
pub(crate) struct Clients {
    ours: Redlock,
    quiet: Redlock,
    floor: Floor,
    rslock: Option<rslock::LockManager>,
    ttl: Duration,
}

impl Clients {
    pub(crate) async fn connect(layout: &Layout, ttl: Duration) -> Result<Self, String> {
        let urls = layout.urls();
        let build = |notices: bool| {
            Redlock::builder(&urls)
                .allow_even_nodes(true)
                .ttl(ttl)
                .release_notices(notices)
                .build()
        };
        let connected = |redlock: Redlock| {
            if redlock.connected_nodes() == urls.len() {
                Ok(redlock)
            } else {
                Err(format!(
                    "redlock-tokio ({}): only {} of {} nodes connected",
                    layout.label(),
                    redlock.connected_nodes(),
                    urls.len()
                ))
            }
        };
        let error =
            |err: redlock_tokio::Error| format!("redlock-tokio ({}): {err}", layout.label());
        let ours = connected(build(true).await.map_err(error)?)?;
        let quiet = connected(build(false).await.map_err(error)?)?;
        let floor = Floor::connect(&urls, FloorMode::Raw).await?;
        let rslock = (layout.shards == 0).then(|| {
            let mut manager = rslock::LockManager::new(urls.clone());
            manager.set_retry(1, Duration::from_millis(1));
            manager
        });
        Ok(Self {
            ours,
            quiet,
            floor,
            rslock,
            ttl,
        })
    }

    async fn try_acquire(&self, who: Who, key: &str) -> Result<Held, String> {
        match who {
            Who::Ours | Who::Quiet => {
                let client = if who == Who::Ours {
                    &self.ours
                } else {
                    &self.quiet
                };
                client
                    .lock(key)
                    .wait(Wait::No)
                    .await
                    .map(Held::Ours)
                    .map_err(|err| err.to_string())
            }
            Who::Floor => self
                .floor
                .try_acquire(key, self.ttl)
                .await
                .map(|acquired| acquired.held),
            Who::Rslock => match &self.rslock {
                Some(manager) => manager
                    .lock(key, self.ttl)
                    .await
                    .map(Held::Rslock)
                    .map_err(|err| err.to_string()),
                None => Err(RSLOCK_ON_CLUSTERS.to_owned()),
            },
        }
    }

    /// Releases; this library's report.
    async fn release(&self, held: Held) -> Option<redlock_tokio::ReleaseReport> {
        match held {
            Held::Ours(guard) => Some(guard.release().await),
            Held::Rslock(lock) => {
                lock.release().await;
                None
            }
            Held::Floor(lock) => {
                self.floor.release(lock).await;
                None
            }
        }
    }
}

/// What this library's guards and release reports tell about single nodes
/// of a lock that succeeded.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Misses {
    /// Acquire votes that failed (an error, or the per-node timeout).
    pub(crate) acquire_failed: u64,
    /// Nodes where the release found no key of ours.
    pub(crate) release_not_held: u64,
    /// Release votes that failed.
    pub(crate) release_failed: u64,
}

impl Misses {
    fn add(&mut self, other: Misses) {
        self.acquire_failed += other.acquire_failed;
        self.release_not_held += other.release_not_held;
        self.release_failed += other.release_failed;
    }
}

/// One acquire+release cycle, recorded into `stats` (this library's node
/// misses into `misses`).
async fn cycle(
    clients: &Clients,
    who: Who,
    key: &str,
    stats: &mut Sequential,
    misses: &mut Misses,
) {
    stats.attempts += 1;
    let started = Instant::now();
    let held = match tokio::time::timeout(OP_TIMEOUT, clients.try_acquire(who, key)).await {
        Err(_) => return stats.timed_out(),
        Ok(Err(error)) => return stats.failed(&error),
        Ok(Ok(held)) => held,
    };
    stats.acquire.record(started.elapsed());
    let releasing = Instant::now();
    if let Held::Ours(guard) = &held {
        misses.acquire_failed += guard.votes().failed() as u64;
    }
    if let Ok(report) = tokio::time::timeout(OP_TIMEOUT, clients.release(held)).await {
        stats.release.record(releasing.elapsed());
        if let Some(report) = report {
            misses.release_not_held += report.not_held() as u64;
            misses.release_failed += report.failed() as u64;
        }
    }
}

/// Every (layout, contender) pair that runs, in table order.
pub(crate) fn pairs(layouts: &[Layout]) -> Vec<(usize, Who)> {
    let mut out = Vec::new();
    for (index, layout) in layouts.iter().enumerate() {
        for who in Who::ALL {
            if who.runs_on(layout.shards) {
                out.push((index, who));
            }
        }
    }
    out
}

fn rotated<T: Clone>(items: &[T], turn: usize) -> Vec<T> {
    let mut order = items.to_vec();
    if !order.is_empty() {
        let len = order.len();
        order.rotate_left(turn % len);
    }
    order
}

/// Warms every client up (connections, scripts, allocator).
pub(crate) async fn warm_up(layouts: &[Layout], clients: &[Clients], cycles: usize) {
    let mut ignored = Sequential::default();
    let mut misses = Misses::default();
    let deadline = Instant::now() + Duration::from_secs(20);
    for i in 0..cycles {
        if Instant::now() >= deadline {
            break;
        }
        for (layout, who) in pairs(layouts) {
            let key = format!("w:{}:{}:{i}", layouts[layout].shards, who.short());
            cycle(&clients[layout], who, &key, &mut ignored, &mut misses).await;
        }
    }
}

/// (f) What one (layout, contender) pair did, one cycle at a time.
#[derive(Clone, Default)]
pub(crate) struct Single {
    pub(crate) stats: Sequential,
    pub(crate) misses: Misses,
    /// CPU of every server process of the layout during the pair's blocks.
    pub(crate) server_cpu: Duration,
    /// How long the pair's blocks took.
    pub(crate) elapsed: Duration,
}

impl Single {
    /// Cycles that succeeded.
    pub(crate) fn cycles(&self) -> u64 {
        self.stats.attempts - self.stats.failures - self.stats.timeouts
    }
}

/// Cycles per block of (f): short, so the pairs' blocks interleave finely;
/// long enough that the servers' work still in flight at a block's end (a
/// reply written, a notice forwarded to the other shards) is a small part
/// of the block's CPU.
pub(crate) const BLOCK: usize = 25;

/// (f) One client, acquire then release on fresh keys, one cycle after the
/// other; every (layout, contender) pair takes its turn by block of
/// [`BLOCK`] cycles, in an order that rotates, and the servers' CPU is read
/// around each block.
pub(crate) async fn single_client(
    layouts: &[Layout],
    clients: &[Clients],
    cycles: usize,
    budget: Duration,
) -> BTreeMap<(usize, Who), Single> {
    let pairs = pairs(layouts);
    let pids: Vec<Vec<u32>> = layouts.iter().map(Layout::pids).collect();
    let deadline = Instant::now() + budget;
    let mut results: BTreeMap<(usize, Who), Single> = BTreeMap::new();
    for block in 0..cycles.div_ceil(BLOCK) {
        if Instant::now() >= deadline {
            break;
        }
        for (layout, who) in rotated(&pairs, block) {
            let single = results.entry((layout, who)).or_default();
            let before = cpu::snapshot(&pids[layout]).1;
            let started = Instant::now();
            for j in 0..BLOCK {
                let i = block * BLOCK + j;
                let key = format!("f:{}:{}:{i}", layouts[layout].shards, who.short());
                let mut misses = Misses::default();
                cycle(&clients[layout], who, &key, &mut single.stats, &mut misses).await;
                single.misses.add(misses);
            }
            single.elapsed += started.elapsed();
            single.server_cpu += cpu::snapshot(&pids[layout]).1.saturating_sub(before);
        }
    }
    results
}

/// Server CPU of each layout while nothing is sent to it, in µs per second
/// per server process: what the cron and the cluster bus's gossip cost.
pub(crate) fn idle_cpu(layouts: &[Layout], period: Duration) -> Vec<f64> {
    let pids: Vec<Vec<u32>> = layouts.iter().map(Layout::pids).collect();
    let before: Vec<Duration> = pids.iter().map(|p| cpu::snapshot(p).1).collect();
    let started = Instant::now();
    thread::sleep(period);
    let seconds = started.elapsed().as_secs_f64();
    pids.iter()
        .zip(before)
        .map(|(p, before)| {
            let used = cpu::snapshot(p).1.saturating_sub(before);
            used.as_secs_f64() * 1e6 / seconds / p.len().max(1) as f64
        })
        .collect()
}

/// (g) What one (layout, contender) pair did in its 64-task phases.
#[derive(Clone, Default)]
pub(crate) struct Phases {
    pub(crate) cycles: u64,
    pub(crate) failures: u64,
    pub(crate) elapsed: Duration,
    pub(crate) acquire: Latencies,
    pub(crate) release: Latencies,
    pub(crate) misses: Misses,
    pub(crate) client_cpu: Duration,
    /// CPU of each server process, `[node][shard]`.
    pub(crate) shard_cpu: Vec<Vec<Duration>>,
    /// `INFO commandstats` calls of each server process, `[node][shard]`,
    /// by command name; the benchmark's own `INFO` and `CONFIG` left out.
    pub(crate) shard_calls: Vec<Vec<BTreeMap<String, u64>>>,
    /// `INFO stats` of each server process, `[node][shard]`: commands it
    /// processed (`total_commands_processed`) and read events it handled
    /// (`total_reads_processed`, one per readable connection per turn of
    /// its event loop).
    pub(crate) shard_commands: Vec<Vec<u64>>,
    pub(crate) shard_reads: Vec<Vec<u64>>,
    /// Keys of the phases still on the servers (all nodes) right after the
    /// last phase: locks whose release did not remove them, left to expire.
    pub(crate) keys_left: u64,
}

impl Phases {
    pub(crate) fn per_second(&self) -> f64 {
        if self.elapsed.is_zero() {
            return f64::NAN;
        }
        self.cycles as f64 / self.elapsed.as_secs_f64()
    }

    pub(crate) fn server_cpu(&self) -> Duration {
        self.shard_cpu.iter().flatten().sum()
    }

    /// Microseconds of `cpu` per cycle.
    pub(crate) fn per_cycle(&self, cpu: Duration) -> f64 {
        if cpu.is_zero() || self.cycles == 0 {
            return f64::NAN;
        }
        cpu.as_secs_f64() * 1e6 / self.cycles as f64
    }

    /// Server CPU per cycle per node (all its shards): what one lock cycle
    /// costs one Redlock node.
    pub(crate) fn node_us_per_cycle(&self) -> f64 {
        self.per_cycle(self.server_cpu()) / self.shard_cpu.len().max(1) as f64
    }

    /// Calls per cycle per node, by command name, summed over its shards
    /// and averaged over the nodes.
    pub(crate) fn calls_per_cycle(&self) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        let nodes = self.shard_calls.len().max(1) as f64;
        let cycles = self.cycles.max(1) as f64;
        for calls in self.shard_calls.iter().flatten() {
            for (name, count) in calls {
                *out.entry(name.clone()).or_insert(0.0) += *count as f64 / cycles / nodes;
            }
        }
        out
    }

    /// Commands per read event, all servers together: how many requests
    /// a server found at once each time it read a connection.
    pub(crate) fn commands_per_read(&self) -> f64 {
        let commands: u64 = self.shard_commands.iter().flatten().sum();
        let reads: u64 = self.shard_reads.iter().flatten().sum();
        if reads == 0 {
            return f64::NAN;
        }
        commands as f64 / reads as f64
    }

    /// Each shard's total calls, `[node][shard]`.
    pub(crate) fn shard_call_totals(&self) -> Vec<Vec<u64>> {
        self.shard_calls
            .iter()
            .map(|node| node.iter().map(|calls| calls.values().sum()).collect())
            .collect()
    }
}

/// The benchmark's own commands, left out of the counts.
fn harness_command(name: &str) -> bool {
    name == "info" || name.starts_with("config")
}

/// (g) `tasks` tasks on distinct keys, `rounds` phases of `phase` per
/// (layout, contender) pair, interleaved, the order rotating by one pair
/// each round (a multiple of the pairs' count runs every pair in every
/// position equally often).
pub(crate) async fn throughput(
    layouts: &[Layout],
    clients: &Arc<Vec<Clients>>,
    tasks: usize,
    rounds: usize,
    phase: Duration,
) -> BTreeMap<(usize, Who), Phases> {
    let pairs = pairs(layouts);
    // A short phase each first, not counted: the first burst of tasks also
    // grows the runtime's, the allocator's and the servers' structures.
    for &(layout, who) in &pairs {
        let _ = phase_of(
            clients,
            layouts[layout].shards,
            layout,
            who,
            tasks,
            0,
            phase / 4,
        )
        .await;
    }
    let mut results: BTreeMap<(usize, Who), Phases> = BTreeMap::new();
    for round in 0..rounds {
        for (layout, who) in rotated(&pairs, round) {
            let servers = layouts[layout].node_servers();
            for server in servers.iter().flatten() {
                server.reset_stats();
            }
            let pids: Vec<Vec<u32>> = servers
                .iter()
                .map(|node| node.iter().filter_map(|s| s.pid()).collect())
                .collect();
            let client_before = cpu::of_process(std::process::id());
            let before: Vec<Vec<Duration>> = pids
                .iter()
                .map(|node| node.iter().map(|&pid| cpu::of_process(pid)).collect())
                .collect();
            let shards = layouts[layout].shards;
            let outcome = phase_of(clients, shards, layout, who, tasks, round + 1, phase).await;
            let client_after = cpu::of_process(std::process::id());
            let after: Vec<Vec<Duration>> = pids
                .iter()
                .map(|node| node.iter().map(|&pid| cpu::of_process(pid)).collect())
                .collect();
            let total = results.entry((layout, who)).or_insert_with(|| Phases {
                shard_cpu: servers
                    .iter()
                    .map(|node| vec![Duration::ZERO; node.len()])
                    .collect(),
                shard_calls: servers
                    .iter()
                    .map(|node| vec![BTreeMap::new(); node.len()])
                    .collect(),
                shard_commands: servers.iter().map(|node| vec![0; node.len()]).collect(),
                shard_reads: servers.iter().map(|node| vec![0; node.len()]).collect(),
                ..Phases::default()
            });
            total.cycles += outcome.cycles;
            total.failures += outcome.failures;
            total.elapsed += outcome.elapsed;
            total.acquire.merge(&outcome.acquire);
            total.release.merge(&outcome.release);
            total.misses.add(outcome.misses);
            total.client_cpu += client_after.saturating_sub(client_before);
            for (node, shards) in servers.iter().enumerate() {
                for (shard, server) in shards.iter().enumerate() {
                    total.shard_cpu[node][shard] +=
                        after[node][shard].saturating_sub(before[node][shard]);
                    let stat = |field| info_field(server, "stats", field).unwrap_or(0);
                    total.shard_commands[node][shard] +=
                        u64::try_from(stat("total_commands_processed")).unwrap_or(0);
                    total.shard_reads[node][shard] +=
                        u64::try_from(stat("total_reads_processed")).unwrap_or(0);
                    for (name, count) in server.commandstats() {
                        if !harness_command(&name) {
                            *total.shard_calls[node][shard].entry(name).or_insert(0) += count;
                        }
                    }
                }
            }
        }
    }
    // Every cycle was released: what is left will only go with its TTL.
    for (&(layout, who), total) in &mut results {
        let prefix = format!("g:{}:{}:*", layouts[layout].shards, who.short());
        total.keys_left = layouts[layout]
            .node_servers()
            .iter()
            .flatten()
            .map(|server| server.keys(&prefix).len() as u64)
            .sum();
    }
    results
}

/// Upper bound on the cycles of one task in one phase, besides its time.
const MAX_CYCLES_PER_TASK: u64 = 10_000_000;

async fn phase_of(
    clients: &Arc<Vec<Clients>>,
    shards: usize,
    layout: usize,
    who: Who,
    tasks: usize,
    round: usize,
    phase: Duration,
) -> Phases {
    let started = Instant::now();
    let deadline = started + phase;
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let clients = Arc::clone(clients);
            tokio::spawn(async move {
                let mut stats = Sequential::default();
                let mut misses = Misses::default();
                for i in 0..MAX_CYCLES_PER_TASK {
                    if Instant::now() >= deadline {
                        break;
                    }
                    let key = format!("g:{shards}:{}:{round}:{task}:{i}", who.short());
                    cycle(&clients[layout], who, &key, &mut stats, &mut misses).await;
                }
                (stats, misses)
            })
        })
        .collect();
    let mut total = Phases::default();
    for handle in handles {
        // A task only panics on a bug in this program.
        let (stats, misses) = handle.await.expect("a throughput task panicked");
        total.misses.add(misses);
        total.cycles += stats.attempts - stats.failures - stats.timeouts;
        total.failures += stats.failures + stats.timeouts;
        total.acquire.merge(&stats.acquire);
        total.release.merge(&stats.release);
    }
    total.elapsed = started.elapsed();
    total
}

/// `INFO memory`'s `used_memory` of one server, in bytes.
pub(crate) fn used_memory(server: &RedisNode) -> i64 {
    info_field(server, "memory", "used_memory").unwrap_or(0)
}

/// An integer field of an `INFO` section.
pub(crate) fn info_field(server: &RedisNode, section: &str, field: &str) -> Option<i64> {
    info_text(server, section, field).and_then(|value| value.parse().ok())
}

/// A field of an `INFO` section, as text.
pub(crate) fn info_text(server: &RedisNode, section: &str, field: &str) -> Option<String> {
    let info: String = redis::from_redis_value(server.command(["INFO", section])).ok()?;
    info.lines().find_map(|line| {
        line.strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(|value| value.trim().to_owned())
    })
}

/// `DBSIZE` of one server.
pub(crate) fn dbsize(server: &RedisNode) -> i64 {
    match server.command(["DBSIZE"]) {
        Value::Int(n) => n,
        _ => 0,
    }
}
