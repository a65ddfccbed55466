//! Clients and guards used across Tokio runtimes, or dropped outside one.

mod support;

use std::time::Duration;

use redlock_tests::RedisCluster;
use redlock_tokio::Wait;
use support::{assert_absent, builder, client, eventually};

#[test]
fn a_client_outlives_the_runtime_that_built_it() {
    let cluster = RedisCluster::start(3);
    let first = tokio::runtime::Runtime::new().unwrap();
    let redlock = first.block_on(client(&cluster));
    first.block_on(async {
        redlock
            .lock("rt")
            .await
            .unwrap()
            .release()
            .every_node()
            .await
    });
    drop(first);

    let second = tokio::runtime::Runtime::new().unwrap();
    second.block_on(async {
        // The connections ended with the first runtime: the first request
        // finds out, and they are made again on this one.
        if let Ok(guard) = redlock.lock("rt").wait(Wait::No).await {
            guard.release().every_node().await;
        }
        eventually(
            "reconnected on the second runtime",
            Duration::from_secs(5),
            || redlock.connected_nodes() == 3,
        )
        .await;
        let guard = redlock.lock("rt").wait(Wait::No).await.unwrap();
        assert_eq!(guard.release().every_node().await.released(), 3);
    });
}

#[test]
fn a_guard_dropped_outside_a_runtime_is_released_before_drop_returns() {
    let cluster = RedisCluster::start(3);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (redlock, guard) = runtime.block_on(async {
        let redlock = builder(&cluster)
            .ttl(Duration::from_secs(30))
            .build()
            .await
            .unwrap();
        let guard = redlock.lock("orphan").await.unwrap();
        (redlock, guard)
    });
    // No runtime here: the release goes out on the client's runtime (after
    // the acquire's request to a master that had not answered yet, if
    // any: a release on a connection of its own could overtake it and
    // leave the key there), or on blocking connections, and has been
    // answered when `drop` returns.
    drop(guard);
    assert_absent(&cluster, "orphan");
    runtime.block_on(async {
        redlock
            .lock("orphan")
            .wait(Wait::No)
            .await
            .unwrap()
            .release()
            .every_node()
            .await
    });
}
