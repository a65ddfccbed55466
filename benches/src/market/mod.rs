//! The marketplace (`redlock-bench --market`, `make bench-market`): a real
//! workload on shared data, the way "Redis in Action" (chapter 6) measured
//! Redis's own optimistic transactions against locks.
//!
//! Sellers list items from their inventories into a market sorted set;
//! buyers pick a random item on the market, read its price and their funds,
//! and move the money, the item and the sale in one write. The data lives
//! on one server; the locks on 1, 3 or 5 other masters (this library), or
//! on the data server itself (the classic hand-written `SET NX PX` lock).
//! Each cell of the table is one shape of sellers/buyers (1/1, 5/1, 5/5,
//! 16/16) trading under one strategy ([`strategies::Strategy`]) for
//! `--seconds` (5), on a fresh market; its figures are scaled to 60 s.
//!
//! Every cell is then audited ([`redlock_tests::market::audit`]): money
//! conserved, no item sold twice, every item in exactly one place, no lock
//! key left on any server. A safe strategy that breaks one fails the run
//! (exit code 1, after the table); no lock at all is the unsafe ceiling,
//! printed and not held to them. `--planted-race` takes the lock off the
//! purchases of the lock strategies: the audit must then fail.
//!
//! ```text
//! redlock-bench --market [--quick] [--seconds N] [--shapes 1/1,5/1,5/5,16/16]
//!               [--strategies watch,none,single-coarse,single-fine,coarse-3,fine-3,raw-fine-3,fenced-3,...]
//!               [--planted-race] [--out DIR]
//! ```
//!
//! The last line is
//!
//! ```text
//! market summary: fine_ops_per_60s=N fine_buy_p99_ms=R watch_retries_per_buy=R coarse_ops_per_60s=N fine_vs_single_server=R conserved=yes double_sales=0 keys_left=0
//! ```
//!
//! where the `fine_` and `coarse_` figures are Redlock over 3 masters and,
//! like `watch_retries_per_buy`, at the heaviest of the classic's shapes
//! (5/5); `fine_vs_single_server` is the smallest, over the shapes, of the
//! item locks' operations over 3 masters against the hand-written lock's on
//! the data server: in each shape, the median of the ratios of the rounds,
//! where the strategies ran seconds apart ([`cell::Cell::versus`]).

mod cell;
mod report;
mod strategies;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use redlock_tests::{RedisCluster, RedisNode};
use redlock_tokio::Redlock;

use self::cell::{Cell, Env};
use self::strategies::Strategy;

/// The largest number of lock masters a strategy uses.
const LOCK_MASTERS: usize = 5;

/// The shapes of the classic, then a heavier one.
const SHAPES: [(usize, usize); 4] = [(1, 1), (5, 1), (5, 5), (16, 16)];

/// What a market run does.
pub(crate) struct MarketArgs {
    pub(crate) quick: bool,
    pub(crate) seconds: Option<f64>,
    pub(crate) shapes: Vec<(usize, usize)>,
    pub(crate) strategies: Vec<Strategy>,
    pub(crate) planted_race: bool,
    pub(crate) out: Option<PathBuf>,
}

pub(crate) const USAGE: &str = "usage: redlock-bench --market [--quick] [--seconds N] [--shapes 1/1,5/1,5/5,16/16] [--strategies watch,none,single-coarse,single-fine,coarse-N,fine-N,raw-fine-N,fenced-N] [--planted-race] [--out DIR]";

/// Reads the arguments after `--market`.
pub(crate) fn parse_args(args: impl Iterator<Item = String>) -> Result<MarketArgs, String> {
    let mut parsed = MarketArgs {
        quick: false,
        seconds: None,
        shapes: SHAPES.to_vec(),
        strategies: Strategy::DEFAULT.to_vec(),
        planted_race: false,
        out: None,
    };
    let mut args = args.peekable();
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--market" => {}
            "--quick" => parsed.quick = true,
            "--planted-race" => parsed.planted_race = true,
            "--seconds" => {
                let seconds: f64 = value("--seconds")?
                    .parse()
                    .map_err(|error| format!("--seconds: {error}"))?;
                if !(0.1..=600.0).contains(&seconds) {
                    return Err("--seconds: between 0.1 and 600".to_owned());
                }
                parsed.seconds = Some(seconds);
            }
            "--shapes" => {
                parsed.shapes = Vec::new();
                for shape in value("--shapes")?.split(',') {
                    let parse = |n: &str| {
                        n.trim()
                            .parse::<usize>()
                            .ok()
                            .filter(|n| (1..=64).contains(n))
                    };
                    match shape.split_once('/').map(|(s, b)| (parse(s), parse(b))) {
                        Some((Some(sellers), Some(buyers))) => {
                            parsed.shapes.push((sellers, buyers))
                        }
                        _ => {
                            return Err(format!(
                                "--shapes: {shape:?} is not sellers/buyers (1 to 64 each)"
                            ));
                        }
                    }
                }
            }
            "--strategies" => {
                parsed.strategies = Vec::new();
                for name in value("--strategies")?.split(',') {
                    let strategy = Strategy::parse(name.trim())
                        .ok_or_else(|| format!("--strategies: unknown {name:?}\n{USAGE}"))?;
                    if !parsed.strategies.contains(&strategy) {
                        parsed.strategies.push(strategy);
                    }
                }
            }
            "--out" => parsed.out = Some(PathBuf::from(value("--out")?)),
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    Ok(parsed)
}

fn progress(message: &str) {
    eprintln!("redlock-bench: {message}");
}

/// Runs the market; the summary line, or why the run failed (a check broke
/// on a safe strategy, or a server or client failed).
pub(crate) fn run(args: &MarketArgs) -> Result<String, String> {
    let length =
        Duration::from_secs_f64(args.seconds.unwrap_or(if args.quick { 1.0 } else { 5.0 }));
    let started = Instant::now();
    let load_at_start = crate::load_average();
    progress(&format!(
        "starting the data server and {LOCK_MASTERS} lock masters: {}",
        redlock_tests::server()
    ));
    let data = RedisNode::start();
    let masters = RedisCluster::start(LOCK_MASTERS);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|error| format!("tokio runtime: {error}"))?;
    let mut env = runtime.block_on(connect(&data, &masters, &args.strategies))?;

    // Each cell is run in rounds, the strategies taking turns in an order
    // that rotates: a machine whose load drifts weighs on all of them alike.
    let rounds = rounds(length);
    let cells_total = args.shapes.len() * args.strategies.len();
    let mut cells: Vec<Cell> = Vec::with_capacity(cells_total);
    for &shape in &args.shapes {
        progress(&format!(
            "{}/{}: {} strategies, {rounds} rounds of {:?} each",
            shape.0,
            shape.1,
            args.strategies.len(),
            length / rounds as u32
        ));
        let mut merged: Vec<Option<Cell>> = vec![None; args.strategies.len()];
        for round in 0..rounds {
            let mut order: Vec<usize> = (0..args.strategies.len()).collect();
            order.rotate_left(round % args.strategies.len());
            for index in order {
                let strategy = args.strategies[index];
                let cell = runtime.block_on(cell::run(
                    &mut env,
                    shape,
                    strategy,
                    length / rounds as u32,
                    args.planted_race,
                ))?;
                match &mut merged[index] {
                    Some(total) => total.merge(&cell),
                    slot => *slot = Some(cell),
                }
            }
        }
        for cell in merged.into_iter().flatten() {
            if cell.strategy.is_safe() && !cell.passed() {
                progress(&format!(
                    "CHECK FAILED in {}/{} {}: {}, lock keys left {}",
                    shape.0,
                    shape.1,
                    cell.strategy.name(),
                    cell.audit,
                    cell.keys_left
                ));
            }
            cells.push(cell);
        }
    }
    for (_, redlock) in &env.redlocks {
        runtime.block_on(redlock.shutdown());
    }
    drop(env);
    runtime.shutdown_timeout(Duration::from_secs(1));
    drop(masters);
    drop(data);

    let info = report::Info {
        date: crate::command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"])
            .unwrap_or_else(|| "unknown".into()),
        machine: crate::machine(),
        server: crate::server_version(),
        command: crate::bench_command(),
        seconds: length.as_secs_f64(),
        planted_race: args.planted_race,
        elapsed_s: started.elapsed().as_secs_f64(),
        load: (load_at_start, crate::load_average()),
    };
    let tables = [
        report::tables(&cells, &info),
        report::fault_tolerance(&cells),
        report::checks_line(&cells),
    ]
    .into_iter()
    .filter(|part| !part.is_empty())
    .collect::<Vec<_>>()
    .join("\n\n");
    println!("{tables}");
    let out = crate::out_dir(args.out.as_deref(), args.quick)?;
    let stem = format!("{}-market", redlock_tests::server().name().to_lowercase());
    let chart_name = format!("{stem}.svg");
    let chart_path = out.join(&chart_name);
    std::fs::write(&chart_path, report::chart(&cells)?)
        .map_err(|error| format!("{}: {error}", chart_path.display()))?;
    let summary = report::Summary::of(&cells);
    let name = format!("{stem}.md");
    // Before the file is overwritten, where the run writes to benches/results.
    let comparison = crate::compare::against_committed(&name, &summary.line(), args.quick);
    let report_path = out.join(&name);
    std::fs::write(
        &report_path,
        report::document(&tables, &info, &chart_name, &comparison, &summary.line()),
    )
    .map_err(|error| format!("{}: {error}", report_path.display()))?;
    println!(
        "wrote {} and {} in {:.0} s",
        report_path.display(),
        chart_path.display(),
        info.elapsed_s
    );
    println!("{comparison}");
    let broken: Vec<String> = cells
        .iter()
        .filter(|cell| cell.strategy.is_safe() && !cell.passed())
        .map(|cell| format!("{}/{} {}", cell.shape.0, cell.shape.1, cell.strategy.name()))
        .collect();
    if broken.is_empty() {
        Ok(summary.line())
    } else {
        println!("{}", summary.line());
        Err(format!(
            "CHECKS FAILED: the market was left inconsistent by {} (see the checks column)",
            broken.join(", ")
        ))
    }
}

/// How many rounds a cell of `length` is cut into: one per second, at
/// most 5.
fn rounds(length: Duration) -> usize {
    (length.as_secs_f64().round() as usize).clamp(1, 5)
}

/// Connects the audit's connections and this library's clients.
async fn connect(
    data: &RedisNode,
    masters: &RedisCluster,
    strategies: &[Strategy],
) -> Result<Env, String> {
    let open = |url: String| async move {
        redis::Client::open(url.as_str())
            .map_err(|error| format!("{url}: {error}"))?
            .get_multiplexed_async_connection()
            .await
            .map_err(|error| format!("{url}: {error}"))
    };
    let mut admin = vec![open(data.url()).await?];
    for url in masters.urls() {
        admin.push(open(url).await?);
    }
    let mut redlocks = Vec::new();
    let mut wanted: Vec<usize> = strategies.iter().filter_map(|s| s.masters()).collect();
    wanted.sort_unstable();
    wanted.dedup();
    for n in wanted {
        let urls = &masters.urls()[..n];
        let redlock = Redlock::builder(urls)
            .build()
            .await
            .map_err(|error| format!("redlock-tokio over {n}: {error}"))?;
        if redlock.connected_nodes() != n {
            return Err(format!(
                "redlock-tokio: only {} of {n} masters connected",
                redlock.connected_nodes()
            ));
        }
        redlocks.push((n, redlock));
    }
    let server_pids = std::iter::once(data)
        .chain(masters.nodes())
        .filter_map(RedisNode::pid)
        .collect();
    Ok(Env {
        data_url: data.url(),
        admin,
        redlocks,
        server_pids,
    })
}
