//! First come, first served inside one client: waiters on one lock are
//! served in the order they came, a release wakes the first of them only,
//! and a holder that releases and asks again comes after them. Asserts who
//! was served, in which order; never how fast.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redlock_tests::RedisCluster;
use redlock_tokio::{Redlock, Wait};
use support::{builder, client, eventually, subscribers};

/// Timed retries 10 s apart: within the test only release notices (and the
/// queue that routes them) move the waiters.
async fn patient(cluster: &RedisCluster) -> Redlock {
    builder(cluster)
        .retry_delay(Duration::from_secs(10))
        .retry_jitter(Duration::ZERO)
        .build()
        .await
        .unwrap()
}

/// Spawns waiter `index` on the current-thread runtime and lets it run up
/// to its first wait: waiters join the queue in the order spawned.
async fn spawn_waiter(
    redlock: &Redlock,
    index: usize,
    served: &Arc<Mutex<Vec<usize>>>,
    rounds: usize,
) -> tokio::task::JoinHandle<()> {
    let redlock = redlock.clone();
    let served = Arc::clone(served);
    let task = tokio::spawn(async move {
        for _ in 0..rounds {
            let guard = redlock.lock("fifo").await.expect("served in turn");
            served.lock().unwrap().push(index);
            tokio::time::sleep(Duration::from_millis(5)).await;
            guard.release().await;
        }
    });
    tokio::task::yield_now().await;
    task
}

#[tokio::test(flavor = "current_thread")]
async fn waiters_are_served_in_the_order_they_came() {
    let cluster = RedisCluster::start(3);
    let holder = client(&cluster).await;
    let waiters = patient(&cluster).await;
    let guard = holder
        .lock("fifo")
        .wait(Wait::No)
        .await
        .expect("a free lock");
    let served = Arc::new(Mutex::new(Vec::new()));

    // The first waiter's attempt finds the lock held; it listens.
    let mut tasks = vec![spawn_waiter(&waiters, 0, &served, 1).await];
    eventually("the first waiter listens", Duration::from_secs(8), || {
        cluster
            .nodes()
            .iter()
            .all(|node| subscribers(node, "fifo") >= 1)
    })
    .await;
    // The others queue behind it without attempting.
    for index in 1..6 {
        tasks.push(spawn_waiter(&waiters, index, &served, 1).await);
    }
    guard.release().await;
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(*served.lock().unwrap(), vec![0, 1, 2, 3, 4, 5]);
}

#[tokio::test(flavor = "current_thread")]
async fn a_holder_that_asks_again_comes_after_the_waiters() {
    let cluster = RedisCluster::start(3);
    let holder = client(&cluster).await;
    let waiters = patient(&cluster).await;
    let guard = holder
        .lock("fifo")
        .wait(Wait::No)
        .await
        .expect("a free lock");
    let served = Arc::new(Mutex::new(Vec::new()));

    let mut tasks = vec![spawn_waiter(&waiters, 0, &served, 3).await];
    eventually("the first waiter listens", Duration::from_secs(8), || {
        cluster
            .nodes()
            .iter()
            .all(|node| subscribers(node, "fifo") >= 1)
    })
    .await;
    for index in 1..4 {
        tasks.push(spawn_waiter(&waiters, index, &served, 3).await);
    }
    guard.release().await;
    for task in tasks {
        task.await.unwrap();
    }
    // Each asks again at once after its release, and takes its turn last.
    assert_eq!(
        *served.lock().unwrap(),
        vec![0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3]
    );
}
