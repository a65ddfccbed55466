//! The cluster mode's run (`--shards`, `--memory`), its markdown report,
//! the capacity model computed from it, and its summary line.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cluster::{self, Clients, Layout, Misses, Phases, RSLOCK_ON_CLUSTERS, Single, Who};
use crate::memory::{self, MemoryRun};
use crate::stats::{ratio, ratio_value, us};

/// What the cluster mode was asked to do.
pub(crate) struct ClusterArgs {
    pub(crate) quick: bool,
    /// Shards per node of each layout; 0 is plain masters.
    pub(crate) shards: Vec<usize>,
    pub(crate) nodes: usize,
    /// (f) and (g); off for `--memory`.
    pub(crate) latency: bool,
    /// Locks held in (i); 0 skips it.
    pub(crate) memory_locks: u64,
    pub(crate) out: Option<PathBuf>,
    pub(crate) ttl: Duration,
    /// Tasks of (g) and of the acquires of (i); 64 unless given.
    pub(crate) tasks: Option<usize>,
}

struct Plan {
    warm_up_cycles: usize,
    single_cycles: usize,
    single_budget: Duration,
    tasks: usize,
    /// Rounds of (g), rounded up to whole rotations of the pairs when
    /// `fair` (see [`crate::scenarios::fair_rounds`]).
    rounds: usize,
    fair: bool,
    phase: Duration,
    idle: Duration,
    /// Before reading the memory in (i).
    settle: Duration,
}

impl Plan {
    fn of(quick: bool) -> Self {
        if quick {
            // A smoke run (CI): every path once, in a few seconds.
            Self {
                warm_up_cycles: 10,
                single_cycles: 50,
                single_budget: Duration::from_secs(5),
                tasks: 64,
                rounds: 1,
                fair: false,
                phase: Duration::from_millis(50),
                idle: Duration::from_millis(100),
                settle: Duration::from_millis(100),
            }
        } else {
            Self {
                warm_up_cycles: 200,
                single_cycles: 2_000,
                single_budget: Duration::from_secs(90),
                tasks: 64,
                rounds: 1,
                fair: true,
                phase: Duration::from_secs(1),
                idle: Duration::from_secs(2),
                settle: Duration::from_millis(1_500),
            }
        }
    }
}

/// The capacity model's targets and assumptions.
const TARGET_HELD: f64 = 10_000_000.0;
const TARGET_RATE: f64 = 1_000_000.0;
/// The share of its core a shard is planned to use: a single-threaded
/// server near 100% queues every request behind the others.
const UTILISATION: f64 = 0.5;
/// `used_memory` to `maxmemory`/RSS: allocator fragmentation, a hash table
/// doubling while it rehashes, client buffers.
const MEMORY_HEADROOM: f64 = 1.5;

/// Everything one cluster run measured.
struct Measured {
    /// Shards per node of each layout, in layout order.
    shards: Vec<usize>,
    single: BTreeMap<(usize, Who), Single>,
    phases: BTreeMap<(usize, Who), Phases>,
    /// Each layout's servers at rest, µs of CPU per second per server.
    idle: Vec<f64>,
    memory: Vec<MemoryRun>,
}

/// Runs the cluster mode; returns its summary line.
pub(crate) fn run(args: &ClusterArgs) -> Result<String, String> {
    let mut plan = Plan::of(args.quick);
    if let Some(tasks) = args.tasks {
        plan.tasks = tasks;
    }
    let started = Instant::now();
    let load_at_start = crate::load_average();
    crate::progress(&format!(
        "starting {} nodes of each layout ({}): {}",
        args.nodes,
        args.shards
            .iter()
            .map(|&s| cluster::label(s))
            .collect::<Vec<_>>()
            .join(", "),
        redlock_tests::server()
    ));
    let layouts: Vec<Layout> = args
        .shards
        .iter()
        .map(|&shards| Layout::start(shards, args.nodes))
        .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|err| format!("tokio runtime: {err}"))?;
    let mut measured = Measured {
        shards: args.shards.clone(),
        single: BTreeMap::new(),
        phases: BTreeMap::new(),
        idle: Vec::new(),
        memory: Vec::new(),
    };
    if args.latency {
        let clients = runtime.block_on(async {
            let mut clients = Vec::new();
            for layout in &layouts {
                clients.push(Clients::connect(layout, args.ttl).await?);
            }
            Ok::<_, String>(Arc::new(clients))
        })?;
        crate::progress("warming up");
        runtime.block_on(cluster::warm_up(&layouts, &clients, plan.warm_up_cycles));
        crate::progress(&format!("servers at rest for {:?}", plan.idle));
        measured.idle = cluster::idle_cpu(&layouts, plan.idle);
        let pairs = cluster::pairs(&layouts);
        crate::progress(&format!(
            "(f) one client, {} acquire+release cycles per layout and contender",
            plan.single_cycles
        ));
        measured.single = runtime.block_on(cluster::single_client(
            &layouts,
            &clients,
            plan.single_cycles,
            plan.single_budget,
        ));
        let rounds = if plan.fair {
            crate::scenarios::fair_rounds(plan.rounds, &pairs)
        } else {
            plan.rounds
        };
        crate::progress(&format!(
            "(g) {} tasks on distinct keys, {rounds} x {:?} per layout and contender",
            plan.tasks, plan.phase
        ));
        measured.phases = runtime.block_on(cluster::throughput(
            &layouts, &clients, plan.tasks, rounds, plan.phase,
        ));
        drop(clients);
    }
    if args.memory_locks > 0 {
        measured.memory = memory::measure_all(
            &runtime,
            &layouts,
            args.memory_locks,
            plan.tasks,
            plan.settle,
        )?;
    }
    runtime.shutdown_timeout(Duration::from_secs(1));
    drop(layouts);

    let info = Info {
        date: crate::today(),
        machine: crate::machine(),
        server: crate::server_version(),
        command: crate::bench_command(),
        mode: if args.quick { "quick" } else { "full" },
        nodes: args.nodes,
        ttl_ms: args.ttl.as_millis(),
        single_cycles: plan.single_cycles,
        tasks: plan.tasks,
        memory_locks: args.memory_locks,
        settle: plan.settle,
        elapsed_s: started.elapsed().as_secs_f64(),
        load: (load_at_start, crate::load_average()),
    };
    let out = crate::out_dir(args.out.as_deref(), args.quick)?;
    let server = redlock_tests::server().name().to_lowercase();
    let stem = if args.latency {
        format!("{server}-cluster-nodes-{}", args.nodes)
    } else {
        format!("{server}-lock-memory")
    };
    let summary = summary(&measured);
    let name = format!("{stem}.md");
    // Before the file is overwritten, where the run writes to benches/results.
    let comparison = crate::compare::against_committed(&name, &summary, args.quick);
    let document = document(&measured, &info, &comparison);
    let path = out.join(&name);
    std::fs::write(&path, &document).map_err(|err| format!("{}: {err}", path.display()))?;
    println!("{}", tables(&measured, &info));
    println!("wrote {} in {:.0} s", path.display(), info.elapsed_s);
    println!("{comparison}");
    Ok(summary)
}

struct Info {
    date: String,
    machine: String,
    server: String,
    command: String,
    mode: &'static str,
    nodes: usize,
    ttl_ms: u128,
    single_cycles: usize,
    tasks: usize,
    memory_locks: u64,
    settle: Duration,
    elapsed_s: f64,
    load: (String, String),
}

fn row(out: &mut String, cells: &[String]) {
    let _ = writeln!(out, "| {} |", cells.join(" | "));
}

fn header(out: &mut String, cells: &[&str]) {
    let _ = writeln!(out, "| {} |", cells.join(" | "));
    let _ = writeln!(
        out,
        "|{}",
        cells
            .iter()
            .enumerate()
            .map(|(i, _)| if i <= 1 { "---|" } else { "---:|" })
            .collect::<String>()
    );
}

/// A figure with one decimal, or "n/a".
fn one(value: f64) -> String {
    if value.is_finite() {
        format!("{value:.1}")
    } else {
        "n/a".to_owned()
    }
}

/// A whole number with thousands separators.
fn thousands(value: f64) -> String {
    if !value.is_finite() {
        return "n/a".to_owned();
    }
    let digits = format!("{:.0}", value.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if value < 0.0 { format!("-{out}") } else { out }
}

fn index_of(measured: &Measured, shards: usize) -> Option<usize> {
    measured.shards.iter().position(|&s| s == shards)
}

/// The layout with the most shards, if it is a cluster.
fn widest(measured: &Measured) -> Option<usize> {
    measured
        .shards
        .iter()
        .enumerate()
        .filter(|(_, s)| **s > 0)
        .max_by_key(|(_, s)| **s)
        .map(|(i, _)| i)
}

fn tables(measured: &Measured, info: &Info) -> String {
    let mut out = String::new();
    single_table(&mut out, measured, info);
    phases_table(&mut out, measured, info);
    spread_tables(&mut out, measured);
    memory_table(&mut out, measured, info);
    capacity(&mut out, measured);
    out
}

fn misses_text(misses: &Misses) -> String {
    format!(
        "{} / {} / {}",
        misses.acquire_failed, misses.release_not_held, misses.release_failed
    )
}

fn single_table(out: &mut String, measured: &Measured, info: &Info) {
    if measured.single.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "### (f) One client: acquire then release on fresh keys\n\n\
         {} cycles per layout and contender, one at a time, in blocks of {} cycles that \
         take turns in an order that rotates. Latencies in µs. \"vs plain\": the same \
         contender's figure over its figure on plain masters, in the same run. Servers' \
         CPU: of every server process of the layout during the contender's blocks, per \
         cycle per node (all its shards together). One request at a time, each waking \
         its server: on this VM that is mostly the cost of the wakeups (a server at \
         rest spends about a millisecond per second on its cron, see (g)), so compare \
         the layouts with each other here, and take the cost of a busy server from (g). \
         Node misses (this library): acquire votes that failed / nodes where the \
         release found no key of ours / release votes that failed, over all cycles.\n",
        info.single_cycles,
        cluster::BLOCK,
    );
    header(
        out,
        &[
            "layout",
            "contender",
            "acquire p50",
            "p90",
            "p99",
            "release p50",
            "p90",
            "p99",
            "servers CPU µs per cycle per node",
            "acquire p50 vs plain",
            "CPU vs plain",
            "failed",
            "node misses",
        ],
    );
    let plain = index_of(measured, 0);
    for (layout, &shards) in measured.shards.iter().enumerate() {
        for who in Who::ALL {
            let Some(single) = measured.single.get(&(layout, who)) else {
                if !who.runs_on(shards) {
                    let mut cells = vec![cluster::label(shards), who.label().to_owned()];
                    cells.push(RSLOCK_ON_CLUSTERS.to_owned());
                    cells.extend((0..10).map(|_| String::new()));
                    row(out, &cells);
                }
                continue;
            };
            let s = &single.stats;
            let cpu = single_node_cpu(single, info.nodes);
            let base = plain
                .filter(|&p| p != layout)
                .and_then(|p| measured.single.get(&(p, who)));
            row(
                out,
                &[
                    cluster::label(shards),
                    who.label().to_owned(),
                    us(s.acquire.p50()),
                    us(s.acquire.p90()),
                    us(s.acquire.p99()),
                    us(s.release.p50()),
                    us(s.release.p90()),
                    us(s.release.p99()),
                    one(cpu),
                    base.map_or(String::new(), |b| {
                        ratio(s.acquire.p50(), b.stats.acquire.p50())
                    }),
                    base.map_or(String::new(), |b| {
                        ratio(cpu, single_node_cpu(b, info.nodes))
                    }),
                    (s.failures + s.timeouts).to_string(),
                    if matches!(who, Who::Ours | Who::Quiet) {
                        misses_text(&single.misses)
                    } else {
                        String::new()
                    },
                ],
            );
        }
    }
    out.push('\n');
    for ((layout, who), single) in &measured.single {
        for (error, count) in &single.stats.errors {
            let _ = writeln!(
                out,
                "- {}, {}: {count} x `{}`",
                cluster::label(measured.shards[*layout]),
                who.label(),
                error.replace('`', "'")
            );
        }
    }
}

/// Server CPU per cycle per node in (f), µs.
fn single_node_cpu(single: &Single, nodes: usize) -> f64 {
    let cycles = single.cycles();
    if cycles == 0 || single.server_cpu.is_zero() {
        return f64::NAN;
    }
    single.server_cpu.as_secs_f64() * 1e6 / cycles as f64 / nodes.max(1) as f64
}

fn phases_table(out: &mut String, measured: &Measured, info: &Info) {
    if measured.phases.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "### (g) {} tasks, each on its own keys\n\n\
         Acquire+release cycles; the phases of every layout and contender interleaved, \
         in an order that rotates. Latencies in µs. CPU: microseconds of CPU time per \
         cycle, of this process (the client) and of every server process of the layout \
         (all {} nodes, all their shards); \"per node\" is the servers' figure over the \
         nodes: what one lock cycle costs one Redlock node. \"Per shard\": cycles/s over \
         the shards of a node (each cycle lands on one shard of every node); on this \
         2-core machine the client and all servers share the cores, so cycles/s shows \
         the machine's limit, not a shard's. \"vs plain\": the same contender's total \
         CPU per cycle over its figure on plain masters. Node misses as in (f).\n",
        info.tasks, info.nodes
    );
    header(
        out,
        &[
            "layout",
            "contender",
            "cycles/s",
            "per shard",
            "acquire p50",
            "acquire p99",
            "release p50",
            "release p99",
            "client CPU/cycle",
            "servers CPU/cycle",
            "per node",
            "total CPU/cycle",
            "vs plain",
            "failed",
            "node misses",
            "keys left",
        ],
    );
    let plain = index_of(measured, 0);
    for (layout, &shards) in measured.shards.iter().enumerate() {
        for who in Who::ALL {
            let Some(p) = measured.phases.get(&(layout, who)) else {
                if !who.runs_on(shards) {
                    let mut cells = vec![cluster::label(shards), who.label().to_owned()];
                    cells.push(RSLOCK_ON_CLUSTERS.to_owned());
                    cells.extend((0..13).map(|_| String::new()));
                    row(out, &cells);
                }
                continue;
            };
            let total = p.per_cycle(p.client_cpu + p.server_cpu());
            let versus = plain
                .filter(|&i| i != layout)
                .and_then(|i| measured.phases.get(&(i, who)))
                .map_or(String::new(), |q| {
                    ratio(total, q.per_cycle(q.client_cpu + q.server_cpu()))
                });
            row(
                out,
                &[
                    cluster::label(shards),
                    who.label().to_owned(),
                    thousands(p.per_second()),
                    if shards == 0 {
                        String::new()
                    } else {
                        thousands(p.per_second() / shards as f64)
                    },
                    us(p.acquire.p50()),
                    us(p.acquire.p99()),
                    us(p.release.p50()),
                    us(p.release.p99()),
                    one(p.per_cycle(p.client_cpu)),
                    one(p.per_cycle(p.server_cpu())),
                    one(p.node_us_per_cycle()),
                    one(total),
                    versus,
                    p.failures.to_string(),
                    if matches!(who, Who::Ours | Who::Quiet) {
                        misses_text(&p.misses)
                    } else {
                        String::new()
                    },
                    p.keys_left.to_string(),
                ],
            );
        }
    }
    out.push('\n');
    if !measured.idle.is_empty() {
        let idle = measured
            .shards
            .iter()
            .zip(&measured.idle)
            .map(|(&shards, idle)| format!("{} {idle:.0}", cluster::label(shards)))
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(
            out,
            "At rest, before (f): µs of CPU per second per server process (cron, and on \
             a cluster the bus's gossip), counted in (f) and (g) too: {idle}.\n"
        );
    }
}

/// The calls per cycle per node as `SET 1.00, EVALSHA 1.00, ...`, most first.
fn calls_text(calls: &BTreeMap<String, f64>) -> String {
    let mut calls: Vec<(&String, &f64)> = calls.iter().filter(|(_, n)| **n >= 0.005).collect();
    calls.sort_by(|a, b| b.1.total_cmp(a.1).then(a.0.cmp(b.0)));
    calls
        .iter()
        .map(|(name, n)| format!("{} {n:.2}", name.to_uppercase()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The worst node's busiest shard over that node's mean (`values`
/// `[node][shard]`).
fn spread_in_nodes(values: &[Vec<f64>]) -> f64 {
    values
        .iter()
        .map(|node| spread_f(node))
        .fold(f64::NAN, f64::max)
}

/// The largest of `values` over their mean.
fn spread_f(values: &[f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if mean > 0.0 { max / mean } else { f64::NAN }
}

/// Calls and CPU seconds of every shard, `[node][shard]`.
fn shard_figures(p: &Phases) -> (Vec<Vec<f64>>, Vec<Vec<f64>>) {
    let calls = p
        .shard_call_totals()
        .into_iter()
        .map(|node| node.into_iter().map(|c| c as f64).collect())
        .collect();
    let cpu = p
        .shard_cpu
        .iter()
        .map(|node| node.iter().map(Duration::as_secs_f64).collect())
        .collect();
    (calls, cpu)
}

fn spread_tables(out: &mut String, measured: &Measured) {
    if measured.phases.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "### (h) How commands and CPU spread over the shards\n\n\
         From (g): `INFO commandstats` of every server process (which also counts the \
         commands a script runs: an `EVALSHA` of the release script is `EVALSHA`, `GET`, \
         `DEL`, `PUBLISH`), per lock cycle per node, summed over the node's shards. \
         \"Busiest / mean\": in each node, the shard with the most calls (or CPU) over \
         the mean of the node's shards, for the node where it is highest; 1.00 is \
         perfectly even. \"Commands per read event\": `total_commands_processed` over \
         `total_reads_processed` (`INFO stats`), all servers of the layout: how many \
         requests a server found waiting each time it read the client's connection. \
         The same 64 tasks spread over 3 shards leave each shard a third of the \
         requests in flight, so it reads fewer at a time and pays its per-read and \
         per-wakeup work (system calls, event loop) for fewer of them: that, not the \
         cluster, is what raises a 3-shard node's CPU per cycle in (g).\n"
    );
    header(
        out,
        &[
            "layout",
            "contender",
            "calls per cycle per node",
            "calls: busiest / mean shard",
            "CPU: busiest / mean shard",
            "commands per read event",
        ],
    );
    for (layout, &shards) in measured.shards.iter().enumerate() {
        for who in Who::ALL {
            let Some(p) = measured.phases.get(&(layout, who)) else {
                continue;
            };
            let (calls, cpu) = shard_figures(p);
            let spread = |values: &[Vec<f64>]| {
                if shards > 1 {
                    format!("{:.2}", spread_in_nodes(values))
                } else {
                    String::new()
                }
            };
            row(
                out,
                &[
                    cluster::label(shards),
                    who.label().to_owned(),
                    calls_text(&p.calls_per_cycle()),
                    spread(&calls),
                    spread(&cpu),
                    format!("{:.1}", p.commands_per_read()),
                ],
            );
        }
    }
    out.push('\n');
    // Shard by shard, for this library on the widest layout.
    let Some(layout) = widest(measured) else {
        return;
    };
    let shards = measured.shards[layout];
    let memory = measured
        .memory
        .iter()
        .find(|run| run.shards == shards && !run.fencing);
    let _ = writeln!(
        out,
        "Shard by shard, {} (this library, notices on and off; keys: the locks held \
         on node 1 in (i), fencing off):\n",
        cluster::label(shards)
    );
    header(
        out,
        &[
            "node",
            "shard",
            "calls per cycle",
            "CPU µs per cycle",
            "notices off: calls per cycle",
            "CPU µs per cycle",
            "keys held",
        ],
    );
    let ours = measured.phases.get(&(layout, Who::Ours));
    let quiet = measured.phases.get(&(layout, Who::Quiet));
    let figures = |p: Option<&Phases>, node: usize, shard: usize| -> (String, String) {
        p.map_or((String::new(), String::new()), |p| {
            let calls = p.shard_call_totals()[node][shard] as f64 / p.cycles.max(1) as f64;
            (
                format!("{calls:.2}"),
                one(p.per_cycle(p.shard_cpu[node][shard])),
            )
        })
    };
    let nodes = ours.map_or(0, |p| p.shard_cpu.len());
    for node in 0..nodes {
        for shard in 0..shards {
            let (calls, cpu) = figures(ours, node, shard);
            let (quiet_calls, quiet_cpu) = figures(quiet, node, shard);
            let keys = match memory {
                Some(run) if node == 0 => thousands(run.keys_holding[shard] as f64),
                _ => String::new(),
            };
            row(
                out,
                &[
                    (node + 1).to_string(),
                    (shard + 1).to_string(),
                    calls,
                    cpu,
                    quiet_calls,
                    quiet_cpu,
                    keys,
                ],
            );
        }
    }
    out.push('\n');
}

fn memory_table(out: &mut String, measured: &Measured, info: &Info) {
    if measured.memory.is_empty() {
        return;
    }
    let allocator = measured
        .memory
        .first()
        .map_or(String::new(), |run| run.allocator.clone());
    let _ = writeln!(
        out,
        "### (i) Memory per held lock\n\n\
         This library holds {} locks on one node (a plain master, or a cluster node's \
         shards together), resource names of {} bytes, values of {} bytes, TTL 30 min; \
         `used_memory` (`INFO memory`, allocator {allocator}) of the node's servers \
         before, while held, and after every lock was released, each {:.1} s after the \
         last reply. Every Redlock node \
         stores the same keys, so the figure is per node, and per shard for the locks a \
         shard holds. With fencing a lock also has its resource's counter \
         (`{{resource}}\\0fencing`, no TTL), which stays after the release. \"Per shard\": \
         each shard's growth over the locks it holds, lowest-highest; \"keys busiest / \
         mean\": the spread of the held locks over the shards.\n",
        thousands(info.memory_locks as f64),
        memory::NAME_LEN,
        memory::VALUE_LEN,
        info.settle.as_secs_f64(),
    );
    header(
        out,
        &[
            "layout",
            "fencing",
            "locks held",
            "keys per lock",
            "used_memory before",
            "held",
            "after release",
            "bytes per held lock",
            "per shard",
            "keys busiest / mean",
            "keys after release",
            "bytes left per released resource",
            "acquires/s",
        ],
    );
    for run in &measured.memory {
        let (low, high) = run.bytes_per_lock_range();
        row(
            out,
            &[
                cluster::label(run.shards),
                if run.fencing { "on" } else { "off" }.to_owned(),
                if run.held == run.locks {
                    thousands(run.held as f64)
                } else {
                    format!(
                        "{} of {}",
                        thousands(run.held as f64),
                        thousands(run.locks as f64)
                    )
                },
                format!("{:.2}", run.keys_per_lock()),
                thousands(run.before.iter().sum::<i64>() as f64),
                thousands(run.holding.iter().sum::<i64>() as f64),
                thousands(run.after.iter().sum::<i64>() as f64),
                one(run.bytes_per_lock()),
                if run.shards <= 1 {
                    String::new()
                } else {
                    format!("{low:.0}-{high:.0}")
                },
                if run.shards <= 1 {
                    String::new()
                } else {
                    format!("{:.3}", run.key_spread())
                },
                thousands(run.keys_after.iter().sum::<i64>() as f64),
                one(run.bytes_left_per_resource()),
                thousands(run.held as f64 / run.acquire_seconds.max(1e-9)),
            ],
        );
    }
    out.push('\n');
}

/// The model's inputs, from this run.
struct Inputs {
    /// The cluster layout they come from.
    shards: usize,
    /// Server CPU per lock cycle per node, notices off and on, µs.
    node_quiet: f64,
    node_ours: f64,
    /// Commands per read event there.
    commands_per_read: f64,
    /// The same with every server batching the whole load: the 1-shard
    /// layout (or plain masters), notices off; and its commands per read.
    node_quiet_batched: Option<(usize, f64, f64)>,
    /// Client CPU per cycle (notices off), µs, for `nodes` nodes.
    client_quiet: f64,
    /// What a notice's `PUBLISH` costs each other shard of a node, µs.
    broadcast: Option<f64>,
    bytes_per_lock: Option<f64>,
    bytes_per_fenced_lock: Option<f64>,
    bytes_per_counter: Option<f64>,
}

fn inputs(measured: &Measured) -> Option<Inputs> {
    let layout = widest(measured)?;
    let shards = measured.shards[layout];
    let quiet = measured.phases.get(&(layout, Who::Quiet))?;
    let ours = measured.phases.get(&(layout, Who::Ours))?;
    // The notice's extra cost on a 1-shard node is its cost on the shard
    // that got it; what more a wider node pays is the broadcast.
    let broadcast = index_of(measured, 1)
        .filter(|_| shards > 1)
        .and_then(|one| {
            let quiet_1 = measured.phases.get(&(one, Who::Quiet))?;
            let ours_1 = measured.phases.get(&(one, Who::Ours))?;
            let extra_wide = ours.node_us_per_cycle() - quiet.node_us_per_cycle();
            let extra_one = ours_1.node_us_per_cycle() - quiet_1.node_us_per_cycle();
            Some(((extra_wide - extra_one) / (shards - 1) as f64).max(0.0))
        });
    let memory = |fencing: bool| {
        measured
            .memory
            .iter()
            .filter(|run| run.shards > 0 && run.fencing == fencing)
            .max_by_key(|run| run.shards)
    };
    let batched = index_of(measured, 1)
        .or_else(|| index_of(measured, 0))
        .filter(|&i| i != layout)
        .and_then(|i| {
            let p = measured.phases.get(&(i, Who::Quiet))?;
            Some((
                measured.shards[i],
                p.node_us_per_cycle(),
                p.commands_per_read(),
            ))
        });
    Some(Inputs {
        shards,
        node_quiet: quiet.node_us_per_cycle(),
        node_ours: ours.node_us_per_cycle(),
        commands_per_read: quiet.commands_per_read(),
        node_quiet_batched: batched,
        client_quiet: quiet.per_cycle(quiet.client_cpu),
        broadcast,
        bytes_per_lock: memory(false).map(MemoryRun::bytes_per_lock),
        bytes_per_fenced_lock: memory(true).map(MemoryRun::bytes_per_lock),
        bytes_per_counter: memory(true).map(MemoryRun::bytes_left_per_resource),
    })
}

/// Megabytes (10^6 bytes) or gigabytes, readable.
fn bytes_text(bytes: f64) -> String {
    if bytes >= 1e9 {
        format!("{:.1} GB", bytes / 1e9)
    } else {
        format!("{:.0} MB", bytes / 1e6)
    }
}

fn capacity(out: &mut String, measured: &Measured) {
    let Some(inputs) = inputs(measured) else {
        return;
    };
    let core = 1e6 * UTILISATION;
    let _ = writeln!(
        out,
        "### Capacity model, from this run\n\n\
         Inputs, from the {} of (g) and (i): a lock cycle (acquire + release) costs each \
         Redlock node {:.1} µs of server CPU with release notices off and {:.1} µs with \
         them on; the client {:.1} µs (notices off). A notice's `PUBLISH` costs each other \
         shard of a node {} µs. A held lock takes {} bytes of `used_memory` per node, {} \
         with fencing, whose counter keeps {} bytes per resource after the release.\n",
        cluster::label(inputs.shards),
        inputs.node_quiet,
        inputs.node_ours,
        inputs.client_quiet,
        inputs
            .broadcast
            .map_or("n/a (needs a 1-shard layout)".to_owned(), |b| format!(
                "{b:.1}"
            )),
        inputs
            .bytes_per_lock
            .map_or("n/a".to_owned(), |b| format!("{b:.0}")),
        inputs
            .bytes_per_fenced_lock
            .map_or("n/a".to_owned(), |b| format!("{b:.0}")),
        inputs
            .bytes_per_counter
            .map_or("n/a".to_owned(), |b| format!("{b:.0}")),
    );
    let per_shard = core / inputs.node_quiet;
    let batched = inputs
        .node_quiet_batched
        .map_or(String::new(), |(shards, cost, reads)| {
            format!(
                " With every server batching the whole load ({}: {reads:.0} commands per \
             read event, against {:.0} here) a cycle costs {cost:.1} µs and a shard \
             serves {}: the table takes the dearer figure.",
                cluster::label(shards),
                inputs.commands_per_read,
                thousands(core / cost),
            )
        });
    let _ = writeln!(
        out,
        "Assumptions: one core per shard, planned at {:.0}% of it (a single-threaded \
         server near 100% queues every request); every lock is held on all N nodes; \
         `used_memory` times {MEMORY_HEADROOM} for the allocator, a table rehashing and \
         buffers; the per-cycle costs of loopback on this machine hold on the real \
         network (they include the servers' socket work, which a real network makes \
         dearer, not cheaper). So one shard serves {} lock cycles/s with notices off, \
         at the batching of the {} ({:.0} commands per read event).{batched}\n",
        UTILISATION * 100.0,
        thousands(per_shard),
        cluster::label(inputs.shards),
        inputs.commands_per_read,
    );
    let shards_needed = (TARGET_RATE / per_shard).ceil().max(1.0);
    let _ = writeln!(
        out,
        "For {} locks held at once and {} acquisitions/s (each released again), \
         notices off:\n",
        thousands(TARGET_HELD),
        thousands(TARGET_RATE)
    );
    header(
        out,
        &[
            "N",
            "fencing",
            "shards per node",
            "locks per shard",
            "used_memory per shard",
            "planned per shard",
            "whole deployment: shards (cores)",
            "memory",
            "client cores",
        ],
    );
    for n in [3.0_f64, 5.0] {
        for (fencing, bytes) in [
            (false, inputs.bytes_per_lock),
            (true, inputs.bytes_per_fenced_lock),
        ] {
            let Some(bytes) = bytes else {
                continue;
            };
            let locks = TARGET_HELD / shards_needed;
            let memory = locks * bytes;
            // Client CPU grows with the nodes it talks to.
            let client = TARGET_RATE * inputs.client_quiet * n / measured_nodes(measured) / 1e6;
            row(
                out,
                &[
                    format!("{n:.0}"),
                    if fencing { "on" } else { "off" }.to_owned(),
                    format!("{shards_needed:.0}"),
                    thousands(locks),
                    bytes_text(memory),
                    bytes_text(memory * MEMORY_HEADROOM),
                    format!("{:.0}", n * shards_needed),
                    bytes_text(n * TARGET_HELD * bytes * MEMORY_HEADROOM),
                    format!("{client:.0}"),
                ],
            );
        }
    }
    out.push('\n');
    if let Some(b) = inputs.broadcast {
        let ceiling = core / b.max(1e-9);
        let _ = writeln!(
            out,
            "With notices on, every release's `PUBLISH` reaches every shard of the node, \
             so each shard pays {b:.1} µs for every lock cycle of the whole node, whatever \
             the shards: a node cannot pass {} cycles/s at {:.0}% per shard however many \
             shards it has (sharded notices would remove this). Fencing adds {} bytes per \
             resource ever locked with it, held or not, until the counters are deleted.\n",
            thousands(ceiling),
            UTILISATION * 100.0,
            inputs
                .bytes_per_counter
                .map_or("n/a".to_owned(), |b| format!("{b:.0}")),
        );
    }
}

/// The nodes of the layouts measured (all have the same count).
fn measured_nodes(measured: &Measured) -> f64 {
    measured
        .phases
        .values()
        .next()
        .map_or(1.0, |p| p.shard_cpu.len().max(1) as f64)
}

fn document(measured: &Measured, info: &Info, comparison: &str) -> String {
    let mut out = String::new();
    let title = if measured.phases.is_empty() && measured.single.is_empty() {
        "# Benchmark: memory per held lock"
    } else {
        "# Benchmark: cluster nodes"
    };
    let layouts = measured
        .shards
        .iter()
        .map(|&s| cluster::label(s))
        .collect::<Vec<_>>()
        .join(", ");
    let _ = writeln!(
        out,
        "{title}\n\n\
         - Date: {}\n\
         - Machine: {}\n\
         - Server: {}; {} Redlock nodes of each layout ({layouts}) on 127.0.0.1, all \
         started by the benchmark before anything is measured; a cluster's shards are \
         masters without replicas, slots split evenly\n\
         - Mode: {}; run took {:.0} s; load average {} at the start, {} at the end\n\
         - Command: `{}`\n\
         - TTL {} ms. This library: one client per layout, `lock(..).wait(Wait::No)`, its default \
         per-node timeout; a cluster node through the `redis` crate's cluster client. \
         The floor: raw `SET NX PX` then `DEL` on every node at once, through the same \
         cluster client on a cluster node (which sends each to the shard of its key), \
         plain multiplexed connections on a master. rslock 0.10 takes only `redis://` \
         URLs, so it runs on plain masters only.\n",
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
    );
    out.push_str(&tables(measured, info));
    let _ = writeln!(out, "{comparison}\n\n```\n{}\n```", summary(measured));
    out
}

/// `bench cluster summary: ...`, the cluster mode's last line.
fn summary(measured: &Measured) -> String {
    let f = |value: Option<f64>| value.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.2}"));
    let mut fields = Vec::new();
    let plain = index_of(measured, 0);
    for (layout, &shards) in measured.shards.iter().enumerate() {
        if shards == 0 {
            continue;
        }
        let ours = measured.phases.get(&(layout, Who::Quiet));
        let base = plain.and_then(|p| measured.phases.get(&(p, Who::Quiet)));
        let cpu = |p: &Phases| p.per_cycle(p.client_cpu + p.server_cpu());
        fields.push(format!(
            "cpu_per_cycle_s{shards}_vs_plain={}",
            f(ours
                .zip(base)
                .and_then(|(o, b)| ratio_value(cpu(o), cpu(b))))
        ));
        fields.push(format!(
            "node_cpu_per_cycle_s{shards}_vs_plain={}",
            f(ours
                .zip(base)
                .and_then(|(o, b)| ratio_value(o.node_us_per_cycle(), b.node_us_per_cycle())))
        ));
        if shards > 1 {
            let spread = ours.map(|p| spread_in_nodes(&shard_figures(p).0));
            fields.push(format!("calls_spread_s{shards}={}", f(spread)));
        }
    }
    let memory = |fencing: bool| {
        measured
            .memory
            .iter()
            .filter(|run| run.fencing == fencing)
            .max_by_key(|run| run.shards)
            .map(MemoryRun::bytes_per_lock)
    };
    fields.push(format!(
        "bytes_per_lock={}",
        memory(false).map_or("n/a".to_owned(), |b| format!("{b:.0}"))
    ));
    fields.push(format!(
        "bytes_per_fenced_lock={}",
        memory(true).map_or("n/a".to_owned(), |b| format!("{b:.0}"))
    ));
    format!("bench cluster summary: {}", fields.join(" "))
}
