//! A hung master costs no other task anything: a master that accepts
//! connections and answers nothing (paused with SIGSTOP) for several TTLs,
//! under load from a plain lock, a fair lock, a semaphore and an election
//! together on one client.
//!
//! What is asserted cannot be a loaded machine's fault: no blocking call
//! runs on a worker of the client's runtime (the test build aborts the
//! process at one, `redlock-tokio`'s `node::blocking`), every waiter is
//! served, and once `shutdown()` returns no key of ours is on any master.
//! How late a heartbeat on the client's runtime ran, the longest a worker
//! was held in one poll (`redlock_tests::heartbeat`), and the largest gap
//! between one holder's release and the next grant are printed figures: a
//! busy machine stretches them by milliseconds, a blocked worker by seconds.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redlock_tests::RedisCluster;
use redlock_tests::heartbeat::Heartbeat;
use redlock_tokio::{Redlock, Wait};
use support::builder;

/// The TTL of every lock here: the paused phase lasts several of them.
const TTL: Duration = Duration::from_millis(400);
/// The paused phase: at least three TTLs, so that whatever the client owes
/// the paused master outlives its deadline and is given up meanwhile.
const PAUSED: Duration = Duration::from_millis(2_000);
/// Tasks per lock kind.
const TASKS: usize = 3;

/// Takes turns at the lock `request` makes until `stop`: holds it a
/// moment, releases, and records the largest gap between a release of the
/// lock's previous holder and the next grant (`last_release`, shared by
/// the tasks of one lock, in µs since `epoch`). Returns how many times it
/// held the lock.
async fn take_turns<F, Fut>(
    stop: Arc<AtomicBool>,
    epoch: Instant,
    last_release: Arc<AtomicU64>,
    worst_gap: Arc<AtomicU64>,
    lock: F,
) -> u64
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<redlock_tokio::LockGuard, redlock_tokio::Error>>,
{
    let mut held = 0;
    while !stop.load(Ordering::Relaxed) {
        let guard = match lock().await {
            Ok(guard) => guard,
            // A wait that ran out while the lock was busy: ask again.
            Err(error) if error.is_held_by_other() || error.is_unavailable() => continue,
            Err(error) => panic!("a lock request failed: {error}"),
        };
        let granted = epoch.elapsed().as_micros() as u64;
        let released = last_release.load(Ordering::Relaxed);
        if released > 0 {
            worst_gap.fetch_max(granted.saturating_sub(released), Ordering::Relaxed);
        }
        held += 1;
        tokio::time::sleep(Duration::from_millis(2)).await;
        last_release.store(epoch.elapsed().as_micros() as u64, Ordering::Relaxed);
        guard.release().await;
    }
    held
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_master_stalls_no_task_of_the_client() {
    let cluster = RedisCluster::start(3);
    let redlock: Redlock = builder(&cluster)
        .ttl(TTL)
        .connect_timeout(Duration::from_millis(500))
        .build()
        .await
        .expect("client builds");
    let stop = Arc::new(AtomicBool::new(false));
    let epoch = Instant::now();
    let heartbeat = Heartbeat::start(Heartbeat::EVERY);

    let mut workers = Vec::new();
    let mut gaps = Vec::new();
    for (kind, resource) in [
        ("plain", "hung-plain"),
        ("fair", "hung-fair"),
        ("semaphore", "hung-sem"),
    ] {
        let last_release = Arc::new(AtomicU64::new(0));
        let worst_gap = Arc::new(AtomicU64::new(0));
        gaps.push((kind, Arc::clone(&worst_gap)));
        for _ in 0..TASKS {
            let (redlock, stop) = (redlock.clone(), Arc::clone(&stop));
            let (last_release, worst_gap) = (Arc::clone(&last_release), Arc::clone(&worst_gap));
            workers.push((
                kind,
                tokio::spawn(async move {
                    take_turns(stop, epoch, last_release, worst_gap, || {
                        let request = redlock.lock(resource).wait(Wait::AtMost(TTL * 4));
                        async move {
                            match kind {
                                "fair" => request.fair().await,
                                // One permit: its waiters take turns like a lock's.
                                "semaphore" => request.permits(1).await,
                                _ => request.await,
                            }
                        }
                    })
                    .await
                }),
            ));
        }
    }
    // Two candidates of one election; the leader resigns now and then so
    // that terms change hands while the master is paused.
    let terms = Arc::new(AtomicU64::new(0));
    let mut candidates = Vec::new();
    for _ in 0..2 {
        let (election, stop, terms) = (
            redlock
                .election("hung-election")
                .wait(Wait::AtMost(TTL * 4)),
            Arc::clone(&stop),
            Arc::clone(&terms),
        );
        candidates.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                match election.campaign().await {
                    Ok(mut leadership) => {
                        terms.fetch_max(leadership.term(), Ordering::Relaxed);
                        tokio::time::sleep(TTL / 2).await;
                        leadership.resign().await;
                    }
                    Err(error) if error.is_held_by_other() || error.is_unavailable() => {}
                    Err(error) => panic!("a campaign failed: {error}"),
                }
            }
        }));
    }

    tokio::time::sleep(TTL).await;
    cluster.node(2).pause();
    tokio::time::sleep(PAUSED).await;
    cluster.node(2).resume();
    tokio::time::sleep(TTL).await;
    stop.store(true, Ordering::Relaxed);

    for (kind, worker) in workers {
        let held = worker.await.expect("a worker ran to its end");
        assert!(held > 0, "a {kind} waiter was never served");
    }
    for candidate in candidates {
        candidate.await.expect("a candidate ran to its end");
    }
    assert!(terms.load(Ordering::Relaxed) > 0, "nobody was elected");
    let stalls = heartbeat.take();
    redlock.shutdown().await;

    let gaps: Vec<String> = gaps
        .iter()
        .map(|(kind, gap)| {
            format!(
                "{kind}_hand_over_gap_ms={:.1}",
                gap.load(Ordering::Relaxed) as f64 / 1e3
            )
        })
        .collect();
    println!(
        "hung master ({}, one of 3 paused {} ms, TTL {} ms): runtime_stall_ms={:.1} \
         worker_stall_ms={:.1} {} highest_term={}",
        redlock_tests::server(),
        PAUSED.as_millis(),
        TTL.as_millis(),
        stalls.runtime.as_secs_f64() * 1e3,
        stalls.worker.as_secs_f64() * 1e3,
        gaps.join(" "),
        terms.load(Ordering::Relaxed),
    );
    // Kept on purpose: fencing counters and leader records; a waiters mark
    // lives on its own TTL, about one retry, after its waiter's end. A
    // semaphore's permits key goes with the release of its last slot held
    // (`semaphore.rs`: `after_every_permit_is_released_nothing_is_left`).
    let kept = [&b"\0fencing"[..], b"\0leader", b"\0waiters", b"\0others"];
    for node in cluster.nodes() {
        let left: Vec<Vec<u8>> = node
            .keys("*")
            .into_iter()
            .filter(|key| !kept.iter().any(|suffix| key.ends_with(suffix)))
            .collect();
        assert!(
            left.is_empty(),
            "port {}: keys left after shutdown: {:?}",
            node.port(),
            left.iter()
                .map(|key| String::from_utf8_lossy(key))
                .collect::<Vec<_>>()
        );
    }
}
