//! The main job, for a newcomer: five independent Redis masters on loopback,
//! four workers taking turns at one lock through the public API, while the demo
//! kills one master, pauses another, then brings both back.
//!
//! Every grant is one line: who holds the lock, its fencing token, how long
//! the worker waited and how long the winning round took. Every failure is
//! one plain line. At the end: a table by phase and a check that no two
//! holders overlapped. The table gives each phase's worst wait against the
//! fair cycle, how late a 10 ms heartbeat on the client's runtime ran at
//! worst and the longest one of its workers was held in one stretch: a
//! runtime blocked by a paused master (issue 51) shows whole there.
//! The paused phase lasts at least three TTLs, so that what happens one TTL
//! after a master stops answering happens inside it.
//!
//! Run it with `make demo` (installs redis-server when missing), or
//! `cargo run --release -p redlock-tests --example demo`. `DEMO_SECONDS`
//! changes the length (default 20); `REDLOCK_SERVER_BIN` runs the masters on
//! another server binary, such as `valkey-server`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redlock_tests::RedisCluster;
use redlock_tests::heartbeat::{Heartbeat, Stalls};
use redlock_tokio::{AcquireError, Error, Redlock, Wait};

const WORKERS: usize = 4;
const RESOURCE: &str = "demo:nightly-report";
/// How often the probe takes an uncontended lock to measure latency.
const PROBE_EVERY: Duration = Duration::from_millis(50);

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    AllUp,
    OneKilled,
    OneKilledOnePaused,
    BothBack,
}

impl Phase {
    fn describe(self) -> &'static str {
        match self {
            Phase::AllUp => "5 of 5 masters up",
            Phase::OneKilled => "master 1 killed: 4 of 5 up",
            Phase::OneKilledOnePaused => "master 2 paused too: 3 of 5 answer",
            Phase::BothBack => "both back: 5 of 5 up",
        }
    }
}

/// One critical section, on the demo's monotonic clock.
#[derive(Clone, Copy, Debug)]
struct Hold {
    worker: usize,
    start: Instant,
    end: Instant,
}

#[derive(Default)]
struct Stats {
    granted: usize,
    handovers: usize,
    failures: usize,
    /// From asking for the lock to holding it, in µs.
    wait_us: Vec<u64>,
    /// Uncontended acquires (the probe's), in µs.
    probe_us: Vec<u64>,
    /// How late the heartbeat ran at worst, and the longest a worker was held.
    stalls: Stalls,
}

struct Shared {
    phase: Mutex<Phase>,
    started: Instant,
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

    /// `[  6.3 s]`: time since the demo started.
    fn at(&self) -> String {
        format!("[{:>5.1} s]", self.started.elapsed().as_secs_f64())
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
    format!("{:.1} ms", us as f64 / 1000.0)
}

/// How long a worker works while holding the lock.
fn work(worker: usize) -> Duration {
    Duration::from_millis(200 + 60 * worker as u64)
}

/// A failure in a few words; the full error (every master's vote) is in
/// `Display` and the logs.
fn plain(error: &Error, masters: usize) -> String {
    match error.as_acquire() {
        Some(AcquireError::Held { .. }) => "held by another worker".to_owned(),
        Some(AcquireError::NoQuorum { votes, .. }) => format!(
            "no quorum: {} of {masters} masters failed or timed out",
            votes.failed()
        ),
        Some(AcquireError::ValidityExhausted { .. }) => {
            "a quorum came too late to leave any validity".to_owned()
        }
        Some(AcquireError::DeadlineExceeded { .. }) => "gave up at its deadline".to_owned(),
        _ => error.to_string(),
    }
}

#[tokio::main]
async fn main() {
    let ttl = Duration::from_secs(2);
    // The paused phase lasts at least three TTLs, the others share the rest.
    let paused_for = |total: Duration| (total / 4).max(ttl * 3);
    let seconds: u64 = std::env::var("DEMO_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20)
        .max(paused_for(Duration::ZERO).as_secs() + 4);
    let total = Duration::from_secs(seconds);

    println!(
        "Starting 5 independent masters on loopback: {}",
        redlock_tests::server()
    );
    let cluster = RedisCluster::start(5);
    for (i, node) in cluster.nodes().iter().enumerate() {
        println!("  master {}: {}", i + 1, node.url());
    }
    // Workers wait as long as it takes (up to 10 s): taking turns is not a failure.
    let redlock = Redlock::builder(cluster.urls())
        .ttl(ttl)
        .wait(Wait::AtMost(Duration::from_secs(10)))
        .build()
        .await
        .expect("the demo's own masters accept connections");
    let masters = redlock.settings().node_count();
    println!(
        "Client ready: a lock needs {} of {masters} masters; TTL {ttl:?}; a master gets {:?} to answer.",
        redlock.settings().quorum(),
        redlock.settings().node_timeout(),
    );
    println!(
        "{WORKERS} workers take turns at \"{RESOURCE}\" for {seconds} s, each holding it 0.2-0.4 s; \
         a probe times an uncontended lock every {} ms.\n",
        PROBE_EVERY.as_millis()
    );

    let shared = Arc::new(Shared {
        phase: Mutex::new(Phase::AllUp),
        started: Instant::now(),
        stats: Mutex::new(BTreeMap::new()),
        holds: Mutex::new(Vec::new()),
    });
    let stop_at = shared.started + total;
    // On the client's runtime, beside the workers: a runtime blocked by one
    // of them stops it too.
    let heartbeat = Heartbeat::start(Heartbeat::EVERY);
    let last_holder = Arc::new(Mutex::new(None::<usize>));

    let mut tasks = Vec::new();
    for worker in 0..WORKERS {
        let redlock = redlock.clone();
        let shared = Arc::clone(&shared);
        let last_holder = Arc::clone(&last_holder);
        tasks.push(tokio::spawn(async move {
            let name = worker + 1;
            while Instant::now() < stop_at {
                let asked = Instant::now();
                // `lock` waits (retry delay or a release notice, whichever comes
                // first); the fencing token shows the order of holders.
                match redlock.lock(RESOURCE).fencing().await {
                    Ok(guard) => {
                        let start = Instant::now();
                        let waited = start - asked;
                        let round = start - guard.acquired_at();
                        let previous = last_holder.lock().unwrap().replace(name);
                        println!(
                            "{} worker {name} holds the lock: token {}, waited {}, round {}",
                            shared.at(),
                            guard.fencing_token().unwrap_or_default(),
                            ms(waited.as_micros() as u64),
                            ms(round.as_micros() as u64),
                        );
                        shared.with_stats(|s| {
                            s.granted += 1;
                            s.handovers += usize::from(previous.is_some_and(|p| p != name));
                            s.wait_us.push(waited.as_micros() as u64);
                        });
                        // The work, stopped short if validity runs out.
                        let work = work(worker);
                        tokio::time::sleep(work.min(guard.validity())).await;
                        let end = Instant::now().min(guard.valid_until());
                        shared.holds.lock().unwrap().push(Hold {
                            worker: name,
                            start,
                            end,
                        });
                        let _report = guard.release().await;
                        // Other work before asking again, so that the lock
                        // goes to a waiter rather than straight back.
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Err(error) => {
                        shared.with_stats(|s| s.failures += 1);
                        println!(
                            "{} worker {name} did not get the lock: {}",
                            shared.at(),
                            plain(&error, masters)
                        );
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        }));
    }

    // The probe: one uncontended acquire + release on a fresh key.
    {
        let redlock = redlock.clone();
        let shared = Arc::clone(&shared);
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < stop_at {
                n += 1;
                let t0 = Instant::now();
                match redlock.lock(format!("demo:probe:{n}")).wait(Wait::No).await {
                    Ok(guard) => {
                        let us = t0.elapsed().as_micros() as u64;
                        shared.with_stats(|s| s.probe_us.push(us));
                        let _report = guard.release().await;
                    }
                    Err(error) => {
                        shared.with_stats(|s| s.failures += 1);
                        println!(
                            "{} probe did not get its lock: {}",
                            shared.at(),
                            plain(&error, masters)
                        );
                    }
                }
                tokio::time::sleep(PROBE_EVERY).await;
            }
        }));
    }

    // The fault schedule: the paused phase lasts at least three TTLs.
    let paused = paused_for(total);
    let rest = total.saturating_sub(paused);
    let killed_at = rest * 2 / 5;
    let paused_at = killed_at + rest * 3 / 10;
    let schedule = [
        (killed_at, Phase::OneKilled),
        (paused_at, Phase::OneKilledOnePaused),
        (paused_at + paused, Phase::BothBack),
    ];
    for (when, phase) in schedule {
        tokio::time::sleep_until((shared.started + when).into()).await;
        let what = match phase {
            Phase::OneKilled => {
                cluster.node(0).kill();
                "SIGKILL master 1: its requests fail at once, 4 masters still answer"
            }
            Phase::OneKilledOnePaused => {
                cluster.node(1).pause();
                "SIGSTOP master 2: it takes requests but never answers; acquires decide without it"
            }
            _ => {
                cluster.node(1).resume();
                cluster.node(0).restart();
                "SIGCONT master 2, restart master 1 (empty, but down longer than the TTL: safe)"
            }
        };
        shared.with_stats(|s| s.stalls = heartbeat.take());
        summarise(&shared, shared.phase());
        *shared.phase.lock().unwrap() = phase;
        println!("{} ---- {what}", shared.at());
    }
    for task in tasks {
        task.await.expect("demo task");
    }
    shared.with_stats(|s| s.stalls = heartbeat.take());
    drop(heartbeat);
    summarise(&shared, shared.phase());

    // Served in turn, a worker waits at most for every other worker's work
    // once: the fair cycle is one turn of everyone.
    let cycle_us: u64 = (0..WORKERS)
        .map(|worker| work(worker).as_micros() as u64)
        .sum();
    println!(
        "\nResults by phase (fair cycle, every worker's work once: {}):",
        ms(cycle_us)
    );
    println!(
        "  {:<36} {:>7} {:>9} {:>8}  {:>9} {:>9} {:>11} {:>14} {:>11}  uncontended lock p50 / p99 / max",
        "phase",
        "granted",
        "handovers",
        "failures",
        "wait p50",
        "wait max",
        "max / cycle",
        "heartbeat late",
        "worker held"
    );
    let stats = std::mem::take(&mut *shared.stats.lock().unwrap());
    for (phase, s) in stats.iter() {
        let mut probe = s.probe_us.clone();
        probe.sort_unstable();
        let mut wait = s.wait_us.clone();
        wait.sort_unstable();
        println!(
            "  {:<36} {:>7} {:>9} {:>8}  {:>9} {:>9} {:>11.2} {:>14} {:>11}  {} / {} / {}",
            phase.describe(),
            s.granted,
            s.handovers,
            s.failures,
            ms(percentile(&wait, 0.5)),
            ms(wait.last().copied().unwrap_or(0)),
            wait.last().copied().unwrap_or(0) as f64 / cycle_us as f64,
            ms(s.stalls.runtime.as_micros() as u64),
            ms(s.stalls.worker.as_micros() as u64),
            ms(percentile(&probe, 0.5)),
            ms(percentile(&probe, 0.99)),
            ms(probe.last().copied().unwrap_or(0)),
        );
    }

    let overlaps = overlaps(&shared.holds.lock().unwrap());
    let holds = shared.holds.lock().unwrap().len();
    let granted_degraded = stats
        .get(&Phase::OneKilledOnePaused)
        .map_or(0, |s| s.granted);
    println!(
        "Heartbeat late: how late a {} ms timer on the client's runtime ran at worst in the phase; worker held: the longest one of its worker threads stayed in one stretch of polls. A few ms on a busy machine; the whole stall where a call blocked a worker.",
        Heartbeat::EVERY.as_millis()
    );
    println!(
        "\nWith only 3 of 5 masters answering, {granted_degraded} locks were granted: one dead and one frozen master stop nothing."
    );
    println!(
        "Workers of one client are served first come, first served: a release wakes the worker that waited longest, and a worker that asks again queues behind the others (max / cycle about 1 or below). Between clients, the first attempt to reach a quorum wins."
    );
    if overlaps == 0 {
        println!("Safety: {holds} critical sections, no two holders ever overlapped.");
    } else {
        println!("Safety: {overlaps} overlapping critical sections!");
    }
    redlock.shutdown().await;
    drop(cluster);
    println!("Stopped the 5 masters.");
    if overlaps > 0 || granted_degraded == 0 {
        std::process::exit(1);
    }
}

/// One line at the end of a phase: what it did to grants and latency.
fn summarise(shared: &Shared, phase: Phase) {
    let stats = shared.stats.lock().unwrap();
    let Some(s) = stats.get(&phase) else { return };
    let mut probe = s.probe_us.clone();
    probe.sort_unstable();
    let mut wait = s.wait_us.clone();
    wait.sort_unstable();
    println!(
        "{} ---- {}: granted {}, hand-overs {}, failed {}; worst wait {}; an uncontended lock took {} (p50); the heartbeat ran up to {} late, a worker was held up to {}",
        shared.at(),
        phase.describe(),
        s.granted,
        s.handovers,
        s.failures,
        ms(wait.last().copied().unwrap_or(0)),
        ms(percentile(&probe, 0.5)),
        ms(s.stalls.runtime.as_micros() as u64),
        ms(s.stalls.worker.as_micros() as u64),
    );
}

/// Pairs of critical sections that overlapped in time, printed as found.
fn overlaps(holds: &[Hold]) -> usize {
    let mut holds = holds.to_vec();
    holds.sort_by_key(|h| h.start);
    let mut overlaps = 0;
    let mut latest: Option<Hold> = None;
    for hold in holds {
        match latest {
            Some(prev) if hold.start < prev.end => {
                overlaps += 1;
                println!(
                    "  OVERLAP: worker {} and worker {}",
                    prev.worker, hold.worker
                );
                if hold.end > prev.end {
                    latest = Some(hold);
                }
            }
            _ => latest = Some(hold),
        }
    }
    overlaps
}
