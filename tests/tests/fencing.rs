//! Fencing tokens against real masters: they grow with every holder, survive
//! extensions, and let a Redis-backed resource refuse a stale writer.

mod support;

use std::time::Duration;

use redlock_core::scripts;
use redlock_tests::RedisCluster;
use redlock_tokio::core::planted::Bug;
use redlock_tokio::{Redlock, Wait};
use support::client;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_grow_with_every_holder_and_survive_extensions() {
    let cluster = RedisCluster::start(3);
    let a = client(&cluster).await;
    let b = client(&cluster).await;
    let clock = cluster.node(0).clock_us();
    let mut guard = a.lock("ledger").fencing().await.expect("a free lock");
    let first = guard.fencing_token().expect("a fenced lock has a token");
    assert!(
        first > clock,
        "a fresh resource's token {first} is above the servers' clock ({clock} µs)"
    );
    guard.extend(Duration::from_secs(5)).await.expect("extend");
    assert_eq!(guard.fencing_token(), Some(first), "extend keeps the token");
    let _ = guard.release().await;

    let mut last = first;
    for client in [&b, &a, &b] {
        let guard = client.lock("ledger").fencing().await.expect("free again");
        let token = guard.fencing_token().unwrap();
        assert!(token > last, "token {token} after {last}");
        last = token;
        let _ = guard.release().await;
    }
    // The counter lives next to the lock key, on (at least) a quorum of nodes.
    let counters: Vec<Option<Vec<u8>>> = cluster
        .nodes()
        .iter()
        .map(|node| node.get(b"{ledger}\0fencing"))
        .collect();
    let stored = counters
        .iter()
        .filter(|c| c.as_deref() == Some(last.to_string().as_bytes()))
        .count();
    assert!(stored >= 2, "{counters:?}");
    // Plain locks carry no token.
    let plain = a.lock("ledger").wait(Wait::No).await.unwrap();
    assert_eq!(plain.fencing_token(), None);
    let _ = plain.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_check_script_refuses_a_stale_token() {
    let cluster = RedisCluster::start(3);
    let redlock = client(&cluster).await;
    let old = redlock.lock("invoice").fencing().await.unwrap();
    let old_token = old.fencing_token().unwrap();
    // The old holder stalls; its lock is released (as if it had expired) and
    // a new holder writes first.
    let _ = old.release().await;
    let new = redlock.lock("invoice").fencing().await.unwrap();
    let new_token = new.fencing_token().unwrap();
    assert!(new_token > old_token);

    let resource = cluster.node(2);
    let check = |token: u64| -> i64 {
        let value = resource.command([
            "EVAL",
            scripts::CHECK_TOKEN,
            "1",
            "invoice:highest-token",
            &token.to_string(),
        ]);
        redis::from_redis_value(value).unwrap()
    };
    assert_eq!(check(new_token), 1, "the current holder writes");
    assert_eq!(check(old_token), 0, "the stale holder is refused");
    assert_eq!(check(new_token), 1, "the current holder may write again");
    let _ = new.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_acquire_costs_two_calls_per_node() {
    let cluster = RedisCluster::start(3);
    let redlock = client(&cluster).await;
    // Warm up, then count.
    let guard = redlock.lock("warm").fencing().await.unwrap();
    let _ = guard.release().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    for node in cluster.nodes() {
        node.reset_stats();
    }
    let guard = redlock.lock("counted").fencing().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    for node in cluster.nodes() {
        assert_eq!(
            node.commandstats().get("evalsha"),
            Some(&2),
            "acquire + store token"
        );
    }
    let _ = guard.release().await;
}

#[test]
fn tokens_and_terms_rise_after_every_master_restarted_empty() {
    let [lock, permit, term] = across_a_restart_empty(None);
    println!("lock {lock:?}, permit {permit:?}, term {term:?}");
    for (what, (before, after)) in [("lock", lock), ("permit", permit), ("term", term)] {
        assert!(after > before, "{what}: {after} after {before}");
    }
}

#[test]
fn tokens_from_the_counters_alone_go_back_after_a_restart_empty() {
    // The planted bug: tokens without the servers' clocks under them.
    let [lock, permit, term] = across_a_restart_empty(Some(Bug::TokenFromCounterOnly));
    println!("lock {lock:?}, permit {permit:?}, term {term:?} (planted)");
    for (what, (before, after)) in [("lock", lock), ("permit", permit), ("term", term)] {
        assert!(
            after < before,
            "{what}: {after} after {before}: the planted bug went unseen"
        );
    }
}

/// The last token of a fenced lock, of a fenced permit and of an election's
/// term before every master was restarted empty, and the first after, with
/// `bug` planted (or none) on the runtime's threads.
fn across_a_restart_empty(bug: Option<Bug>) -> [(u64, u64); 3] {
    let cluster = RedisCluster::start(3);
    support::planted_runtime(bug).block_on(async {
        // A short TTL: the restarted servers vote again one TTL after the
        // client saw them back.
        let redlock = support::builder(&cluster)
            .ttl(Duration::from_secs(1))
            .build()
            .await
            .unwrap();
        // Three holders each, so that a counter alone would be at 3.
        let mut before = [0; 3];
        for _ in 0..3 {
            before = tokens(&redlock).await;
        }
        for node in cluster.nodes() {
            node.restart();
        }
        let after = tokens(&redlock).await;
        redlock.shutdown().await;
        [0, 1, 2].map(|i| (before[i], after[i]))
    })
}

/// One holder's token of each kind, released at once. Waits for the
/// masters to be reached again after a restart.
async fn tokens(redlock: &Redlock) -> [u64; 3] {
    let patience = Wait::AtMost(Duration::from_secs(30));
    let lock = redlock
        .lock("ledger")
        .fencing()
        .wait(patience)
        .await
        .expect("the lock");
    // One permit: every holder takes the same slot, whose counter counts them.
    let permit = redlock
        .lock("pool")
        .permits(1)
        .fencing()
        .wait(patience)
        .await
        .expect("a permit");
    let mut leader = redlock
        .election("scheduler")
        .wait(patience)
        .campaign()
        .await
        .expect("elected");
    let tokens = [
        lock.fencing_token().unwrap(),
        permit.fencing_token().unwrap(),
        leader.term(),
    ];
    let _ = lock.release().await;
    let _ = permit.release().await;
    let _ = leader.resign().await;
    tokens
}
