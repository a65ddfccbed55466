//! Fair locks across processes (`LockRequest::fair`): the masters' queues
//! serve waiters in the order the quorum saw them, a waiter that gives up
//! leaves no entry behind, and an emptied queue leaves no key. Asserts who
//! was served and what is left on the masters; never how fast.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redlock_tests::{RedisCluster, RedisNode};
use redlock_tokio::{LockRequest, Redlock, Wait, kind};
use support::{builder, eventually};

/// A fair acquire of `fair` that waits up to a minute.
fn fair(redlock: &Redlock) -> LockRequest<kind::Chosen> {
    redlock
        .lock("fair")
        .fair()
        .wait(Wait::AtMost(Duration::from_secs(60)))
}

/// Every key of a master (the test uses one resource, so all are its).
fn keys(node: &RedisNode) -> Vec<String> {
    node.keys("*")
        .into_iter()
        .map(|key| String::from_utf8_lossy(&key).into_owned())
        .collect()
}

/// The waiter ids in a master's queue, in order.
fn queue(node: &RedisNode, resource: &str) -> Vec<String> {
    match node.command(["ZRANGE", &format!("{{{resource}}}\0queue"), "0", "-1"]) {
        redis::Value::Array(items) => items
            .into_iter()
            .map(|item| match item {
                redis::Value::BulkString(bytes) => String::from_utf8(bytes).unwrap(),
                other => panic!("a waiter id is a string, got {other:?}"),
            })
            .collect(),
        other => panic!("ZRANGE answers an array, got {other:?}"),
    }
}

/// Waits until the holder's key is on every master. A lock is granted by a
/// quorum; the last master may get the holder's request later, after a
/// waiter's (another client, another connection): it then grants that
/// waiter there, which never queues there while the holder keeps the
/// others. The tests that count queue entries on every master start from
/// a lock held on all of them.
async fn held_everywhere(cluster: &RedisCluster) {
    eventually(
        "the holder's key is on every master",
        Duration::from_secs(10),
        || {
            cluster
                .nodes()
                .iter()
                .all(|node| keys(node).contains(&"fair".to_owned()))
        },
    )
    .await;
}

async fn clients(cluster: &RedisCluster, count: usize) -> Vec<Redlock> {
    let mut clients = Vec::new();
    for _ in 0..count {
        clients.push(builder(cluster).build().await.unwrap());
    }
    clients
}

/// Waiters of four clients that each ask while the lock is held, one after
/// another, are served in the order they asked: the masters queued them
/// in that order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_of_several_clients_are_served_in_the_order_they_asked() {
    let cluster = RedisCluster::start(3);
    let clients = clients(&cluster, 5).await;
    let guard = clients[4]
        .lock("fair")
        .fair()
        .wait(Wait::No)
        .await
        .expect("a free lock");
    held_everywhere(&cluster).await;
    let served = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (index, redlock) in clients[..4].iter().enumerate() {
        let redlock = redlock.clone();
        let served = Arc::clone(&served);
        tasks.push(tokio::spawn(async move {
            let guard = fair(&redlock).await.expect("served");
            served.lock().unwrap().push(index);
            guard.release().await;
        }));
        // The next asks only once this one is in every master's queue.
        eventually("the waiter is queued", Duration::from_secs(10), || {
            cluster
                .nodes()
                .iter()
                .all(|node| queue(node, "fair").len() == index + 1)
        })
        .await;
    }
    guard.release().await;
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(*served.lock().unwrap(), vec![0, 1, 2, 3]);
    for node in cluster.nodes() {
        assert_eq!(keys(node), Vec::<String>::new(), "nothing left behind");
    }
}

/// 4 clients x 2 tasks take the fair lock in turn: every task is served
/// every round, no two hold it at once, and once all are done nothing is
/// left on the masters (no lock, no queue entry, no queue key).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_clients_of_two_tasks_are_all_served_and_leave_nothing() {
    const ROUNDS: usize = 5;
    let cluster = RedisCluster::start(3);
    let clients = clients(&cluster, 4).await;
    let holding = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let grants = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (client, redlock) in clients.iter().enumerate() {
        for task in 0..2 {
            let (redlock, holding, overlaps, grants) = (
                redlock.clone(),
                Arc::clone(&holding),
                Arc::clone(&overlaps),
                Arc::clone(&grants),
            );
            tasks.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let guard = fair(&redlock).await.expect("served");
                    if holding.fetch_add(1, Ordering::SeqCst) != 0 {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    grants.lock().unwrap().push((client, task));
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    holding.fetch_sub(1, Ordering::SeqCst);
                    guard.release().await;
                }
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "no two holders at once");
    let grants = grants.lock().unwrap().clone();
    assert_eq!(grants.len(), 8 * ROUNDS);
    for client in 0..4 {
        for task in 0..2 {
            let count = grants.iter().filter(|g| **g == (client, task)).count();
            assert_eq!(count, ROUNDS, "task {task} of client {client}");
        }
    }
    for redlock in &clients {
        redlock.shutdown().await;
    }
    for node in cluster.nodes() {
        assert_eq!(keys(node), Vec::<String>::new(), "nothing left behind");
    }
}

/// A waiter that gives up (its wait limit passes, or its future is
/// dropped) leaves the queues: the next waiter is not held back by it, and
/// no entry is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_gives_up_leaves_the_queue() {
    let cluster = RedisCluster::start(3);
    let clients = clients(&cluster, 3).await;
    let guard = clients[0]
        .lock("fair")
        .fair()
        .wait(Wait::No)
        .await
        .expect("a free lock");
    held_everywhere(&cluster).await;
    // One gives up at its limit, one is cancelled while it waits.
    let limited = clients[1]
        .lock("fair")
        .fair()
        .wait(Wait::AtMost(Duration::from_millis(300)))
        .await;
    assert!(limited.unwrap_err().is_held_by_other());
    let cancelled = tokio::spawn({
        let redlock = clients[2].clone();
        async move { fair(&redlock).await }
    });
    eventually("the waiter is queued", Duration::from_secs(10), || {
        cluster
            .nodes()
            .iter()
            .all(|node| queue(node, "fair").len() == 1)
    })
    .await;
    cancelled.abort();
    let _ = cancelled.await;
    eventually("the queues are empty", Duration::from_secs(10), || {
        cluster
            .nodes()
            .iter()
            .all(|node| queue(node, "fair").is_empty())
    })
    .await;
    guard.release().await;
    for redlock in &clients {
        redlock.shutdown().await;
    }
    for node in cluster.nodes() {
        assert_eq!(keys(node), Vec::<String>::new(), "nothing left behind");
    }
}

/// A waiter that died at the head of the queues (its entry is there, it
/// never asks again) holds them only until its entry expires or the
/// others fall back on the plain rule: the next waiter is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_waiter_at_the_head_does_not_hold_the_queue() {
    let cluster = RedisCluster::start(3);
    let clients = clients(&cluster, 1).await;
    // A waiter id that no live acquisition has, at the head of every
    // queue, whose entry would live an hour.
    for node in cluster.nodes() {
        node.command(["ZADD", "{fair}\0queue", "0", "dead"]);
        node.command(["ZADD", "{fair}\0queue-expiry", "99999999999999", "dead"]);
    }
    let guard = fair(&clients[0]).await.expect("served");
    guard.release().await;
}
