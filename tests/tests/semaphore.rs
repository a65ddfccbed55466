//! Semaphores (`redlock.lock(name).permits(k)`) on real masters: k holders
//! at once and the (k+1)-th waits until one releases, a cancelled acquire
//! leaves no slot key, a dead holder's permit comes back after its TTL,
//! another k is refused and nothing outlives the permits by a TTL; on
//! plain masters (Redis, or Valkey with `REDLOCK_SERVER_BIN`) and on nodes
//! that are whole Redis Clusters.

mod support;

use std::collections::BTreeSet;
use std::future::IntoFuture;
use std::time::Duration;

use redlock_tests::{RedisCluster, ShardedNode};
use redlock_tokio::{AcquireError, LockGuard, Redlock, Wait};
use support::{NODE_TIMEOUT, QUICK, assert_absent, builder, client, eventually};

/// The slot keys of a semaphore of `permits` on `name` (no key prefix).
fn slot_keys(name: &str, permits: u32) -> Vec<Vec<u8>> {
    (0..permits)
        .map(|slot| format!("{{{name}}}\0permit{slot}").into_bytes())
        .collect()
}

/// Takes every permit at once, then shows that one more waits for a
/// release and gets the permit released.
async fn k_holders_then_a_waiter(holders: &Redlock, waiter: &Redlock, name: &str, permits: u32) {
    let mut guards: Vec<LockGuard> = Vec::new();
    for _ in 0..permits {
        let guard = holders
            .lock(name)
            .permits(permits)
            .wait(Wait::AtMost(Duration::from_secs(10)))
            .await
            .expect("a free permit");
        guards.push(guard);
    }
    let slots: BTreeSet<_> = guards.iter().map(|g| g.key().clone()).collect();
    assert_eq!(
        slots.len(),
        permits as usize,
        "each holder has its own slot"
    );
    let refused = waiter.lock(name).permits(permits).wait(Wait::No).await;
    match refused {
        Ok(guard) => panic!("a permit beyond {permits}: {guard:?}"),
        Err(error) => assert!(error.is_held_by_other(), "{error:?}"),
    }
    let waiting = {
        let waiter = waiter.clone();
        let name = name.to_owned();
        tokio::spawn(async move {
            waiter
                .lock(&name)
                .permits(permits)
                .wait(Wait::AtMost(Duration::from_secs(20)))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "the (k+1)-th waits while k hold");
    let released = guards.remove(0);
    let freed = released.key().clone();
    released.release().await;
    let granted = waiting.await.unwrap().expect("the released permit");
    assert_eq!(granted.key(), &freed, "the one free slot");
    granted.release().await;
    for guard in guards {
        guard.release().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k_holders_at_once_and_the_next_waits_for_a_release() {
    let cluster = RedisCluster::start(3);
    let (a, b) = (client(&cluster).await, client(&cluster).await);
    k_holders_then_a_waiter(&a, &b, "pool", 3).await;
    a.shutdown().await;
    b.shutdown().await;
    for key in slot_keys("pool", 3) {
        assert_absent(&cluster, key);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_acquire_leaves_no_slot_key() {
    let cluster = RedisCluster::start(3);
    let redlock = builder(&cluster)
        .node_timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    redlock.lock("warm").await.unwrap().release().await;
    cluster.node(0).pause();
    cluster.node(1).pause();
    let result = tokio::time::timeout(
        Duration::from_millis(200),
        redlock.lock("cancelled").permits(2).into_future(),
    )
    .await;
    assert!(result.is_err(), "the permit cannot be decided yet");
    eventually("node 2 gave its slot back", QUICK, || {
        slot_keys("cancelled", 2)
            .iter()
            .all(|key| !cluster.node(2).exists(key))
    })
    .await;
    cluster.node(0).resume();
    cluster.node(1).resume();
    redlock.shutdown().await;
    for key in slot_keys("cancelled", 2) {
        assert_absent(&cluster, key);
    }
}

/// A waiter marks the holder of every slot it finds taken
/// (`redlock_core::waited`), ours too while a failed attempt's withdraw is
/// on its way: another client's waiter, or, on a node that is a Redis
/// Cluster, our own next attempt's mark, sent for another slot's key and so
/// not ordered behind the withdraw. The semaphore's scripts take our value
/// marked as ours: the withdraw deletes it (it stayed until its TTL: "a
/// slot key left" in `a_semaphore_works_on_cluster_nodes` on Valkey), and
/// an acquire run twice answers with the slot it took. A value that only
/// starts with ours is another's.
#[test]
fn the_semaphore_scripts_take_our_value_marked_by_a_waiter() {
    use redis::Value;
    use redlock_tests::RedisNode;
    use redlock_tokio::core::scripts;

    let node = RedisNode::start();
    let client = redis::Client::open(node.url()).expect("a valid URL");
    let mut connection = client.get_connection().expect("connects");
    let keys = slot_keys("marked", 3);
    let set = |key: &[u8], value: &[u8]| {
        node.command([&b"SET"[..], key, value, b"PX", b"60000"]);
    };
    let permits = b"{marked}\0permits";
    let acquire = |connection: &mut redis::Connection| {
        redis::Script::new(scripts::SEMAPHORE_ACQUIRE)
            .key(&keys[0])
            .key(&keys[1])
            .key(&keys[2])
            .key(permits)
            .arg("v")
            .arg(60_000)
            .arg(0)
            .arg(3)
            .invoke::<Value>(connection)
            .unwrap()
    };
    // Slot 0 another's whose value starts with ours, slot 1 ours marked by
    // a waiter, slot 2 free.
    set(&keys[0], b"vw");
    set(&keys[1], b"v\0another client");
    let ours = Value::Array(vec![Value::Int(1), Value::Int(1)]);
    assert_eq!(acquire(&mut connection), ours, "the slot it took");
    assert!(!node.exists(&keys[2]), "a second slot taken");
    let withdraw = redis::Script::new(scripts::SEMAPHORE_WITHDRAW)
        .key(&keys[0])
        .key(&keys[1])
        .key(&keys[2])
        .key(permits)
        .arg("v")
        .invoke::<i64>(&mut connection)
        .unwrap();
    assert_eq!(withdraw, 1);
    assert!(!node.exists(&keys[1]), "our marked value left");
    assert_eq!(node.get(&keys[0]).as_deref(), Some(&b"vw"[..]), "another's");
    assert_eq!(
        node.get(permits).as_deref(),
        Some(&b"3"[..]),
        "k kept while a slot is held"
    );
}

/// Every key of the semaphore `name` on each master, with its value.
fn semaphore_keys(cluster: &RedisCluster, name: &str) -> Vec<BTreeSet<(Vec<u8>, Vec<u8>)>> {
    cluster
        .nodes()
        .iter()
        .map(|node| {
            let keys = node.keys(format!("{{{name}}}*"));
            keys.into_iter()
                .filter_map(|key| Some((node.get(&key)?, key)))
                .map(|(value, key)| (key, value))
                .collect()
        })
        .collect()
}

/// The masters keep k: a request for another k is refused at once, with
/// a typed error naming both numbers, and leaves nothing on any master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_k_is_refused_naming_both_and_leaves_nothing() {
    let cluster = RedisCluster::start(3);
    let (a, b) = (client(&cluster).await, client(&cluster).await);
    let held = a.lock("exports").permits(3).await.expect("a free permit");
    a.settled().await;
    let before = semaphore_keys(&cluster, "exports");
    let quorum = before
        .iter()
        .filter(|keys| keys.contains(&(b"{exports}\0permits".to_vec(), b"3".to_vec())))
        .count();
    assert!(quorum >= 2, "k kept beside the permit: {before:?}");
    let error = b
        .lock("exports")
        .permits(4)
        .wait(Wait::AtMost(Duration::from_secs(10)))
        .await
        .expect_err("another k is refused");
    let Some(AcquireError::PermitsMismatch {
        ours,
        theirs,
        attempts,
        ..
    }) = error.as_acquire()
    else {
        panic!("not a permits mismatch: {error}");
    };
    assert_eq!((*ours, *theirs, *attempts), (4, 3, 1), "{error}");
    assert!(error.is_config() && !error.is_held_by_other(), "{error}");
    assert!(
        error
            .to_string()
            .contains("semaphore exports has 3 permits on the masters, this request asked for 4"),
        "{error}"
    );
    b.settled().await;
    assert_eq!(
        semaphore_keys(&cluster, "exports"),
        before,
        "the refused request left something"
    );
    held.release().await;
    a.shutdown().await;
    b.shutdown().await;
}

/// Once every permit is released nothing of the semaphore is left on any
/// master, at once: the slots, and the permits key, which the release of
/// the last slot held on a master deletes (`scripts::SEMAPHORE_RELEASE`);
/// so another k may be used at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_every_permit_is_released_nothing_is_left() {
    let cluster = RedisCluster::start(3);
    let redlock = client(&cluster).await;
    let ttl = Duration::from_secs(1);
    let mut guards = Vec::new();
    for _ in 0..3 {
        guards.push(redlock.lock("drained").permits(3).ttl(ttl).await.unwrap());
    }
    for guard in guards {
        guard.release().await;
    }
    redlock.settled().await;
    for node in cluster.nodes() {
        // A waiter's marks may stay (an acquire that met a slot taken by
        // another in the same instant marks it): kept on purpose, they
        // expire by themselves.
        let mark = |key: &[u8]| key.ends_with(b"\0waiters") || key.ends_with(b"\0others");
        let left: Vec<String> = node
            .keys("{drained}*")
            .into_iter()
            .filter(|key| !mark(key))
            .map(|key| String::from_utf8_lossy(&key).into_owned())
            .collect();
        assert!(
            left.is_empty(),
            "left after every permit was released: {left:?}"
        );
    }
    let four = redlock
        .lock("drained")
        .permits(4)
        .await
        .expect("another k at once: nothing is left");
    four.release().await;
    redlock.shutdown().await;
}

/// Uncontended acquires of a semaphore of 3 on 3 masters, one after the
/// other (each held while the next is taken): the master heard from after
/// the decision keeps the permit's slot (its withdraw keeps the won slot),
/// so each permit ends on all three masters, their slot maps stay alike,
/// and no attempt finds them disagreeing, retries and marks a waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_permits_end_on_every_master_and_no_attempt_is_lost() {
    let cluster = RedisCluster::start(3);
    let redlock = client(&cluster).await;
    let mut guards = Vec::new();
    for _ in 0..3 {
        let guard = redlock
            .lock("spread")
            .permits(3)
            .wait(Wait::AtMost(Duration::from_secs(10)))
            .await
            .expect("a free permit");
        let (key, value) = (guard.key().clone(), guard.value().clone());
        // The third master's write may land after the guard is handed out.
        eventually(
            "the permit held on every master",
            Duration::from_secs(5),
            || {
                cluster
                    .nodes()
                    .iter()
                    .all(|node| node.get(key.as_bytes()).as_deref() == Some(value.as_bytes()))
            },
        )
        .await;
        guards.push(guard);
    }
    let slots: BTreeSet<_> = guards.iter().map(|g| g.key().clone()).collect();
    assert_eq!(slots.len(), 3, "three permits, three slots");
    for (n, node) in cluster.nodes().iter().enumerate() {
        let marks: Vec<String> = node
            .keys("{spread}*")
            .into_iter()
            .filter(|key| key.ends_with(b"\0waiters"))
            .map(|key| String::from_utf8_lossy(&key).into_owned())
            .collect();
        assert!(marks.is_empty(), "a waiter's mark on master {n}: {marks:?}");
    }
    for guard in guards {
        guard.release().await;
    }
    redlock.settled().await;
    for node in cluster.nodes() {
        for key in slot_keys("spread", 3) {
            assert_eq!(node.get(&key), None, "released everywhere");
        }
    }
    redlock.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_holders_permit_returns_after_its_ttl() {
    let cluster = RedisCluster::start(3);
    let (dead, waiter) = (client(&cluster).await, client(&cluster).await);
    let ttl = Duration::from_secs(1);
    let mut held = Vec::new();
    for _ in 0..2 {
        let guard = dead.lock("jobs").permits(2).ttl(ttl).await.unwrap();
        held.push(guard.key().clone());
        // A holder that dies releases nothing: its keys live out their TTL.
        std::mem::forget(guard);
    }
    let refused = waiter.lock("jobs").permits(2).wait(Wait::No).await;
    assert!(refused.is_err_and(|e| e.is_held_by_other()));
    let granted = waiter
        .lock("jobs")
        .permits(2)
        .wait(Wait::AtMost(Duration::from_secs(20)))
        .await
        .expect("a dead holder's permit comes back");
    assert!(held.contains(granted.key()));
    granted.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_works_on_cluster_nodes() {
    let nodes = ShardedNode::start_many(3, 3);
    let urls: Vec<String> = nodes.iter().map(ShardedNode::url).collect();
    let build = || {
        Redlock::builder(urls.clone())
            .node_timeout(NODE_TIMEOUT)
            .connect_timeout(Duration::from_secs(10))
            .build()
    };
    let (a, b) = (build().await.unwrap(), build().await.unwrap());
    // Every slot key lands in the name's hash slot, on one shard.
    let keys = slot_keys("pool", 2);
    assert!(
        keys.iter()
            .all(|key| nodes[0].shard_index(key) == nodes[0].shard_index("pool"))
    );
    k_holders_then_a_waiter(&a, &b, "pool", 2).await;
    // A fenced permit's counters share the slot keys' hash slot.
    let fenced = a.lock("pool").permits(2).fencing().await.unwrap();
    assert!(fenced.fencing_token().is_some(), "a fenced permit");
    fenced.release().await;
    a.shutdown().await;
    b.shutdown().await;
    for node in &nodes {
        for key in &keys {
            let left = node
                .get(key)
                .map(|value| String::from_utf8_lossy(&value).into_owned());
            let key = String::from_utf8_lossy(key);
            assert!(left.is_none(), "a slot key left: {left:?} at {key:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_permits_tokens_grow_per_slot_and_a_deposed_holder_is_refused() {
    let cluster = RedisCluster::start(3);
    let (dead, live) = (client(&cluster).await, client(&cluster).await);
    let ttl = Duration::from_secs(1);
    let fenced = |redlock: &Redlock| {
        redlock
            .lock("fenced-pool")
            .permits(2)
            .fencing()
            .ttl(ttl)
            .wait(Wait::AtMost(Duration::from_secs(20)))
    };
    let deposed = fenced(&dead).await.expect("a free permit");
    // Held past the test (a TTL of its own), so that the deposed holder's
    // slot is the only one to come free.
    let other = fenced(&live)
        .ttl(Duration::from_secs(60))
        .await
        .expect("the other permit");
    assert_ne!(deposed.key(), other.key(), "two slots");
    let (slot, deposed_token) = (deposed.key().clone(), deposed.fencing_token().unwrap());
    let other_token = other.fencing_token().unwrap();
    // Each slot's counter lives beside its slot key, on (at least) a quorum.
    let counter = [slot.as_bytes(), b"\0fencing"].concat();
    let stored = cluster
        .nodes()
        .iter()
        .filter(|node| node.get(&counter) == Some(deposed_token.to_string().into_bytes()))
        .count();
    assert!(stored >= 2, "the token on {stored} masters");
    // The first holder stalls past its TTL (it never releases); the slot
    // comes free and its next holder gets a larger token.
    std::mem::forget(deposed);
    let next = fenced(&live).await.expect("the deposed holder's permit");
    assert_eq!(next.key(), &slot, "the only free slot");
    let next_token = next.fencing_token().unwrap();
    assert!(
        next_token > deposed_token,
        "{next_token} after {deposed_token}"
    );
    // The protected resource keeps the highest token per slot.
    let resource = cluster.node(0);
    let write = |slot: &redlock_core::Key, token: u64| -> i64 {
        let highest = format!("resource:{slot}");
        let value = resource.command([
            "EVAL",
            redlock_core::scripts::CHECK_TOKEN,
            "1",
            &highest,
            &token.to_string(),
        ]);
        redis::from_redis_value(value).unwrap()
    };
    assert_eq!(write(&slot, next_token), 1, "the slot's new holder writes");
    assert_eq!(
        write(other.key(), other_token),
        1,
        "the other permit's holder writes"
    );
    assert_eq!(
        write(&slot, deposed_token),
        0,
        "the deposed holder is refused"
    );
    next.release().await;
    other.release().await;
    live.shutdown().await;
}
