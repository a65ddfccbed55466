//! (w) What waiting for the AOF costs ([`Builder::wait_for_aof`]): (b)'s
//! tasks on distinct keys, acquire then release, in four configurations
//! measured in one run:
//!
//! 1. AOF off, `wait_for_aof` off: the baseline;
//! 2. `appendonly yes`, `appendfsync always`, `wait_for_aof` off;
//! 3. the same, `wait_for_aof` on;
//! 4. `appendonly yes`, `appendfsync everysec`, `wait_for_aof` off
//!    (`wait_for_aof` refuses `everysec`: the probe below says why).
//!
//! Three sets of N masters are started together, one per server setting,
//! each with its setting on the command line (a server given `appendonly
//! yes` at runtime first rewrites its AOF in the background, and `WAITAOF`
//! waits for that), and stay up for the whole run. Each configuration has
//! its client of this library, and its floor beside it: one multiplexed
//! connection per node, `SET NX PX` on every node at once, pipelined with
//! `WAITAOF 1 0 <node timeout>` where the configuration waits, then `DEL`.
//!
//! Every client runs with the TTL of the run (10 s) and a node timeout of
//! [`NODE_TIMEOUT`], the same for all, so that only the persistence
//! differs.
//!
//! Last, a probe ([`probe`]) sends a few `SET` + `WAITAOF` pairs one after
//! the other to one master of each AOF set and times them: under
//! `everysec` the server fsyncs at most once a second, so acknowledgements
//! that each waited for an fsync take about a second apiece. Valkey 9.1.2
//! answers each at its next cron tick, synced or not, which is why the
//! library refuses `wait_for_aof` under `everysec`: the report says what
//! the probe saw.
//!
//! `WAITAOF` is in Valkey and in Redis 7.2 and later; on another server
//! the mode measures nothing and fails with a line that says so (exit
//! status 1), before it starts a server.
//!
//! It writes `<server>-aof.md` (`valkey-aof.md`) to the output folder,
//! prints the table, and ends with one line:
//!
//! ```text
//! bench aof summary: baseline_cycles_per_s=N baseline_acquire_p50_ms=M baseline_acquire_p99_ms=M always_cycles_per_s=N ... everysec_acquire_p99_ms=M
//! ```
//!
//! where `_durable` names the configurations with `wait_for_aof` on; the
//! figures are this library's.
//!
//! [`Builder::wait_for_aof`]: redlock_tokio::Builder::wait_for_aof

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use redis::Value;
use redis::aio::MultiplexedConnection;
use redlock_tests::{NodeOptions, RedisCluster, RedisNode, ServerKind};
use redlock_tokio::{Redlock, Wait, WeakPersistence};

use crate::cluster::info_text;
use crate::stats::{Latencies, ms};

/// The node timeout of every client of the run, this library's and the
/// floor's `WAITAOF` timeout: room for a loaded server's sync.
pub(crate) const NODE_TIMEOUT: Duration = Duration::from_millis(500);

/// Upper bound on one acquire or release, besides the node timeout.
const OP_TIMEOUT: Duration = Duration::from_secs(5);

/// Upper bound on the cycles of one task in one phase, besides its time.
const MAX_CYCLES_PER_TASK: u64 = 10_000_000;

/// How long the servers may take to have their AOF written at start.
const AOF_READY: Duration = Duration::from_secs(30);

/// What the mode is given (`--aof`).
pub(crate) struct AofArgs {
    pub(crate) quick: bool,
    pub(crate) nodes: usize,
    pub(crate) tasks: usize,
    pub(crate) ttl: Duration,
    pub(crate) out: Option<PathBuf>,
}

/// How long it measures.
#[derive(Clone, Copy)]
struct Plan {
    rounds: usize,
    phase: Duration,
}

impl Plan {
    fn of(quick: bool) -> Self {
        if quick {
            Self {
                rounds: 1,
                phase: Duration::from_millis(500),
            }
        } else {
            Self {
                rounds: 3,
                phase: Duration::from_secs(2),
            }
        }
    }
}

/// The persistence of one set of masters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fsync {
    /// `appendonly no`, as the harness starts every server.
    Off,
    Always,
    Everysec,
}

impl Fsync {
    const ALL: [Fsync; 3] = [Fsync::Off, Fsync::Always, Fsync::Everysec];

    fn extra_args(self) -> Vec<String> {
        let fsync = match self {
            Fsync::Off => return Vec::new(),
            Fsync::Always => "always",
            Fsync::Everysec => "everysec",
        };
        ["--appendonly", "yes", "--appendfsync", fsync]
            .map(str::to_owned)
            .to_vec()
    }

    fn appendonly(self) -> &'static str {
        if self == Fsync::Off { "no" } else { "yes" }
    }

    fn appendfsync(self) -> &'static str {
        match self {
            Fsync::Off => "",
            Fsync::Always => "always",
            Fsync::Everysec => "everysec",
        }
    }
}

/// One configuration: a set of masters and whether the clients wait.
#[derive(Clone, Copy, Debug)]
struct Config {
    fsync: Fsync,
    wait: bool,
    /// Its name in the summary line.
    name: &'static str,
}

const CONFIGS: [Config; 4] = [
    Config {
        fsync: Fsync::Off,
        wait: false,
        name: "baseline",
    },
    Config {
        fsync: Fsync::Always,
        wait: false,
        name: "always",
    },
    Config {
        fsync: Fsync::Always,
        wait: true,
        name: "always_durable",
    },
    Config {
        fsync: Fsync::Everysec,
        wait: false,
        name: "everysec",
    },
];

/// This library or the floor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Who {
    Ours,
    Floor,
}

impl Who {
    fn short(self) -> &'static str {
        match self {
            Who::Ours => "ours",
            Who::Floor => "floor",
        }
    }
}

/// The raw floor: one multiplexed connection per node.
struct Floor {
    connections: Vec<MultiplexedConnection>,
    quorum: usize,
    ttl_ms: u64,
    /// Pipeline `WAITAOF 1 0 <node timeout>` behind each `SET`.
    wait: bool,
}

impl Floor {
    async fn connect(urls: &[String], ttl: Duration, wait: bool) -> Result<Self, String> {
        let mut connections = Vec::with_capacity(urls.len());
        for url in urls {
            let client = redis::Client::open(url.as_str()).map_err(|err| err.to_string())?;
            let mut connection = client
                .get_multiplexed_async_connection()
                .await
                .map_err(|err| format!("floor: {url}: {err}"))?;
            // The crate's default (500 ms) is the WAITAOF timeout itself:
            // the server's answer must win.
            connection.set_response_timeout(NODE_TIMEOUT * 2);
            connections.push(connection);
        }
        Ok(Self {
            quorum: connections.len() / 2 + 1,
            connections,
            ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
            wait,
        })
    }

    /// `SET NX PX` (and `WAITAOF`) on every node at once; the nodes that
    /// granted, once every node answered.
    async fn acquire(&self, key: &str) -> Vec<usize> {
        let value = format!("{:040x}", rand::random::<u128>());
        let timeout_ms = NODE_TIMEOUT.as_millis() as u64;
        let replies = join_all(self.connections.iter().map(|connection| {
            let mut pipe = redis::pipe();
            pipe.cmd("SET")
                .arg(key)
                .arg(&value)
                .arg("NX")
                .arg("PX")
                .arg(self.ttl_ms);
            if self.wait {
                pipe.cmd("WAITAOF").arg(1).arg(0).arg(timeout_ms);
            }
            let mut connection = connection.clone();
            async move { pipe.query_async::<Vec<Value>>(&mut connection).await }
        }))
        .await;
        replies
            .into_iter()
            .enumerate()
            .filter(|(_, reply)| match reply.as_deref() {
                Ok([Value::Okay]) => !self.wait,
                // WAITAOF answers [local, replicas]: local 1, the AOF has it.
                Ok([Value::Okay, Value::Array(counts)]) => {
                    matches!(counts.first(), Some(Value::Int(local)) if *local >= 1)
                }
                _ => false,
            })
            .map(|(node, _)| node)
            .collect()
    }

    async fn release(&self, key: &str, granted: &[usize]) {
        join_all(granted.iter().map(|&node| {
            let mut connection = self.connections[node].clone();
            async move {
                let _ = redis::cmd("DEL")
                    .arg(key)
                    .query_async::<Value>(&mut connection)
                    .await;
            }
        }))
        .await;
    }
}

/// One client of one configuration.
enum Client {
    Ours(Redlock),
    Floor(Floor),
}

/// What one client did, in one phase or over the run.
#[derive(Clone, Default)]
struct Figures {
    cycles: u64,
    failures: u64,
    elapsed: Duration,
    acquire: Latencies,
    release: Latencies,
    /// The first failure's message.
    first_error: Option<String>,
    /// Cycles per second of each round, in round order.
    rounds: Vec<f64>,
}

impl Figures {
    fn per_second(&self) -> f64 {
        if self.elapsed.is_zero() {
            return f64::NAN;
        }
        self.cycles as f64 / self.elapsed.as_secs_f64()
    }

    fn add(&mut self, phase: &Figures) {
        self.cycles += phase.cycles;
        self.failures += phase.failures;
        self.elapsed += phase.elapsed;
        self.acquire.merge(&phase.acquire);
        self.release.merge(&phase.release);
        if self.first_error.is_none() {
            self.first_error.clone_from(&phase.first_error);
        }
    }
}

/// One acquire then release on `key`; the acquire's latency, or why it failed.
async fn cycle(client: &Client, key: &str, mine: &mut Figures) {
    let started = Instant::now();
    match client {
        Client::Ours(redlock) => {
            let attempt = redlock.lock(key).wait(Wait::No);
            match tokio::time::timeout(OP_TIMEOUT, attempt).await {
                Ok(Ok(guard)) => {
                    mine.acquire.record(started.elapsed());
                    let releasing = Instant::now();
                    let _ = tokio::time::timeout(OP_TIMEOUT, guard.release()).await;
                    mine.release.record(releasing.elapsed());
                    mine.cycles += 1;
                }
                Ok(Err(err)) => failed(mine, err.to_string()),
                Err(_) => failed(mine, format!("no answer within {OP_TIMEOUT:?}")),
            }
        }
        Client::Floor(floor) => {
            let granted = match tokio::time::timeout(OP_TIMEOUT, floor.acquire(key)).await {
                Ok(granted) => granted,
                Err(_) => return failed(mine, format!("no answer within {OP_TIMEOUT:?}")),
            };
            if granted.len() >= floor.quorum {
                mine.acquire.record(started.elapsed());
            }
            let releasing = Instant::now();
            let _ = tokio::time::timeout(OP_TIMEOUT, floor.release(key, &granted)).await;
            if granted.len() >= floor.quorum {
                mine.release.record(releasing.elapsed());
                mine.cycles += 1;
            } else {
                failed(
                    mine,
                    format!(
                        "{} of {} nodes granted",
                        granted.len(),
                        floor.connections.len()
                    ),
                );
            }
        }
    }
}

fn failed(mine: &mut Figures, error: String) {
    mine.failures += 1;
    if mine.first_error.is_none() {
        mine.first_error = Some(error);
    }
}

/// `tasks` tasks on distinct keys for `phase`.
async fn phase(client: &Arc<Client>, tasks: usize, prefix: &str, phase: Duration) -> Figures {
    let started = Instant::now();
    let deadline = started + phase;
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let client = Arc::clone(client);
            let prefix = format!("{prefix}:{task}");
            tokio::spawn(async move {
                let mut mine = Figures::default();
                for i in 0..MAX_CYCLES_PER_TASK {
                    if Instant::now() >= deadline {
                        break;
                    }
                    cycle(&client, &format!("{prefix}:{i}"), &mut mine).await;
                }
                mine
            })
        })
        .collect();
    let mut total = Figures::default();
    for handle in handles {
        // A task only panics on a bug in this program.
        total.add(&handle.await.expect("an aof task panicked"));
    }
    // Tasks finish the cycle they are in at the deadline: count that time.
    total.elapsed = started.elapsed();
    total
}

/// Whether the servers of this run have `WAITAOF`: Valkey, Redis >= 7.2.
fn has_waitaof() -> bool {
    let server = redlock_tests::server();
    let version: Vec<u16> = server
        .version()
        .split('.')
        .filter_map(|part| part.parse().ok())
        .collect();
    match server.kind() {
        ServerKind::Valkey => true,
        _ => version.as_slice() >= [7, 2].as_slice(),
    }
}

/// Waits until `node` has written the AOF it starts with (none to wait
/// for without AOF); an error when it does not have it on, or not in time.
fn aof_ready(node: &RedisNode, fsync: Fsync) -> Result<(), String> {
    if fsync == Fsync::Off {
        return Ok(());
    }
    let since = Instant::now();
    loop {
        let field = |name| info_text(node, "persistence", name).unwrap_or_default();
        if field("aof_enabled") != "1" {
            return Err(format!("{}: AOF not on", node.url()));
        }
        if field("aof_rewrite_in_progress") == "0" && field("aof_rewrite_scheduled") == "0" {
            return Ok(());
        }
        if since.elapsed() > AOF_READY {
            return Err(format!("{}: AOF not written in {AOF_READY:?}", node.url()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sequential `SET` + `WAITAOF` pairs of the probe.
const PROBE_PAIRS: u32 = 5;

/// The probe's `WAITAOF` timeout: above `everysec`'s second.
const PROBE_WAIT: Duration = Duration::from_millis(2_000);

/// What the probe saw on one master: how long [`PROBE_PAIRS`] sequential
/// pairs took, and how many `WAITAOF` said the local AOF had the write.
struct Probe {
    fsync: Fsync,
    elapsed: Duration,
    acknowledged: u32,
}

/// [`PROBE_PAIRS`] pairs of `SET` then `WAITAOF 1 0` on one connection,
/// each sent once the previous answered. Under `everysec` the server
/// fsyncs at most once a second, and each pair's write comes after the
/// previous acknowledgement, so a server whose acknowledgements follow its
/// fsyncs takes at least `PROBE_PAIRS - 1` seconds for them.
fn probe(node: &RedisNode, fsync: Fsync) -> Result<Probe, String> {
    let mut connection = node.connection().map_err(|err| format!("probe: {err}"))?;
    connection
        .set_read_timeout(Some(PROBE_WAIT * 2))
        .map_err(|err| format!("probe: {err}"))?;
    let started = Instant::now();
    let mut acknowledged = 0;
    for i in 0..PROBE_PAIRS {
        let reply: Vec<Value> = redis::pipe()
            .cmd("SET")
            .arg(format!("w:probe:{i}"))
            .arg("v")
            .cmd("WAITAOF")
            .arg(1)
            .arg(0)
            .arg(PROBE_WAIT.as_millis() as u64)
            .query(&mut connection)
            .map_err(|err| format!("probe: {err}"))?;
        if let [_, Value::Array(counts)] = reply.as_slice()
            && matches!(counts.first(), Some(Value::Int(local)) if *local >= 1)
        {
            acknowledged += 1;
        }
    }
    Ok(Probe {
        fsync,
        elapsed: started.elapsed(),
        acknowledged,
    })
}

/// The two clients of `config` on `cluster`.
async fn clients(
    cluster: &RedisCluster,
    config: Config,
    ttl: Duration,
) -> Result<[Arc<Client>; 2], String> {
    let urls = cluster.urls();
    let ours = Redlock::builder(&urls)
        .allow_even_nodes(true)
        .ttl(ttl)
        .node_timeout(NODE_TIMEOUT)
        // The baseline has no persistence on purpose.
        .weak_persistence(WeakPersistence::Accept)
        .wait_for_aof(config.wait)
        .build()
        .await
        .map_err(|err| format!("redlock-tokio ({}): {err}", config.name))?;
    if ours.connected_nodes() != urls.len() {
        return Err(format!(
            "redlock-tokio ({}): only {} of {} nodes connected",
            config.name,
            ours.connected_nodes(),
            urls.len()
        ));
    }
    let floor = Floor::connect(&urls, ttl, config.wait).await?;
    Ok([Arc::new(Client::Ours(ours)), Arc::new(Client::Floor(floor))])
}

/// Everything the run measured: per configuration, ours and the floor.
struct Measured {
    rows: Vec<(Config, Who, Figures)>,
    /// `aof_rewrites` of each AOF set, all its masters together.
    rewrites: Vec<(Fsync, i64)>,
    /// The probe on one master of each AOF set.
    probes: Vec<Probe>,
}

impl Measured {
    fn get(&self, name: &str, who: Who) -> Option<&Figures> {
        self.rows
            .iter()
            .find(|(config, w, _)| config.name == name && *w == who)
            .map(|(_, _, figures)| figures)
    }
}

/// Runs the mode; returns the summary line.
pub(crate) fn run(args: &AofArgs) -> Result<String, String> {
    let server = redlock_tests::server();
    if !has_waitaof() {
        return Err(format!(
            "--aof needs WAITAOF, which Valkey and Redis >= 7.2 have; this run's server is \
             {} {} ({}): nothing measured (`make bench-aof` runs it on Valkey, or set \
             REDLOCK_SERVER_BIN)",
            server.name(),
            server.version(),
            server.path().display()
        ));
    }
    let plan = Plan::of(args.quick);
    let started = Instant::now();
    let load_at_start = crate::load_average();
    crate::progress(&format!(
        "(w) starting 3 x {} masters (AOF off, appendfsync always, appendfsync everysec): {server}",
        args.nodes
    ));
    let clusters: Vec<RedisCluster> = Fsync::ALL
        .iter()
        .map(|fsync| {
            RedisCluster::start_with(
                args.nodes,
                &NodeOptions {
                    extra_args: fsync.extra_args(),
                    ..NodeOptions::default()
                },
            )
        })
        .collect();
    for (cluster, &fsync) in clusters.iter().zip(&Fsync::ALL) {
        for node in cluster.nodes() {
            aof_ready(node, fsync)?;
        }
    }
    let cluster_of = |fsync: Fsync| {
        let i = Fsync::ALL
            .iter()
            .position(|&f| f == fsync)
            .expect("every setting has its masters");
        &clusters[i]
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|err| format!("tokio runtime: {err}"))?;
    let mut clients_of = Vec::new();
    for config in CONFIGS {
        clients_of.push(runtime.block_on(clients(cluster_of(config.fsync), config, args.ttl))?);
    }

    crate::progress(&format!(
        "(w) warming up: {} tasks, {:?} per configuration and client",
        args.tasks,
        plan.phase / 4
    ));
    for (c, pair) in clients_of.iter().enumerate() {
        for client in pair {
            runtime.block_on(phase(
                client,
                args.tasks,
                &format!("w:warm:{c}"),
                plan.phase / 4,
            ));
        }
    }
    let mut totals: Vec<[Figures; 2]> = vec![Default::default(); CONFIGS.len()];
    for round in 0..plan.rounds {
        // The configurations in an order that rotates, evenly spread over
        // the rounds; ours and its floor side by side, in turns first.
        let offset = round * CONFIGS.len() / plan.rounds;
        crate::progress(&format!(
            "(w) round {} of {}: {} tasks, {:?} per configuration and client",
            round + 1,
            plan.rounds,
            args.tasks,
            plan.phase
        ));
        for turn in 0..CONFIGS.len() {
            let c = (offset + turn) % CONFIGS.len();
            let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for who in order {
                let prefix = format!(
                    "w:{}:{}:{round}",
                    CONFIGS[c].name,
                    [Who::Ours, Who::Floor][who].short()
                );
                let figures =
                    runtime.block_on(phase(&clients_of[c][who], args.tasks, &prefix, plan.phase));
                totals[c][who].rounds.push(figures.per_second());
                totals[c][who].add(&figures);
            }
        }
    }
    for pair in &clients_of {
        if let Client::Ours(redlock) = pair[0].as_ref() {
            runtime.block_on(redlock.shutdown());
        }
    }
    drop(clients_of);
    runtime.shutdown_timeout(Duration::from_secs(1));
    let rewrites = Fsync::ALL[1..]
        .iter()
        .map(|&fsync| {
            let count = cluster_of(fsync)
                .nodes()
                .iter()
                .filter_map(|node| crate::cluster::info_field(node, "persistence", "aof_rewrites"))
                .sum();
            (fsync, count)
        })
        .collect();
    let mut probes = Vec::new();
    for &fsync in &Fsync::ALL[1..] {
        crate::progress(&format!(
            "(w) probe: {PROBE_PAIRS} sequential SET + WAITAOF pairs, appendfsync {}",
            fsync.appendfsync()
        ));
        probes.push(probe(&cluster_of(fsync).nodes()[0], fsync)?);
    }
    drop(clusters);

    let mut rows = Vec::new();
    for (config, [ours, floor]) in CONFIGS.into_iter().zip(totals) {
        rows.push((config, Who::Ours, ours));
        rows.push((config, Who::Floor, floor));
    }
    let measured = Measured {
        rows,
        rewrites,
        probes,
    };
    let info = Info {
        date: crate::today(),
        machine: crate::machine(),
        server: crate::server_version(),
        command: crate::bench_command(),
        mode: if args.quick { "quick" } else { "full" },
        nodes: args.nodes,
        tasks: args.tasks,
        ttl_ms: args.ttl.as_millis(),
        plan,
        elapsed_s: started.elapsed().as_secs_f64(),
        load: (load_at_start, crate::load_average()),
    };
    let out = crate::out_dir(args.out.as_deref(), args.quick)?;
    let name = format!("{}-aof.md", server.name().to_lowercase());
    let summary = summary(&measured);
    // Before the file is overwritten, where the run writes to benches/results.
    let comparison = crate::compare::against_committed(&name, &summary, args.quick);
    let path = out.join(&name);
    std::fs::write(&path, document(&measured, &info, &comparison))
        .map_err(|err| format!("{}: {err}", path.display()))?;
    println!("{}", table(&measured, &info));
    println!("wrote {} in {:.0} s", path.display(), info.elapsed_s);
    println!("{comparison}");
    Ok(summary)
}

/// How the run was made, for the report's header.
struct Info {
    date: String,
    machine: String,
    server: String,
    command: String,
    mode: &'static str,
    nodes: usize,
    tasks: usize,
    ttl_ms: u128,
    plan: Plan,
    elapsed_s: f64,
    load: (String, String),
}

/// The median over rounds of `who`'s cycles/s in `config` over its
/// cycles/s in the baseline of the same round.
fn vs_baseline(measured: &Measured, config: Config, who: Who) -> Option<f64> {
    let mine = measured.get(config.name, who)?;
    let baseline = measured.get(CONFIGS[0].name, who)?;
    crate::stats::paired_median(
        mine.rounds
            .iter()
            .copied()
            .zip(baseline.rounds.iter().copied()),
    )
}

fn table(measured: &Measured, info: &Info) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "### (w) Waiting for the AOF: {} tasks on distinct keys, {} masters\n\n\
         {} round(s) of {:?} per configuration and client; the configurations take turns \
         in an order that rotates by round, this library and the floor of one \
         configuration one after the other (which goes first alternates). Every client: \
         TTL {} ms, node timeout {} ms (the floor's `WAITAOF 1 0 {}`; `wait_for_aof` is \
         refused under `everysec`: see the probe below). \"vs baseline\": the median over rounds of the client's \
         cycles/s over its own cycles/s without AOF in the same round. Latencies in ms. \
         The floor: `SET NX PX` pipelined with `WAITAOF` where the configuration waits, \
         on every node at once over one multiplexed connection per node (its acquire ends \
         when every node has answered; a node's yes counts when `SET` said OK and, \
         waiting, `WAITAOF`'s local count is 1), then `DEL`.\n",
        info.tasks,
        info.nodes,
        info.plan.rounds,
        info.plan.phase,
        info.ttl_ms,
        NODE_TIMEOUT.as_millis(),
        NODE_TIMEOUT.as_millis(),
    );
    let _ = writeln!(
        out,
        "| # | appendonly | appendfsync | wait_for_aof | client | cycles/s | vs baseline | acquire p50 | p99 | release p50 | failed |\n\
         |---|---|---|---|---|---:|---:|---:|---:|---:|---:|"
    );
    for (i, config) in CONFIGS.iter().enumerate() {
        for who in [Who::Ours, Who::Floor] {
            let Some(figures) = measured.get(config.name, who) else {
                continue;
            };
            let client = match (who, config.wait) {
                (Who::Ours, _) => "redlock-tokio",
                (Who::Floor, false) => "floor: SET NX PX",
                (Who::Floor, true) => "floor: SET NX PX + WAITAOF",
            };
            let ratio = if i == 0 {
                String::new()
            } else {
                vs_baseline(measured, *config, who).map_or("n/a".to_owned(), |r| format!("{r:.2}x"))
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {client} | {:.0} | {ratio} | {} | {} | {} | {} |",
                i + 1,
                config.fsync.appendonly(),
                config.fsync.appendfsync(),
                if config.wait { "on" } else { "off" },
                figures.per_second(),
                ms(figures.acquire.p50()),
                ms(figures.acquire.p99()),
                ms(figures.release.p50()),
                figures.failures,
            );
        }
    }
    let mut notes = String::new();
    for (config, who, figures) in &measured.rows {
        if let Some(error) = &figures.first_error {
            let _ = writeln!(
                notes,
                "- {}, {}: {} failed, the first: `{error}`",
                config.name,
                who.short(),
                figures.failures
            );
        }
    }
    for (fsync, count) in &measured.rewrites {
        let _ = writeln!(
            notes,
            "- AOF rewrites during the run, appendfsync {} masters together: {count}",
            fsync.appendfsync()
        );
    }
    for probe in &measured.probes {
        let _ = writeln!(
            notes,
            "- Probe, one master with appendfsync {}: {PROBE_PAIRS} sequential `SET` + \
             `WAITAOF 1 0 {}` pairs on one connection took {} ms, {} of them acknowledged by \
             the local AOF{}",
            probe.fsync.appendfsync(),
            PROBE_WAIT.as_millis(),
            probe.elapsed.as_millis(),
            probe.acknowledged,
            if probe.fsync == Fsync::Everysec {
                format!(
                    " (`everysec` fsyncs at most once a second, and each write follows the \
                     previous acknowledgement: acknowledgements that each waited for an fsync \
                     take at least {} s; fewer mean the server acknowledged writes not yet \
                     synced, which is why `wait_for_aof` refuses `everysec`)",
                    PROBE_PAIRS - 1
                )
            } else {
                String::new()
            }
        );
    }
    if !notes.is_empty() {
        let _ = write!(out, "\n{notes}");
    }
    out
}

fn document(measured: &Measured, info: &Info, comparison: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Benchmark: waiting for the AOF\n\n\
         - Date: {}\n\
         - Machine: {}; the load averages below say how busy it was: compare the figures \
         with each other, within this run\n\
         - Server: {}; three sets of {} masters on 127.0.0.1, all started by the benchmark \
         before anything is measured, persistence on the command line: `--appendonly no`; \
         `--appendonly yes --appendfsync always`; `--appendonly yes --appendfsync everysec` \
         (the harness's data dirs, on the machine's disk)\n\
         - Mode: {}; run took {:.0} s; load average {} at the start, {} at the end\n\
         - Command: `{}`\n\
         - This library: one client per configuration, `lock(..).wait(Wait::No)` then \
         `release()`, `Builder::wait_for_aof` as the table says, TTL {} ms, node timeout {} ms.\n",
        info.date,
        info.machine,
        info.server,
        info.nodes,
        info.mode,
        info.elapsed_s,
        info.load.0,
        info.load.1,
        info.command,
        info.ttl_ms,
        NODE_TIMEOUT.as_millis(),
    );
    out.push_str(&table(measured, info));
    let _ = writeln!(out, "\n{comparison}\n\n```\n{}\n```", summary(measured));
    out
}

/// `bench aof summary: ...`: this library's figures per configuration.
fn summary(measured: &Measured) -> String {
    let mut fields = Vec::new();
    for config in CONFIGS {
        let Some(figures) = measured.get(config.name, Who::Ours) else {
            continue;
        };
        let ms = |us: f64| {
            if us.is_finite() {
                format!("{:.2}", us / 1_000.0)
            } else {
                "n/a".to_owned()
            }
        };
        fields.push(format!(
            "{0}_cycles_per_s={1:.0} {0}_acquire_p50_ms={2} {0}_acquire_p99_ms={3}",
            config.name,
            figures.per_second(),
            ms(figures.acquire.p50()),
            ms(figures.acquire.p99()),
        ));
    }
    format!("bench aof summary: {}", fields.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_names_read_in_the_right_direction() {
        // `compare` judges a figure by its name: no throughput figure may
        // contain a better-lower word ("wait" is one).
        for config in CONFIGS {
            assert!(!crate::compare::lower_is_better(&format!(
                "{}_cycles_per_s",
                config.name
            )));
            assert!(crate::compare::lower_is_better(&format!(
                "{}_acquire_p50_ms",
                config.name
            )));
        }
    }
}
