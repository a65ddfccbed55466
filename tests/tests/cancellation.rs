//! A dropped `lock()` future leaves no key on any node: whatever its attempt
//! in flight set is released in the background, after the attempt on the
//! same connection.

mod support;

use std::time::Duration;

use redlock_tests::RedisCluster;
use redlock_tokio::Wait;
use support::{QUICK, assert_absent, builder, client, eventually};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_while_a_majority_is_paused() {
    let cluster = RedisCluster::start(3);
    // A long per-node timeout, so the attempt is surely in flight when the
    // future is dropped.
    let redlock = builder(&cluster)
        .node_timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    redlock.lock("warm").await.unwrap().release().await;
    cluster.node(0).pause();
    cluster.node(1).pause();

    let result = tokio::time::timeout(Duration::from_millis(200), redlock.lock("cancelled")).await;
    assert!(result.is_err(), "the lock cannot be decided yet");
    // The live node was locked by the attempt, then released.
    eventually("node 2 released", QUICK, || {
        !cluster.node(2).exists("cancelled")
    })
    .await;

    // The paused nodes run the queued acquire, then the release after it.
    cluster.node(0).resume();
    cluster.node(1).resume();
    // Every background release has ended.
    redlock.settled().await;
    assert_absent(&cluster, "cancelled");
    redlock
        .lock("cancelled")
        .wait(Wait::No)
        .await
        .unwrap()
        .release()
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_while_contending() {
    let cluster = RedisCluster::start(3);
    let holder = client(&cluster).await;
    let waiter = builder(&cluster)
        .wait(Wait::Retries(1_000))
        .retry_delay(Duration::from_millis(5))
        .retry_jitter(Duration::from_millis(10))
        .build()
        .await
        .unwrap();

    let guard = holder.lock("contended").await.unwrap();
    let result = tokio::time::timeout(Duration::from_millis(300), waiter.lock("contended")).await;
    assert!(result.is_err(), "held by the holder all along");
    guard.release().await;
    holder.shutdown().await;
    waiter.shutdown().await;
    assert_absent(&cluster, "contended");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_at_every_point_of_a_healthy_acquire() {
    let cluster = RedisCluster::start(3);
    let redlock = client(&cluster).await;
    redlock.lock("warm").await.unwrap().release().await;
    // Cut the acquire short after 0, 20, 40, ... µs: before sending, with
    // requests in flight, after some answers. A lock that completes in time
    // is released; one that does not must leave nothing behind.
    for step in 0..100_u64 {
        let cut = Duration::from_micros(step * 20);
        if let Ok(result) = tokio::time::timeout(cut, redlock.lock("racy")).await {
            result.unwrap().release().await;
        }
    }
    redlock.shutdown().await;
    assert_absent(&cluster, "racy");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releasing_right_after_acquiring_leaves_nothing() {
    let cluster = RedisCluster::start(3);
    let redlock = client(&cluster).await;
    // The acquire returns on a quorum while the last node's request is still
    // in flight; the release sent at once must run after it on that node.
    for _ in 0..100 {
        redlock
            .lock("quick")
            .wait(Wait::No)
            .await
            .unwrap()
            .release()
            .await;
    }
    redlock.shutdown().await;
    assert_absent(&cluster, "quick");
}
