//! `redlock-bench`: latency and throughput of `redlock-tokio` against real
//! local Redis masters, side by side with `rslock` (the most used Rust
//! Redlock crate) and with the floor (raw `SET NX PX` on every node at once
//! over plain `redis` multiplexed connections), in one run, interleaved. A
//! fourth row for reference sends the commands this library sends (`SET NX
//! PX GET` where the server has it, `EVALSHA` of the release script) the way
//! the floor sends `SET`: it splits what those commands cost the servers from
//! what the client itself costs.
//!
//! It starts its own servers (with the `redlock-tests` harness: free ports on
//! 127.0.0.1, no persistence, killed at exit): `redis-server` from `PATH`, or
//! the binary in `$REDLOCK_SERVER_BIN`, such as `valkey-server`. It runs:
//!
//! - (a) one client, acquire then release on fresh keys;
//! - (b) 64 tasks on distinct keys: cycles per second, and CPU per cycle of
//!   the client and of the servers;
//! - (c) 16 tasks contending for one key: holds per second, idle gap;
//! - (e) commands per node per acquire and per release (`INFO commandstats`);
//! - (d) one, then the most the quorum tolerates, of the nodes paused with
//!   `SIGSTOP`, beside a healthy baseline at the same pace (the same idle
//!   time after each cycle as a paused node costs), measured in the same run;
//! - (j) fairness, this library only ([`fairness`]): 8 tasks of one client,
//!   then 4 clients of 2 tasks, without and with the fair option, on one
//!   key, each holding it 20 ms: worst
//!   wait over the fair cycle, Jain's index of the grants, hand-over gap
//!   p50/p99. Printed after the tables, not in the report file;
//! - (s) semaphore, this library only ([`semaphore`]): acquire p50/p99 and
//!   permits granted per second for k = 1, 4 and 16 permits beside a plain
//!   lock, under 1 and 64 tasks of one client. Printed after the tables;
//!   `--only s` runs it alone;
//! - (k) throughput under faults ([`faults`]): (b)'s 64 tasks on distinct
//!   keys, this library and rslock, healthy, then with one and two masters
//!   paused, one killed (restarted empty after), one slowed by 20 ms per
//!   round trip (through a delaying proxy), then healthy again: cycles/s
//!   and the ratio to the mean of the same contender's two healthy phases,
//!   acquire p50/p99, the worst gap between two grants, the largest
//!   lateness of a heartbeat on the runtime and the longest one of its
//!   workers stayed in one stretch of polls, failures, keys left on the
//!   masters once the fault ended, and this process's resident set. Its
//!   clients lock with a TTL of 2 s (1 s with `--quick`) and a paused state
//!   lasts three TTLs. Run last, as it kills and restarts masters.
//!
//! The ratios of (b) in the summary line are medians of per-round ratios
//! ([`scenarios::paired_median`]).
//!
//! Contenders take turns, and their order rotates: by cycle in (a) and (d),
//! by round in (b) and (c), whose round counts are whole rotations, so every
//! contender runs in every position equally often; by fault state in (k).
//!
//! It writes a markdown report and an SVG chart to the output folder, named
//! after the server (`redis-nodes-5.md`, `valkey-nodes-5.svg`), prints
//! the tables, and ends with one line a script can read:
//!
//! ```text
//! bench summary: acquire_p50_vs_floor=R acquire_p99_vs_rslock=R release_p50_vs_rslock=R throughput_vs_rslock=R throughput_vs_floor=R cpu_per_cycle_vs_floor=R paused_p50_vs_healthy=R commands_per_acquire=C commands_per_release=C throughput_vs_safe_floor=R cpu_per_cycle_vs_safe_floor=R node_misses=N keys_left=N gap_p99_in_round_trips=R contention_vs_rslock=R contention_held_share=S paused1_throughput_vs_healthy=R paused2_throughput_vs_healthy=R paused1_worst_gap_ms=M paused1_runtime_stall_ms=M paused1_worker_stall_ms=M paused2_worst_gap_ms=M paused2_runtime_stall_ms=M paused2_worker_stall_ms=M
//! ```
//!
//! `paused1_throughput_vs_healthy` and `paused2_throughput_vs_healthy` are
//! (k)'s: this library's cycles/s with one, then two, masters paused, over
//! the mean of its two healthy phases (`n/a` where (k) did not run, or with
//! too few masters for two); `paused1_worst_gap_ms`,
//! `paused1_runtime_stall_ms` and `paused1_worker_stall_ms` its worst gap
//! between two grants, its heartbeat's largest lateness and the longest
//! one of its workers was held there, in ms.
//!
//! Above the summary, one line compares it with the last committed result
//! for the same server and shape ([`compare`]): the figures that moved the
//! wrong way by more than a fifth, also written into the report file.
//!
//! ```text
//! redlock-bench [--quick] [--nodes 1|3|5|7] [--only abcdejks]
//!               [--contenders ours,rslock,floor,script-floor]
//!               [--out DIR] [--ttl-ms MS] [--retry-jitter-ms MS]
//! ```
//!
//! `--only` and `--contenders` narrow a run down, for profiling one
//! contender in one scenario (`perf record -p` on the running program).
//!
//! Cluster nodes ([`cluster`]): `--shards 0,1,3` runs instead N nodes of
//! each layout, plain masters (0) and Redis Clusters of 1 and 3 shards per
//! node, side by side: (f) latency, (g) 64-task throughput with CPU per
//! cycle of the client and of every server process, (h) how commands and
//! CPU spread over the shards, (i) memory per held lock, with and without
//! fencing ([`memory`]), and a capacity model computed from them. It writes
//! `redis-cluster-nodes-3.md` and ends with `bench cluster summary: ...`.
//! `--nodes` is 3 there unless given. `--memory` runs (i) alone on one node
//! of each layout (`redis-lock-memory.md`); `--memory-locks N` sets how many
//! locks (i) holds (100,000; 500 with `--quick`; 0 skips it). `--quick`
//! is a smoke run of a few seconds, as `make bench-quick` (CI) runs it.
//! `--tasks N` sets the tasks of (g) and (i) (64).
//!
//! ```text
//! redlock-bench --shards 0,1,3 [--nodes N] [--quick] [--tasks N] [--memory-locks N] [--out DIR]
//! redlock-bench --memory [--shards 0,1,3] [--memory-locks N] [--out DIR]
//! ```
//!
//! Scaling curves ([`scaling`]): `--scaling` (or `--only scaling`) runs
//! (b) at 1, 4, 16, 64 and 256 tasks on 5 masters and at 1, 3, 5 and 7
//! masters with 64 tasks, for ours, rslock and both floors, and writes
//! `redis-scaling.md` and `redis-scaling.svg` (`make bench-scaling`).
//!
//! ```text
//! redlock-bench --scaling [--quick] [--contenders ours,rslock,floor,safe-floor] [--out DIR]
//! ```
//!
//! The marketplace ([`market`]): `--market` runs "Redis in Action"'s game
//! market, optimistic transactions against a lock on the whole market and
//! locks per item, on one data server with the locks on 1, 3 and 5 other
//! masters, audited after every cell (`make bench-market`).
//!
//! ```text
//! redlock-bench --market [--quick] [--seconds N] [--shapes 1/1,5/5] [--strategies watch,fine-3] [--planted-race] [--out DIR]
//! ```
//!
//! What waiting for the AOF costs ([`aof`]): `--aof` runs (b)'s 64 tasks
//! on distinct keys on three sets of masters started together (AOF off,
//! `appendfsync always`, `appendfsync everysec`), `Builder::wait_for_aof`
//! off and on, beside a raw `SET NX PX` (+ `WAITAOF`) floor, and writes
//! `valkey-aof.md` (`make bench-aof`). It needs `WAITAOF` (Valkey, Redis
//! 7.2 and later) and fails with a line saying so on another server.
//!
//! ```text
//! redlock-bench --aof [--quick] [--nodes N] [--tasks N] [--ttl-ms MS] [--out DIR]
//! ```
//!
//! `make bench` and `make bench-quick` run it in release mode.

mod aof;
mod chart;
mod cluster;
mod cluster_report;
mod compare;
mod contenders;
mod cpu;
mod fairness;
mod faults;
mod market;
mod memory;
mod monitor;
mod report;
mod scaling;
mod scenarios;
mod semaphore;
mod stats;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redlock_tests::RedisCluster;

use crate::contenders::{Common, Contenders, Kind};
use crate::report::{Results, RunInfo, Summary};
use crate::scenarios::PausedPlan;

/// How much of everything a run does. Rounds of (b) and (c) are rounded up
/// to a whole number of rotations of the contenders
/// ([`scenarios::fair_rounds`]).
#[derive(Clone, Copy, Debug)]
struct Plan {
    warm_up_cycles: usize,
    single_cycles: usize,
    single_budget: Duration,
    tasks: usize,
    throughput_rounds: usize,
    throughput_phase: Duration,
    contention_tasks: usize,
    contention_holds: u64,
    contention_rounds: usize,
    contention_budget: Duration,
    paused: PausedPlan,
    command_operations: u64,
    /// How long each shape of (j) runs.
    fairness: Duration,
    /// How long each phase of (k) runs.
    faults: faults::FaultPlan,
    /// How long each shape of (s) runs.
    semaphore: Duration,
}

impl Plan {
    fn full() -> Self {
        Self {
            warm_up_cycles: 300,
            single_cycles: 5_000,
            single_budget: Duration::from_secs(120),
            tasks: 64,
            throughput_rounds: 8,
            throughput_phase: Duration::from_secs(2),
            contention_tasks: 16,
            contention_holds: 150,
            contention_rounds: 3,
            contention_budget: Duration::from_secs(20),
            paused: PausedPlan {
                ours_per_turn: 20,
                others_per_turn: 1,
                ours_cycles: 300,
                budget: Duration::from_secs(40),
            },
            command_operations: 200,
            fairness: Duration::from_secs(10),
            faults: faults::FaultPlan::full(),
            semaphore: Duration::from_secs(3),
        }
    }

    fn quick() -> Self {
        Self {
            warm_up_cycles: 50,
            single_cycles: 500,
            single_budget: Duration::from_secs(10),
            tasks: 64,
            throughput_rounds: 2,
            throughput_phase: Duration::from_millis(500),
            contention_tasks: 16,
            contention_holds: 30,
            contention_rounds: 1,
            contention_budget: Duration::from_secs(4),
            paused: PausedPlan {
                ours_per_turn: 20,
                others_per_turn: 1,
                ours_cycles: 40,
                budget: Duration::from_secs(4),
            },
            command_operations: 50,
            fairness: Duration::from_secs(1),
            faults: faults::FaultPlan::quick(),
            semaphore: Duration::from_millis(300),
        }
    }
}

struct Args {
    quick: bool,
    /// Which scenarios to run, as letters: "abcdejks" by default.
    only: String,
    /// Which contenders to run (all by default): for profiling one alone.
    kinds: Vec<Kind>,
    /// `None`: 5, or 3 in the cluster mode (1 with `--memory`).
    nodes: Option<usize>,
    out: Option<PathBuf>,
    ttl: Duration,
    retry_jitter: Duration,
    /// The cluster mode: shards per node of each layout (0: plain masters).
    shards: Option<Vec<usize>>,
    /// The cluster mode's memory part alone.
    memory: bool,
    memory_locks: Option<u64>,
    /// The cluster mode's tasks in (g) and (i).
    tasks: Option<usize>,
    /// The scaling curves alone ([`scaling`]).
    scaling: bool,
    /// The cost of waiting for the AOF alone ([`aof`]).
    aof: bool,
}

const USAGE: &str = "usage: redlock-bench [--quick] [--nodes 1|3|5|7] [--only abcdejks] [--contenders ours,rslock,floor,script-floor] [--out DIR] [--ttl-ms MS] [--retry-jitter-ms MS]
       redlock-bench --shards 0,1,3 [--nodes N] [--quick] [--tasks N] [--memory-locks N] [--out DIR] [--ttl-ms MS]
       redlock-bench --memory [--shards 0,1,3] [--memory-locks N] [--out DIR]
       redlock-bench --scaling [--quick] [--contenders ours,rslock,floor,safe-floor] [--out DIR]
       redlock-bench --aof [--quick] [--nodes N] [--tasks N] [--ttl-ms MS] [--out DIR]";

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        quick: false,
        only: "abcdejks".to_owned(),
        kinds: Kind::ALL.to_vec(),
        nodes: None,
        out: None,
        ttl: Duration::from_secs(10),
        retry_jitter: Duration::from_millis(50),
        shards: None,
        memory: false,
        memory_locks: None,
        tasks: None,
        scaling: false,
        aof: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--quick" => args.quick = true,
            "--nodes" => {
                let nodes = value("--nodes")?
                    .parse()
                    .map_err(|err| format!("--nodes: {err}"))?;
                if !(1..=15).contains(&nodes) {
                    return Err("--nodes: between 1 and 15".to_owned());
                }
                args.nodes = Some(nodes);
            }
            "--shards" => {
                let list = value("--shards")?;
                let mut shards = Vec::new();
                for item in list.split(',') {
                    let n: usize = item
                        .trim()
                        .parse()
                        .map_err(|err| format!("--shards: {item:?}: {err}"))?;
                    if n > 16 {
                        return Err("--shards: between 0 and 16 shards per node".to_owned());
                    }
                    if !shards.contains(&n) {
                        shards.push(n);
                    }
                }
                args.shards = Some(shards);
            }
            "--memory" => args.memory = true,
            "--scaling" => args.scaling = true,
            "--aof" => args.aof = true,
            "--tasks" => {
                let tasks: usize = value("--tasks")?
                    .parse()
                    .map_err(|err| format!("--tasks: {err}"))?;
                if !(1..=4096).contains(&tasks) {
                    return Err("--tasks: between 1 and 4096".to_owned());
                }
                args.tasks = Some(tasks);
            }
            "--memory-locks" => {
                args.memory_locks = Some(
                    value("--memory-locks")?
                        .parse()
                        .map_err(|err| format!("--memory-locks: {err}"))?,
                );
            }
            "--only" => {
                args.only = value("--only")?;
                if args.only == "scaling" {
                    args.scaling = true;
                    continue;
                }
                if args.only.is_empty() || !args.only.chars().all(|c| "abcdejks".contains(c)) {
                    return Err("--only: letters among a, b, c, d, e, j, k, s".to_owned());
                }
            }
            "--contenders" => {
                let names = value("--contenders")?;
                args.kinds = Kind::ALL
                    .into_iter()
                    .filter(|kind| names.split(',').any(|name| name == kind.short()))
                    .collect();
                if args.kinds.is_empty() {
                    return Err("--contenders: a comma-separated list among ours, rslock, floor, script-floor".to_owned());
                }
            }
            "--out" => args.out = Some(PathBuf::from(value("--out")?)),
            "--ttl-ms" => {
                let ms: u64 = value("--ttl-ms")?
                    .parse()
                    .map_err(|err| format!("--ttl-ms: {err}"))?;
                args.ttl = Duration::from_millis(ms);
            }
            "--retry-jitter-ms" => {
                let ms: u64 = value("--retry-jitter-ms")?
                    .parse()
                    .map_err(|err| format!("--retry-jitter-ms: {err}"))?;
                args.retry_jitter = Duration::from_millis(ms.max(1));
            }
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    if std::env::args().any(|arg| arg == "--market") {
        return match market::parse_args(std::env::args().skip(1))
            .and_then(|args| market::run(&args))
        {
            Ok(summary) => {
                println!("{summary}");
                ExitCode::SUCCESS
            }
            Err(message) => {
                eprintln!("redlock-bench: {message}");
                ExitCode::FAILURE
            }
        };
    }
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let outcome = if args.aof {
        aof::run(&aof::AofArgs {
            quick: args.quick,
            nodes: args.nodes.unwrap_or(5),
            tasks: args.tasks.unwrap_or(64),
            ttl: args.ttl,
            out: args.out.clone(),
        })
    } else if args.scaling {
        scaling::run(&scaling::ScalingArgs {
            quick: args.quick,
            kinds: args.kinds.clone(),
            out: args.out.clone(),
            common: Common {
                ttl: args.ttl,
                retry_jitter: args.retry_jitter,
                node_timeout: None,
            },
        })
    } else if args.shards.is_some() || args.memory {
        cluster_report::run(&cluster_report::ClusterArgs {
            quick: args.quick,
            shards: args.shards.clone().unwrap_or_else(|| vec![0, 1, 3]),
            nodes: args.nodes.unwrap_or(if args.memory { 1 } else { 3 }),
            latency: !args.memory,
            memory_locks: args
                .memory_locks
                .unwrap_or(if args.quick { 500 } else { 100_000 }),
            out: args.out.clone(),
            ttl: args.ttl,
            tasks: args.tasks,
        })
    } else {
        run(&args)
    };
    match outcome {
        Ok(summary) => {
            println!("{summary}");
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("redlock-bench: {message}");
            ExitCode::FAILURE
        }
    }
}

fn progress(message: &str) {
    eprintln!("redlock-bench: {message}");
}

/// Runs everything; returns the summary line.
fn run(args: &Args) -> Result<String, String> {
    let nodes = args.nodes.unwrap_or(5);
    let plan = if args.quick {
        Plan::quick()
    } else {
        Plan::full()
    };
    let started = Instant::now();
    let load_at_start = load_average();
    progress(&format!(
        "starting {} masters: {}",
        nodes,
        redlock_tests::server()
    ));
    let cluster = RedisCluster::start(nodes);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|err| format!("tokio runtime: {err}"))?;
    let common = Common {
        ttl: args.ttl,
        retry_jitter: args.retry_jitter,
        node_timeout: None,
    };
    let contenders = Arc::new(runtime.block_on(Contenders::connect(&cluster.urls(), common))?);
    let node_timeout = contenders.ours.settings().node_timeout();

    progress("warming up");
    runtime.block_on(scenarios::warm_up(
        &contenders,
        plan.warm_up_cycles,
        Duration::from_secs(20),
    ));
    let runs = |letter: char| args.only.contains(letter);
    let all: Vec<Kind> = args.kinds.clone();
    let main: Vec<Kind> = all
        .iter()
        .copied()
        .filter(|kind| Kind::MAIN.contains(kind))
        .collect();
    let mut single = Default::default();
    if runs('a') {
        progress(&format!(
            "(a) one client, {} acquire+release cycles per contender",
            plan.single_cycles
        ));
        single = runtime.block_on(scenarios::single_client(
            &contenders,
            &all,
            plan.single_cycles,
            plan.single_budget,
        ));
    }
    let mut throughput = Default::default();
    if runs('b') {
        progress(&format!(
            "(b) {} tasks on distinct keys, {} x {:?} per contender",
            plan.tasks,
            scenarios::fair_rounds(plan.throughput_rounds, &all),
            plan.throughput_phase
        ));
        let servers: Vec<u32> = cluster.nodes().iter().filter_map(|n| n.pid()).collect();
        throughput = runtime.block_on(scenarios::throughput(
            &contenders,
            &all,
            &cluster,
            &servers,
            plan.tasks,
            plan.throughput_rounds,
            plan.throughput_phase,
        ));
    }
    let mut contention = Default::default();
    if runs('c') {
        progress(&format!(
            "(c) {} tasks contending for one key, {} x {} holds per contender",
            plan.contention_tasks,
            scenarios::fair_rounds(plan.contention_rounds, &main),
            plan.contention_holds
        ));
        contention = runtime.block_on(scenarios::contention(
            &contenders,
            &main,
            plan.contention_tasks,
            plan.contention_holds,
            plan.contention_rounds,
            plan.contention_budget,
        ));
    }
    let mut commands = Default::default();
    if runs('e') {
        progress("(e) commands per node per operation");
        commands = scenarios::commands(
            &runtime,
            &cluster,
            &contenders,
            &all,
            plan.command_operations,
        )?;
    }
    // The healthy baseline, one node, then as many as the quorum can do without.
    let tolerated = (nodes - 1) / 2;
    let mut levels = vec![0];
    for level in [1, tolerated] {
        if level >= 1 && level <= tolerated && !levels.contains(&level) {
            levels.push(level);
        }
    }
    let mut paused = Vec::new();
    if runs('d') && tolerated == 0 {
        progress("(d) skipped: a single node cannot lose any");
    } else if runs('d') {
        progress(&format!(
            "(d) nodes paused: {:?} of {} (0: healthy, same pace)",
            levels, nodes
        ));
        paused = scenarios::paused(
            &runtime,
            &cluster,
            &contenders,
            &levels,
            &main,
            node_timeout,
            plan.paused,
        );
    }
    let mut fairness = Vec::new();
    if runs('j') {
        for (clients, tasks, fair) in [(1, 8, false), (4, 2, false), (4, 2, true)] {
            progress(&format!(
                "(j) fairness: {clients} client(s) x {tasks} tasks on one key{}, {:?}",
                if fair { ", fair option" } else { "" },
                plan.fairness
            ));
            let key = format!(
                "bench-fair-{clients}x{tasks}{}",
                if fair { "-fair" } else { "" }
            );
            fairness.push(runtime.block_on(fairness::run(
                &cluster.urls(),
                clients,
                tasks,
                fair,
                plan.fairness,
                &key,
            ))?);
        }
    }
    let mut semaphores = Vec::new();
    if runs('s') {
        for permits in semaphore::KINDS {
            for tasks in semaphore::CONTENDERS {
                progress(&format!(
                    "(s) {} with {tasks} contender(s), {:?}",
                    permits.map_or("lock".to_owned(), |k| format!("semaphore of {k}")),
                    plan.semaphore
                ));
                let name = format!(
                    "bench-sem-{}-{tasks}",
                    permits.map_or("lock".to_owned(), |k| k.to_string())
                );
                semaphores.push(runtime.block_on(semaphore::run(
                    &cluster.urls(),
                    permits,
                    tasks,
                    plan.semaphore,
                    &name,
                ))?);
            }
        }
    }
    // Last: it kills and restarts masters.
    let mut faults = faults::Faults::default();
    if runs('k') && faults::states(nodes).is_empty() {
        progress("(k) skipped: a single node cannot lose any");
    } else if runs('k') {
        progress(&format!(
            "(k) {} tasks on distinct keys under faults, {:?} per phase, {:?} paused (TTL {:?})",
            plan.tasks,
            plan.faults.phase,
            plan.faults.paused(),
            plan.faults.ttl
        ));
        faults = faults::run(
            &runtime,
            &cluster,
            common,
            node_timeout,
            &all,
            plan.tasks,
            plan.faults,
        )?;
    }
    drop(contenders);
    runtime.shutdown_timeout(Duration::from_secs(1));
    drop(cluster);

    let results = Results {
        single,
        throughput,
        contention,
        paused,
        commands,
        faults,
    };
    let info = RunInfo {
        date: today(),
        machine: machine(),
        server: server_version(),
        command: bench_command(),
        mode: if args.quick { "quick" } else { "full" },
        nodes,
        ttl_ms: args.ttl.as_millis(),
        node_timeout_ms: node_timeout.as_millis(),
        retry_jitter_ms: args.retry_jitter.as_millis(),
        single_cycles: plan.single_cycles,
        tasks: plan.tasks,
        contention_tasks: plan.contention_tasks,
        contention_holds: plan.contention_holds,
        elapsed_s: started.elapsed().as_secs_f64(),
        load: (load_at_start, load_average()),
    };
    let out = out_dir(args.out.as_deref(), args.quick)?;
    // Named after the server, so that a Redis and a Valkey run sit side by side.
    let stem = format!(
        "{}-nodes-{}",
        redlock_tests::server().name().to_lowercase(),
        nodes
    );
    let chart_name = format!("{stem}.svg");
    let chart = chart::svg(&results, nodes)?;
    let chart_path = out.join(&chart_name);
    std::fs::write(&chart_path, chart).map_err(|err| format!("{}: {err}", chart_path.display()))?;
    let summary = Summary::of(&results);
    let report_name = format!("{stem}.md");
    // Before the file is overwritten, where the run writes to benches/results.
    let comparison = compare::against_committed(&report_name, &summary.line(), args.quick);
    let document = report::document(&results, &info, Some(&chart_name), &comparison);
    let report_path = out.join(&report_name);
    std::fs::write(&report_path, &document)
        .map_err(|err| format!("{}: {err}", report_path.display()))?;

    println!("{}", report::tables(&results, &info));
    if !fairness.is_empty() {
        println!(
            "(j) fairness: tasks on one key, each holding it {} ms (fair cycle: tasks x hold)\n{}",
            fairness::HOLD.as_millis(),
            fairness::HEADER
        );
        for shape in &fairness {
            println!("{}", shape.line());
        }
    }
    if !semaphores.is_empty() {
        println!(
            "(s) semaphore: tasks of one client on one name, each holding a permit (or the lock) {} ms\n{}",
            semaphore::HOLD.as_millis(),
            semaphore::HEADER
        );
        for shape in &semaphores {
            println!("{}", shape.line());
        }
    }
    for (target, figure, met) in summary.targets() {
        let met = match met {
            Some(true) => "met",
            Some(false) => "MISSED",
            None => "n/a",
        };
        println!("target {target}: {figure} ({met})");
    }
    println!(
        "wrote {} and {} in {:.0} s",
        report_path.display(),
        chart_path.display(),
        info.elapsed_s
    );
    println!("{comparison}");
    Ok(summary.line())
}

fn command_output(program: &str, args: &[&str]) -> Option<String> {
    let output = std::process::Command::new(program)
        .args(args)
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// The 1-minute load average, or "n/a".
/// Where a run writes its tables and charts, created: `--out`, else
/// `target/bench-quick` for a quick run and `benches/results` for a full one.
pub(crate) fn out_dir(out: Option<&std::path::Path>, quick: bool) -> Result<PathBuf, String> {
    let out = out.map_or_else(
        || {
            PathBuf::from(if quick {
                "target/bench-quick"
            } else {
                "benches/results"
            })
        },
        std::path::Path::to_path_buf,
    );
    std::fs::create_dir_all(&out).map_err(|err| format!("{}: {err}", out.display()))?;
    Ok(out)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| text.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "n/a".to_owned())
}

/// `Redis 7.0.15` or `Valkey 9.1.2`: the servers of this run.
fn server_version() -> String {
    let server = redlock_tests::server();
    format!("{} {}", server.name(), server.version())
}

/// Today's date (UTC), for a report's header.
fn today() -> String {
    command_output("date", &["-u", "+%Y-%m-%d"]).unwrap_or_else(|| "unknown".into())
}

/// The command that made this run, for a report's header: `make`'s
/// (`BENCH_COMMAND`), or the program's own arguments.
fn bench_command() -> String {
    std::env::var("BENCH_COMMAND").unwrap_or_else(|_| {
        let args: Vec<String> = std::env::args().skip(1).collect();
        format!("redlock-bench {}", args.join(" "))
    })
}

fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|line| line.strip_prefix("model name"))
                .map(|rest| rest.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|k| k.trim().to_owned())
        .unwrap_or_default();
    let debian = std::fs::read_to_string("/etc/debian_version")
        .map(|v| format!(", Debian {}", v.trim()))
        .unwrap_or_default();
    format!("{cores} cores ({cpu}), Linux {kernel}{debian}")
}
