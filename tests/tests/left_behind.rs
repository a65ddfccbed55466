//! Nothing left behind under pressure: many tasks on one client with a
//! node's connection backed up (a paused master), storms of cancelled
//! acquires, on plain masters and on cluster nodes. Once every client has
//! shut down, no key of ours is on any master.
//!
//! What keeps it so is the per-node order (`redlock-tokio`'s
//! `ARCHITECTURE` notes and `node/`): every request is in its node's
//! connection queue when the core emits it, so the release of a key never
//! runs before the acquire it undoes, and a release is never dropped unsent
//! while its connection lives.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use redlock_tests::{NodeOptions, RedisCluster, RedisNode, ShardedNode};
use redlock_tokio::{Builder, Redlock, Wait};
use support::{NODE_TIMEOUT, init_tracing};

/// Every key on `nodes`, as text, but for a waiting writer's mark that
/// expires within its hold-off (a little more than the retry interval): it
/// is meant to outlive the writer's withdrawn attempts, to hold new readers
/// off between its retries; and likewise a waiters mark (`\0waiters`),
/// which lives until its waiter's next attempt (about 0.5 s here:
/// `Settings::waiters_mark_ttl`) so that releases publish for it.
fn keys_on<'a>(nodes: impl IntoIterator<Item = &'a RedisNode>) -> Vec<String> {
    nodes
        .into_iter()
        .flat_map(|node| {
            node.keys("*").into_iter().filter(|key| {
                let mark = key.ends_with(b"\0writer-waiting") || key.ends_with(b"\0waiters");
                !(mark && (0..=HOLD_OFF_MS).contains(&node.pttl(key)))
            })
        })
        .map(|key| String::from_utf8_lossy(&key).into_owned())
        .collect()
}

/// The longest hold-off of a waiting writer, and the longest life of a
/// waiters mark, with the default retry settings.
const HOLD_OFF_MS: i64 = 1_000;

/// Waits until `keys` finds nothing, at most [`SETTLE`]: `shutdown` has
/// returned, but releases that are past their deadline on a node that was
/// paused may still be queued behind one another there (on a busy machine
/// for a while). A key left behind by a broken order stays for its whole
/// TTL of 30 s, far past it.
async fn nothing_left(keys: impl Fn() -> Vec<String>) {
    let started = Instant::now();
    loop {
        let left = keys();
        if left.is_empty() {
            println!("nothing left {:?} after the last call", started.elapsed());
            return;
        }
        assert!(
            started.elapsed() < SETTLE,
            "{} keys left {SETTLE:?} after shutdown, for example {:?}",
            left.len(),
            &left[..left.len().min(5)]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// How long the last releases may take to be answered after `shutdown`.
const SETTLE: Duration = Duration::from_secs(10);

/// 128 tasks on one client lock and release their own keys (TTL 30 s, so a
/// key left behind stays) while `pause` freezes one master for a while:
/// its connection's queue fills, which is where a release could overtake
/// the acquire it undoes. Then `resume`, shut down, and count.
async fn backpressure(builder: Builder, pause: impl FnOnce(), resume: impl FnOnce()) -> usize {
    const TASKS: usize = 128;
    const CYCLES: usize = 60;
    let redlock = builder
        .ttl(Duration::from_secs(30))
        .wait(Wait::No)
        .build()
        .await
        .expect("client builds");
    let run = |redlock: Redlock, task: usize| async move {
        let mut granted = 0;
        for cycle in 0..CYCLES {
            if let Ok(guard) = redlock.lock(format!("bp:{task}:{cycle}")).await {
                granted += 1;
                guard.release().await;
            }
        }
        granted
    };
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| tokio::spawn(run(redlock.clone(), task)))
        .collect();
    tokio::time::sleep(Duration::from_millis(50)).await;
    pause();
    tokio::time::sleep(Duration::from_millis(600)).await;
    resume();
    let mut granted = 0;
    for task in tasks {
        granted += task.await.expect("task runs");
    }
    redlock.shutdown().await;
    granted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backpressure_on_plain_masters_leaves_no_key() {
    init_tracing();
    let cluster = RedisCluster::start(5);
    let builder = Redlock::builder(cluster.urls()).node_timeout(NODE_TIMEOUT);
    let granted = backpressure(
        builder,
        || cluster.node(0).pause(),
        || cluster.node(0).resume(),
    )
    .await;
    println!("granted {granted} locks");
    nothing_left(|| keys_on(cluster.nodes())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backpressure_on_cluster_nodes_leaves_no_key() {
    init_tracing();
    let nodes = ShardedNode::start_many(3, 2);
    let urls: Vec<String> = nodes.iter().map(ShardedNode::url).collect();
    let builder = Redlock::builder(&urls).node_timeout(NODE_TIMEOUT);
    let granted = backpressure(
        builder,
        || nodes[0].shard(0).pause(),
        || nodes[0].shard(0).resume(),
    )
    .await;
    println!("granted {granted} locks");
    nothing_left(|| keys_on(nodes.iter().flat_map(ShardedNode::shards))).await;
}

/// Rounds of 100 `lock()` futures dropped at random instants (half on keys
/// of their own, half on one shared key), a master paused (`pause(i)`, then
/// `resume(i)`) in every other round; a lock that completes in time is
/// released. After the last round and `shutdown`, nothing is left.
async fn storm(builder: Builder, pause: impl Fn(usize), resume: impl Fn(usize)) {
    let redlock = builder
        .ttl(Duration::from_secs(30))
        .build()
        .await
        .expect("client builds");
    let seed: u64 = rand::random();
    println!("seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let started = Instant::now();
    for round in 0..5_usize {
        let paused = round % 2 == 1;
        if paused {
            pause(round % 3);
        }
        // Paused rounds cut later: the attempt is then surely in flight.
        let cut_max = if paused { 2_000 } else { 200 };
        let tasks: Vec<_> = (0..100_usize)
            .map(|i| {
                let redlock = redlock.clone();
                let resource = if i % 2 == 0 {
                    format!("storm:{round}:{i}")
                } else {
                    "storm:shared".to_owned()
                };
                let cut = Duration::from_micros(rng.random_range(0..cut_max));
                tokio::spawn(async move {
                    if let Ok(Ok(guard)) =
                        tokio::time::timeout(cut, redlock.lock(resource.as_str())).await
                    {
                        guard.release().await;
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("task runs");
        }
        if paused {
            tokio::time::sleep(Duration::from_millis(100)).await;
            resume(round % 3);
        }
    }
    redlock.shutdown().await;
    println!("5 rounds of 100 in {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancellation_storm_leaves_no_key() {
    init_tracing();
    let cluster = RedisCluster::start(3);
    let builder = Redlock::builder(cluster.urls()).node_timeout(NODE_TIMEOUT);
    storm(
        builder,
        |i| cluster.node(i).pause(),
        |i| cluster.node(i).resume(),
    )
    .await;
    nothing_left(|| keys_on(cluster.nodes())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancellation_storm_on_cluster_nodes_leaves_no_key() {
    init_tracing();
    let nodes = ShardedNode::start_many(3, 2);
    let urls: Vec<String> = nodes.iter().map(ShardedNode::url).collect();
    let builder = Redlock::builder(&urls).node_timeout(NODE_TIMEOUT);
    // Both shards of the node: every key of the round waits.
    let shards = |i: usize| nodes[i].shards().iter();
    storm(
        builder,
        |i| shards(i).for_each(RedisNode::pause),
        |i| shards(i).for_each(RedisNode::resume),
    )
    .await;
    nothing_left(|| keys_on(nodes.iter().flat_map(ShardedNode::shards))).await;
}

/// The same storm with read, write and multi-resource locks, whose
/// requests carry several keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancellation_storm_of_other_lock_kinds_leaves_no_key() {
    init_tracing();
    let cluster = RedisCluster::start(3);
    let redlock = Redlock::builder(cluster.urls())
        .node_timeout(NODE_TIMEOUT)
        .ttl(Duration::from_secs(30))
        .build()
        .await
        .expect("client builds");
    let redlock = Arc::new(redlock);
    let seed: u64 = rand::random();
    println!("seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let tasks: Vec<_> = (0..300_usize)
        .map(|i| {
            let redlock = Arc::clone(&redlock);
            let cut = Duration::from_micros(rng.random_range(0..300));
            tokio::spawn(async move {
                let resource = format!("kinds:{}", i % 7);
                let acquire = async {
                    match i % 3 {
                        0 => redlock.lock(&resource).read().await,
                        1 => redlock.lock(&resource).write().await,
                        _ => redlock.lock_all([resource.as_str(), "kinds:all"]).await,
                    }
                };
                if let Ok(Ok(guard)) = tokio::time::timeout(cut, acquire).await {
                    guard.release().await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task runs");
    }
    redlock.shutdown().await;
    nothing_left(|| keys_on(cluster.nodes())).await;
}

/// A release that meets a master down is sent again when it comes back: a
/// master that restarts with its data (AOF) would otherwise keep the key of
/// a released lock for its whole TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_reaches_a_master_that_comes_back_with_its_data() {
    init_tracing();
    let options = NodeOptions {
        extra_args: vec![
            "--appendonly".into(),
            "yes".into(),
            "--appendfsync".into(),
            "always".into(),
        ],
        ..NodeOptions::default()
    };
    let cluster = RedisCluster::start_with(3, &options);
    let redlock = Redlock::builder(cluster.urls())
        .node_timeout(NODE_TIMEOUT)
        .ttl(Duration::from_secs(30))
        .build()
        .await
        .expect("client builds");
    let guard = redlock.lock("comes-back").await.expect("a free lock");
    cluster.node(0).kill();
    let report = guard.release().await;
    assert_eq!(report.released(), 2, "{report}");
    cluster.node(0).restart_keeping_data();
    nothing_left(|| keys_on(cluster.nodes())).await;
    redlock.shutdown().await;
}
