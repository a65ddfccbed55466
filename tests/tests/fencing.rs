//! Fencing tokens against real masters: they grow with every holder, survive
//! extensions, and let a Redis-backed resource refuse a stale writer.

mod support;

use std::time::Duration;

use redlock_core::scripts;
use redlock_tests::RedisCluster;
use redlock_tokio::Wait;
use support::client;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_grow_with_every_holder_and_survive_extensions() {
    let cluster = RedisCluster::start(3);
    let a = client(&cluster).await;
    let b = client(&cluster).await;
    let mut guard = a.lock("ledger").fencing().await.expect("a free lock");
    let first = guard.fencing_token().expect("a fenced lock has a token");
    assert_eq!(first, 1, "a fresh resource starts at 1");
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
