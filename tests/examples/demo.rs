//! The main job, for a newcomer: five independent Redis masters on loopback,
//! workers contending for one lock through the public API, while the demo kills
//! one master and then pauses another.
//!
//! Run it with `make demo` (installs redis-server when missing), or
//! `cargo run --release -p redlock-tests --example demo`. `DEMO_SECONDS`
//! changes the length (default 20); `REDLOCK_SERVER_BIN` runs the masters on
//! another server binary, such as `valkey-server`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redlock_tests::RedisCluster;
use redlock_tokio::Redlock;

const WORKERS: usize = 4;
const RESOURCE: &str = "demo:nightly-report";

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    AllUp,
    OneKilled,
    OneKilledOnePaused,
}

impl Phase {
    fn describe(self) -> &'static str {
        match self {
            Phase::AllUp => "5 of 5 masters up",
            Phase::OneKilled => "master 1 killed: 4 of 5 up",
            Phase::OneKilledOnePaused => "master 1 killed, master 2 paused: 3 of 5 up",
        }
    }
}

/// One critical section: when the worker held the lock (its own monotonic clock).
#[derive(Clone, Copy, Debug)]
struct Hold {
    worker: usize,
    start: Instant,
    end: Instant,
}

#[derive(Default)]
struct Stats {
    granted: usize,
    refused: usize,
    errors: usize,
    /// Latency of a single uncontended acquire (try_lock on a fresh key), in µs.
    probe_us: Vec<u64>,
    probe_failures: usize,
}

struct Shared {
    phase: Mutex<Phase>,
    stats: Mutex<BTreeMap<Phase, Stats>>,
    holds: Mutex<Vec<Hold>>,
}

impl Shared {
    fn phase(&self) -> Phase {
        *self.phase.lock().unwrap()
    }

    fn with_stats(&self, f: impl FnOnce(&mut Stats)) {
        let phase = self.phase();
        f(self.stats.lock().unwrap().entry(phase).or_default());
    }
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn ms(us: u64) -> String {
    format!("{:.2} ms", us as f64 / 1000.0)
}

#[tokio::main]
async fn main() {
    let seconds: u64 = std::env::var("DEMO_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20)
        .max(3);
    let total = Duration::from_secs(seconds);

    println!(
        "Starting 5 independent masters on loopback: {}...",
        redlock_tests::server()
    );
    let cluster = RedisCluster::start(5);
    for (i, node) in cluster.nodes().iter().enumerate() {
        println!("  master {}: {}", i + 1, node.url());
    }
    let redlock = Redlock::builder(cluster.urls())
        .ttl(Duration::from_secs(2))
        .build()
        .await
        .expect("the demo's own masters accept connections");
    println!(
        "Client ready: quorum {} of {}, TTL {:?}, per-node timeout {:?}.",
        redlock.settings().quorum(),
        redlock.settings().node_count(),
        redlock.settings().default_ttl().as_duration(),
        redlock.settings().node_timeout(),
    );
    println!(
        "{WORKERS} workers contend for \"{RESOURCE}\" for {seconds} s; a probe measures one uncontended acquire every 50 ms.\n"
    );

    let shared = Arc::new(Shared {
        phase: Mutex::new(Phase::AllUp),
        stats: Mutex::new(BTreeMap::new()),
        holds: Mutex::new(Vec::new()),
    });
    let started = Instant::now();
    let stop_at = started + total;

    let mut tasks = Vec::new();
    for worker in 0..WORKERS {
        let redlock = redlock.clone();
        let shared = Arc::clone(&shared);
        tasks.push(tokio::spawn(async move {
            while Instant::now() < stop_at {
                match redlock.lock(RESOURCE).await {
                    Ok(guard) => {
                        let start = Instant::now();
                        // The work: a few milliseconds, checking the lock is still ours.
                        tokio::time::sleep(Duration::from_millis(3 + (worker as u64 * 2))).await;
                        let end = Instant::now().min(guard.valid_until());
                        shared
                            .holds
                            .lock()
                            .unwrap()
                            .push(Hold { worker, start, end });
                        shared.with_stats(|s| s.granted += 1);
                        let _report = guard.release().await;
                    }
                    Err(error) if error.is_held_by_other() => {
                        shared.with_stats(|s| s.refused += 1);
                    }
                    Err(error) => {
                        shared.with_stats(|s| s.errors += 1);
                        eprintln!("  worker {worker}: {error}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        }));
    }

    // The probe: one uncontended acquire + release on a fresh key every 50 ms.
    {
        let redlock = redlock.clone();
        let shared = Arc::clone(&shared);
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < stop_at {
                n += 1;
                let t0 = Instant::now();
                match redlock.try_lock(format!("demo:probe:{n}")).await {
                    Ok(guard) => {
                        let us = t0.elapsed().as_micros() as u64;
                        shared.with_stats(|s| s.probe_us.push(us));
                        let _report = guard.release().await;
                    }
                    Err(error) => {
                        shared.with_stats(|s| s.probe_failures += 1);
                        eprintln!("  probe: {error}");
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }));
    }

    // The fault schedule, with a progress line every two seconds.
    let kill_at = total * 3 / 10;
    let pause_at = total * 6 / 10;
    let mut killed = false;
    let mut paused = false;
    let mut next_report = Duration::from_secs(2);
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let elapsed = started.elapsed();
        if !killed && elapsed >= kill_at {
            cluster.node(0).kill();
            killed = true;
            *shared.phase.lock().unwrap() = Phase::OneKilled;
            println!(
                "[{:>5.1} s] killed master 1 (SIGKILL)",
                elapsed.as_secs_f64()
            );
        }
        if !paused && elapsed >= pause_at {
            cluster.node(1).pause();
            paused = true;
            *shared.phase.lock().unwrap() = Phase::OneKilledOnePaused;
            println!(
                "[{:>5.1} s] paused master 2 (SIGSTOP)",
                elapsed.as_secs_f64()
            );
        }
        if elapsed >= next_report {
            next_report += Duration::from_secs(2);
            let phase = shared.phase();
            let stats = shared.stats.lock().unwrap();
            let s = stats.get(&phase);
            let mut probe: Vec<u64> = s.map(|s| s.probe_us.clone()).unwrap_or_default();
            probe.sort_unstable();
            println!(
                "[{:>5.1} s] {}: {} locks granted so far in this phase, uncontended acquire p50 {}",
                elapsed.as_secs_f64(),
                phase.describe(),
                s.map_or(0, |s| s.granted),
                ms(percentile(&probe, 0.5)),
            );
        }
        if elapsed >= total {
            break;
        }
    }
    for task in tasks {
        task.await.expect("demo task");
    }
    // Let a paused master go so that it can be stopped cleanly.
    if paused {
        cluster.node(1).resume();
    }

    println!("\nResults by phase:");
    println!(
        "  {:<46} {:>8} {:>8} {:>7}   uncontended acquire p50 / p99 / max",
        "phase", "granted", "busy", "errors"
    );
    let stats = shared.stats.lock().unwrap();
    for (phase, s) in stats.iter() {
        let mut probe = s.probe_us.clone();
        probe.sort_unstable();
        println!(
            "  {:<46} {:>8} {:>8} {:>7}   {} / {} / {}{}",
            phase.describe(),
            s.granted,
            s.refused,
            s.errors,
            ms(percentile(&probe, 0.5)),
            ms(percentile(&probe, 0.99)),
            ms(probe.last().copied().unwrap_or(0)),
            if s.probe_failures > 0 {
                format!(" ({} probe failures)", s.probe_failures)
            } else {
                String::new()
            }
        );
    }

    // The safety check: no two critical sections overlapped.
    let mut holds = shared.holds.lock().unwrap().clone();
    holds.sort_by_key(|h| h.start);
    let mut overlaps = 0;
    let mut latest: Option<Hold> = None;
    for hold in &holds {
        if let Some(prev) = latest {
            if hold.start < prev.end {
                overlaps += 1;
                println!(
                    "  OVERLAP: worker {} and worker {}",
                    prev.worker, hold.worker
                );
            }
            if hold.end > prev.end {
                latest = Some(*hold);
            }
        } else {
            latest = Some(*hold);
        }
    }
    let granted_last = stats
        .get(&Phase::OneKilledOnePaused)
        .map_or(0, |s| s.granted);
    println!(
        "\nThe lock kept working with 3 of 5 masters: {granted_last} locks granted after master 1 was killed and master 2 paused."
    );
    if overlaps == 0 {
        println!(
            "Safety: checked {} critical sections, no two holders ever overlapped.",
            holds.len()
        );
    } else {
        println!("Safety: {overlaps} overlapping critical sections!");
    }
    drop(stats);
    drop(cluster);
    println!("Stopped the 5 masters.");
    if overlaps > 0 || granted_last == 0 {
        std::process::exit(1);
    }
}
