//! Many clients incrementing a counter kept outside Redis, read, sleep,
//! write, under the lock: no update is lost and no two critical sections
//! overlap.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use redlock_tests::RedisCluster;
use redlock_tokio::{Redlock, Wait};
use support::{assert_absent, builder};

const CLIENTS: u64 = 4;
const INCREMENTS: u64 = 6;

struct Counter {
    /// Read and written in two steps, with a sleep between: only the lock
    /// keeps increments from being lost.
    value: AtomicU64,
    inside: AtomicBool,
}

impl Counter {
    async fn increment(&self) {
        assert!(
            !self.inside.swap(true, Ordering::SeqCst),
            "two holders in the critical section"
        );
        let read = self.value.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(5)).await;
        self.value.store(read + 1, Ordering::SeqCst);
        self.inside.store(false, Ordering::SeqCst);
    }
}

async fn contenders(cluster: &RedisCluster) -> Vec<Redlock> {
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(
            builder(cluster)
                .wait(Wait::AtMost(Duration::from_secs(20)))
                .retry_delay(Duration::from_millis(2))
                .retry_jitter(Duration::from_millis(20))
                .build()
                .await
                .unwrap(),
        );
    }
    clients
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guards_serialise_a_read_sleep_write_counter() {
    let cluster = RedisCluster::start(3);
    let counter = Arc::new(Counter {
        value: AtomicU64::new(0),
        inside: AtomicBool::new(false),
    });
    let tasks: Vec<_> = contenders(&cluster)
        .await
        .into_iter()
        .map(|redlock| {
            let counter = Arc::clone(&counter);
            tokio::spawn(async move {
                for _ in 0..INCREMENTS {
                    let guard = redlock
                        .lock("counter")
                        .await
                        .expect("lock within the deadline");
                    counter.increment().await;
                    assert!(!guard.is_lost());
                    guard.release().await;
                }
                // A release is decided at certainty; the deletes it did not
                // wait for complete in the background.
                redlock.shutdown().await;
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(counter.value.load(Ordering::SeqCst), CLIENTS * INCREMENTS);
    assert_absent(&cluster, "counter");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_serialises_a_counter_on_five_nodes() {
    let cluster = RedisCluster::start(5);
    let counter = Arc::new(Counter {
        value: AtomicU64::new(0),
        inside: AtomicBool::new(false),
    });
    let tasks: Vec<_> = contenders(&cluster)
        .await
        .into_iter()
        .map(|redlock| {
            let counter = Arc::clone(&counter);
            tokio::spawn(async move {
                for _ in 0..INCREMENTS {
                    redlock
                        .lock("counter5")
                        .run(async |_| {
                            counter.increment().await;
                            Ok(())
                        })
                        .await
                        .expect("lock within the deadline");
                }
                redlock.shutdown().await;
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(counter.value.load(Ordering::SeqCst), CLIENTS * INCREMENTS);
    assert_absent(&cluster, "counter5");
}
