//! Nodes that are whole Redis Clusters: every lock kind on three
//! clusters of three shards, with keys spread over the shards; a mix of two
//! plain masters and one cluster; a killed shard master counts as its
//! node failing; a lock follows its slot to another shard, and a release
//! that meets its slot half moved lands once the move ends; locks whose
//! keys cannot share a slot are refused before anything is sent. Real
//! processes on loopback, Redis or Valkey (`REDLOCK_SERVER_BIN`).

mod support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use redlock_core::{ConfigError, NodeVote};
use redlock_tests::{RedisNode, ShardedNode};
use redlock_tokio::{Builder, Error, LockGuard, Redlock, Wait};
use support::{NODE_TIMEOUT, eventually, init_tracing};

fn builder(urls: Vec<String>) -> Builder {
    init_tracing();
    // A cluster connection reads the slot map and loads the scripts on
    // every shard: give a loaded machine time, so that no node is still
    // connecting when a test starts.
    Redlock::builder(urls)
        .node_timeout(NODE_TIMEOUT)
        .connect_timeout(Duration::from_secs(10))
}

async fn client(urls: Vec<String>) -> Redlock {
    builder(urls).build().await.expect("client builds")
}

fn urls(nodes: &[ShardedNode]) -> Vec<String> {
    nodes.iter().map(ShardedNode::url).collect()
}

/// Resource names whose keys land on every shard of a `shards`-shard node
/// (the slot map is the same on every node the harness starts).
fn spread(node: &ShardedNode, shards: usize) -> Vec<String> {
    let mut names = Vec::new();
    let mut covered = BTreeSet::new();
    for i in 0.. {
        let name = format!("res-{i}");
        if covered.insert(node.shard_index(&name)) || names.len() < 2 * shards {
            names.push(name);
        }
        if covered.len() == shards && names.len() >= 2 * shards {
            return names;
        }
    }
    unreachable!()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_locks_spread_over_the_shards_of_every_cluster_node() {
    let nodes = ShardedNode::start_many(3, 3);
    let redlock = client(urls(&nodes)).await;
    assert_eq!(redlock.connected_nodes(), 3);
    let other = client(urls(&nodes)).await;
    let names = spread(&nodes[0], 3);
    let mut shards_used = BTreeSet::new();
    for name in &names {
        let mut guard = redlock
            .lock(name)
            .wait(Wait::No)
            .await
            .expect("a free resource");
        // The acquire returns once a quorum said yes; the last node's answer
        // may still be on its way.
        assert!(guard.votes().granted() >= 2, "{}", guard.votes());
        for (node, vote) in nodes.iter().zip(guard.votes().votes()) {
            if *vote != NodeVote::Granted {
                continue;
            }
            // The standard Redlock key, on the shard that owns its slot.
            assert_eq!(
                node.get(name).as_deref(),
                Some(guard.value().as_bytes()),
                "{name}"
            );
        }
        shards_used.insert(nodes[0].shard_index(name));
        let refused = other.lock(name).wait(Wait::No).await.expect_err("held");
        assert!(refused.is_held_by_other(), "{refused:?}");
        guard
            .extend(Duration::from_secs(20))
            .await
            .expect("extends");
        // `extend` returns at a quorum: master 1's extension may still be
        // on its way.
        eventually(
            "master 1 extended or without the key",
            Duration::from_secs(10),
            || nodes[1].shard_of(name).pttl(name) > 10_000 || nodes[1].get(name).is_none(),
        )
        .await;
        let report = guard.release().await;
        assert!(report.frees_lock(), "{report:?}");
    }
    redlock.shutdown().await;
    assert_eq!(shards_used.len(), 3, "keys on every shard");
    // The node's facts are its shards' (all Redis >= 7.0 or Valkey here):
    // exclusive acquires go out as `SET NX GET`, each to the shard of its
    // key, and every shard got some.
    for shard in nodes[0].shards() {
        let stats = shard.commandstats();
        assert!(
            stats.get("set").copied().unwrap_or(0) > 0,
            "{shard}: {stats:?}"
        );
    }
    // Every shard of every node took part, and nothing is left anywhere.
    for node in &nodes {
        assert_eq!(node.key_counts(), vec![0; 3]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_lock_kind_works_on_cluster_nodes() {
    let nodes = ShardedNode::start_many(3, 3);
    let redlock = client(urls(&nodes)).await;
    let other = client(urls(&nodes)).await;
    for name in spread(&nodes[0], 3) {
        // Fenced: the counter lives in the lock key's slot, so the fenced
        // scripts run on one shard.
        let fenced = redlock.lock(&name).fencing().await.expect("fenced lock");
        let first = fenced.fencing_token().expect("a token");
        let fencing_key = format!("{{{name}}}\0fencing");
        assert_eq!(
            nodes[0].shard_index(&fencing_key),
            nodes[0].shard_index(&name)
        );
        fenced.release().await;
        let again = redlock
            .lock(&name)
            .fencing()
            .await
            .expect("fenced lock again");
        assert!(again.fencing_token().expect("a token") > first);
        again.release().await;

        // Read-write: readers share, a writer waits for them.
        let read = redlock
            .lock(&name)
            .read()
            .wait(Wait::No)
            .await
            .expect("reader");
        let read2 = other
            .lock(&name)
            .read()
            .wait(Wait::No)
            .await
            .expect("second reader");
        let refused = other
            .lock(&name)
            .write()
            .wait(Wait::No)
            .await
            .expect_err("readers hold it");
        assert!(refused.is_held_by_other(), "{refused:?}");
        read.release().await;
        read2.release().await;
        let write = other
            .lock(&name)
            .write()
            .wait(Wait::No)
            .await
            .expect("writer after the readers");
        let refused = redlock
            .lock(&name)
            .read()
            .wait(Wait::No)
            .await
            .expect_err("the writer holds it");
        assert!(refused.is_held_by_other(), "{refused:?}");
        write.release().await;

        // Reentrant: the owner again, nobody else.
        let outer = redlock
            .lock(&name)
            .reentrant("owner-a")
            .await
            .expect("outer");
        let inner = redlock
            .lock(&name)
            .reentrant("owner-a")
            .await
            .expect("inner");
        let refused = other
            .lock(&name)
            .reentrant("owner-b")
            .wait(Wait::No)
            .await
            .expect_err("another owner");
        assert!(refused.is_held_by_other(), "{refused:?}");
        inner.release().await;
        outer.release().await;

        // Multi over one hash tag: one slot, one script per node.
        let parts = [format!("{{{name}}}:a"), format!("{{{name}}}:b")];
        let all = redlock.lock_all(&parts).await.expect("multi in one slot");
        // The nodes that said yes (the last answer may still be on its way).
        for (node, vote) in nodes.iter().zip(all.votes().votes()) {
            if *vote != NodeVote::Granted {
                continue;
            }
            for part in &parts {
                assert_eq!(node.get(part).as_deref(), Some(all.value().as_bytes()));
            }
        }
        let refused = other
            .lock(&parts[1])
            .wait(Wait::No)
            .await
            .expect_err("held by multi");
        assert!(refused.is_held_by_other(), "{refused:?}");
        all.release().await;
    }
    // Every release the clients still send in the background is done.
    redlock.shutdown().await;
    other.shutdown().await;
    let names = spread(&nodes[0], 3);
    for node in &nodes {
        // The fencing counters may stay (they must outlive every lock);
        // nothing else does.
        let keys: i64 = node.key_counts().iter().sum();
        assert!(keys <= names.len() as i64, "{keys} keys left");
        for name in &names {
            assert!(!node.exists(name), "{name} left behind");
            assert!(!node.exists(format!("{{{name}}}\0readers")));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_whose_keys_cannot_share_a_slot_are_refused_before_anything_is_sent() {
    let nodes = ShardedNode::start_many(3, 3);
    let redlock = client(urls(&nodes)).await;
    // Two names in different slots.
    let (a, b) = ("alpha", "beta");
    assert_ne!(nodes[0].shard_index(a), nodes[0].shard_index(b));
    let err = redlock.lock_all([a, b]).await.expect_err("cross-slot");
    assert!(err.is_config(), "{err:?}");
    assert!(
        matches!(err, Error::Config(ConfigError::CrossSlot { .. })),
        "{err:?}"
    );
    assert!(err.to_string().contains("hash tag"), "{err}");
    // A read lock on a name with a `}` and no hash tag: its readers key
    // cannot join the lock key's slot.
    let err = redlock
        .lock("odd}name")
        .read()
        .wait(Wait::No)
        .await
        .expect_err("cross-slot");
    assert!(
        matches!(err, Error::Config(ConfigError::CrossSlot { .. })),
        "{err:?}"
    );
    // Plain exclusive locks on such names are fine: one key.
    redlock
        .lock("odd}name")
        .wait(Wait::No)
        .await
        .expect("one key")
        .release()
        .await;
    redlock.shutdown().await;
    for node in &nodes {
        assert_eq!(node.key_counts(), vec![0; 3], "nothing was written");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_plain_masters_and_one_cluster_make_one_quorum() {
    let plain: Vec<RedisNode> = std::thread::scope(|scope| {
        let starts: Vec<_> = (0..2).map(|_| scope.spawn(RedisNode::start)).collect();
        starts.into_iter().map(|s| s.join().unwrap()).collect()
    });
    let cluster = ShardedNode::start(3);
    let urls = vec![plain[0].url(), cluster.url_one_seed(), plain[1].url()];
    let redlock = client(urls.clone()).await;
    let other = client(urls).await;
    assert_eq!(redlock.connected_nodes(), 3);
    for name in spread(&cluster, 3) {
        let guard = redlock.lock(&name).wait(Wait::No).await.expect("free");
        assert!(guard.votes().granted() >= 2, "{}", guard.votes());
        if guard.votes().votes()[1] == NodeVote::Granted {
            assert_eq!(
                cluster.get(&name).as_deref(),
                Some(guard.value().as_bytes())
            );
        }
        assert!(
            other
                .lock(&name)
                .wait(Wait::No)
                .await
                .unwrap_err()
                .is_held_by_other()
        );
        guard.release().await;

        let read = redlock
            .lock(&name)
            .read()
            .wait(Wait::No)
            .await
            .expect("reader");
        assert!(
            other
                .lock(&name)
                .write()
                .wait(Wait::No)
                .await
                .unwrap_err()
                .is_held_by_other()
        );
        read.release().await;
        let fenced = other.lock(&name).fencing().await.expect("fenced");
        assert!(fenced.fencing_token().is_some());
        fenced.release().await;
    }
    // The plain masters hold the same layout as the cluster's shards.
    let name = "layout";
    let fenced = redlock.lock(name).fencing().await.expect("fenced");
    fenced.release().await;
    redlock.shutdown().await;
    // The counter is stored where the lock was held: on a quorum at least.
    let stored = [
        plain[0].exists("{layout}\0fencing"),
        cluster.exists("{layout}\0fencing"),
        plain[1].exists("{layout}\0fencing"),
    ];
    assert!(stored.iter().filter(|&&s| s).count() >= 2, "{stored:?}");
    assert!(!plain[0].exists("layout\0fencing") && !cluster.exists("layout\0fencing"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_shard_master_fails_its_node_and_the_quorum_goes_on() {
    let nodes = ShardedNode::start_many(3, 3);
    let redlock = client(urls(&nodes)).await;
    let names = spread(&nodes[0], 3);
    let held: Vec<LockGuard> = {
        let mut held = Vec::new();
        for name in &names {
            held.push(redlock.lock(name).wait(Wait::No).await.expect("free"));
        }
        held
    };
    // Shard 0 of node 0 dies: node 0 can no longer vote for its slots.
    let dead = 0;
    nodes[0].shard(dead).kill();
    let mut on_dead_shard = 0;
    for mut guard in held {
        let name = String::from_utf8(guard.resource().to_vec()).unwrap();
        let on_dead = nodes[0].shard_index(&name) == dead;
        on_dead_shard += usize::from(on_dead);
        // Two of three nodes keep every lock alive.
        guard
            .extend(Duration::from_secs(10))
            .await
            .unwrap_or_else(|err| panic!("{name}: {err}"));
        let report = guard.release().await;
        assert!(report.frees_lock(), "{name}: {report:?}");
    }
    assert!(on_dead_shard > 0, "some keys were on the dead shard");
    // New locks on every shard's keys still go through the other nodes.
    let other = client(urls(&nodes)).await;
    for name in &names {
        let guard = other
            .lock(name)
            .wait(Wait::No)
            .await
            .unwrap_or_else(|err| panic!("{name}: {err}"));
        assert!(guard.votes().granted() >= 2, "{}", guard.votes());
        if nodes[0].shard_index(name) == dead {
            assert!(
                // Failed, or not waited for once the other two answered.
                guard.votes().votes()[0] != NodeVote::Granted,
                "{name}: {}",
                guard.votes()
            );
        }
        guard.release().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_cluster_listed_twice_is_one_server() {
    let node = ShardedNode::start(2);
    let plain = RedisNode::start();
    let err = builder(vec![node.url(), node.url_one_seed(), plain.url()])
        .build()
        .await
        .expect_err("the same cluster twice");
    assert!(
        matches!(err, Error::Config(ConfigError::SameServer { .. })),
        "{err:?}"
    );
    // A plain node that is a shard of a cluster node is that server too.
    let shard = format!("redis://127.0.0.1:{}", node.shard(1).port());
    let err = builder(vec![node.url(), shard, plain.url()])
        .build()
        .await
        .expect_err("a shard listed as a plain node");
    assert!(
        matches!(err, Error::Config(ConfigError::SameServer { .. })),
        "{err:?}"
    );
    // Sanity: the shards really form a cluster.
    let info = node.shard(0).command(["CLUSTER", "INFO"]);
    let Value::BulkString(info) = info else {
        panic!("{info:?}")
    };
    assert!(String::from_utf8_lossy(&info).contains("cluster_state:ok"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_follows_its_slot_when_it_moves_to_another_shard() {
    let nodes = ShardedNode::start_many(3, 3);
    let redlock = client(urls(&nodes)).await;
    let other = client(urls(&nodes)).await;
    for kind in ["exclusive", "read", "fenced"] {
        let name = format!("moving-{kind}");
        let request = redlock.lock(&name);
        let mut guard = match kind {
            "read" => request.read().await,
            "fenced" => request.fencing().await,
            _ => request.await,
        }
        .expect("free");
        // Node 0 moves the lock's slot (with the derived keys: one slot) to
        // another shard while the lock is held.
        let from = nodes[0].shard_index(&name);
        let to = (from + 1) % 3;
        nodes[0].move_slot(&name, to);
        assert_eq!(nodes[0].shard_index(&name), to);
        // The client's requests to the old owner are MOVED, and followed.
        guard
            .extend(Duration::from_secs(30))
            .await
            .unwrap_or_else(|err| panic!("{name}: {err}"));
        if kind != "read" && nodes[0].shard(to).exists(&name) {
            // The extension reached the key on its new shard (the extend
            // returns once a quorum answered: node 0's answer, one
            // redirection longer, may still be on its way).
            eventually(&name, Duration::from_secs(5), || {
                nodes[0].shard(to).pttl(&name) > 20_000
            })
            .await;
            // (The old owner answers MOVED for it now.)
            assert!(nodes[0].shard(from).try_command(["EXISTS", &name]).is_err());
        }
        let refused = other
            .lock(&name)
            .write()
            .wait(Wait::No)
            .await
            .expect_err("still held");
        assert!(refused.is_held_by_other(), "{name}: {refused:?}");
        let report = guard.release().await;
        assert!(report.frees_lock(), "{name}: {report:?}");
        // Taken again through the new owner.
        let again = other
            .lock(&name)
            .wait(Wait::No)
            .await
            .unwrap_or_else(|err| panic!("{name}: {err}"));
        again.release().await;
    }
    redlock.shutdown().await;
    other.shutdown().await;
    for node in &nodes {
        for kind in ["exclusive", "read", "fenced"] {
            let name = format!("moving-{kind}");
            assert!(!node.exists(&name), "{name} left behind");
        }
    }
}

/// A release that meets its slot half moved (a read lock's script names
/// the readers' set, which moves, and the writer's key, absent: both shards
/// answer `TRYAGAIN` until the move ends) is retried within milliseconds and
/// lands once the slot has moved, inside the per-node timeout: the node is
/// not taken for silent. (The `redis` crate's default waits 1.28 s or more
/// before each such retry, past the timeout here.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_split_by_a_migration_lands_once_the_slot_has_moved() {
    let nodes = Arc::new(ShardedNode::start_many(3, 2));
    let redlock = builder(urls(&nodes))
        .node_timeout(Duration::from_millis(1200))
        .build()
        .await
        .expect("client builds");
    let name = "split-by-a-move";
    let guard = redlock
        .lock(name)
        .read()
        .wait(Wait::No)
        .await
        .expect("free");
    let from = nodes[0].shard_index(name);
    let tryagain = |node: &ShardedNode| node.error_counts().get("TRYAGAIN").copied();
    let before = tryagain(&nodes[0]).unwrap_or(0);
    let mover = {
        let nodes = Arc::clone(&nodes);
        tokio::task::spawn_blocking(move || {
            nodes[0].move_slot_paced(name, 1 - from, Duration::from_millis(100));
        })
    };
    eventually(
        "the owner migrates the slot",
        Duration::from_secs(10),
        || {
            let text: String =
                redis::from_redis_value(nodes[0].shard(from).command(["CLUSTER", "NODES"]))
                    .expect("CLUSTER NODES is text");
            text.contains("->-")
        },
    )
    .await;
    let started = std::time::Instant::now();
    let report = guard.release().every_node().await;
    let took = started.elapsed();
    mover.await.expect("the move is done");
    let met = tryagain(&nodes[0]).unwrap_or(0) - before;
    println!("release across a migration: {took:?}, {met} TRYAGAIN answered by the moving node");
    assert!(met > 0, "the release never met the migration");
    assert_eq!(report.votes().votes()[0], NodeVote::Granted, "{report}");
    redlock.shutdown().await;
    for node in nodes.iter() {
        assert_eq!(node.key_counts(), [0, 0], "{}", node.url());
    }
}

/// A cluster node whose shard is paused: a release is decided by the other
/// two nodes without waiting for it, and once it runs again and the client
/// has shut down, no key of ours is left on any node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_cluster_node_is_not_waited_for_and_keeps_nothing() {
    let nodes = ShardedNode::start_many(3, 1);
    let redlock = client(urls(&nodes)).await;
    redlock.lock("warm").await.expect("free").release().await;
    let guard = redlock.lock("paused").wait(Wait::No).await.expect("free");
    nodes[2].shard(0).pause();
    let report = guard.release().await;
    nodes[2].shard(0).resume();
    assert!(report.frees_lock(), "{report}");
    assert_eq!(
        report.votes().votes()[2],
        NodeVote::Pending,
        "a release that waited out the paused node would say it timed out: {report}"
    );
    redlock.shutdown().await;
    for node in &nodes {
        assert_eq!(node.key_counts(), [0], "{}", node.url());
    }
}
