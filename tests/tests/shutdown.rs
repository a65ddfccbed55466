//! A guard alive or dropped on the way out of `main` (an early `?`, a panic,
//! a task the runtime drops as it shuts down) leaves no key behind, with or
//! without `Redlock::shutdown`, on the current-thread and the multi-thread
//! runtime alike; and `shutdown` awaits everything the client still has to
//! deliver, the resends to a master that was down included.

mod support;

use std::process::Command;
use std::time::Duration;

use redlock_tests::{NodeOptions, RedisCluster};
use support::{assert_absent, builder, init_tracing};

/// Runs the `exit-early` program: lock `key`, fail, return from `main`.
fn exit_early(cluster: &RedisCluster, flavor: &str, mode: &str, key: &str) {
    let output = Command::new(env!("CARGO_BIN_EXE_exit-early"))
        .args([flavor, mode, key])
        .args(cluster.urls())
        .output()
        .expect("the exit-early program runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    // It fails on purpose, after it held the lock.
    if mode == "panic" {
        assert_eq!(output.status.code(), Some(101), "{stderr}");
        assert!(stderr.contains("the work panicked"), "{stderr}");
    } else {
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("the work failed"), "{stderr}");
    }
}

#[test]
fn no_key_is_left_when_main_returns_on_either_runtime() {
    init_tracing();
    let cluster = RedisCluster::start(3);
    for flavor in ["current", "multi"] {
        for mode in ["shutdown", "no-shutdown", "panic", "keep"] {
            // A few times each: the runtime's shutdown races the release.
            for run in 0..3 {
                let key = format!("exit-{flavor}-{mode}-{run}");
                exit_early(&cluster, flavor, mode, &key);
                // The process is gone: whatever it did not send is lost for good.
                assert_absent(&cluster, &key);
            }
        }
    }
}

/// Releases that met a master down are sent again once it is back, and
/// `shutdown` waits for them: a master killed while guards are dropped comes
/// back with its keys (persistence on), and once `shutdown` returns no task
/// of the client is left but its connections and its drain, no key of ours
/// is on any master, and once the client is dropped no task of it at all.
///
/// On a current-thread runtime of its own, so that the count of tasks is
/// exact when `shutdown` returns (a task's end and its count are one step on
/// that thread).
#[test]
fn shutdown_awaits_the_resends_to_a_master_that_was_down() {
    let options = NodeOptions {
        extra_args: ["--appendonly", "yes", "--appendfsync", "always"]
            .map(String::from)
            .to_vec(),
        ..NodeOptions::default()
    };
    let cluster = RedisCluster::start_with(3, &options);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let redlock = runtime.block_on(async {
        let redlock = builder(&cluster)
            // Longer than the test: only a release deletes the keys.
            .ttl(Duration::from_secs(60))
            // Pub/sub connections reconnect on their own schedule.
            .release_notices(false)
            .build()
            .await
            .expect("client builds");
        // Warm up: the drain runs, as it does at the end.
        redlock.lock("warm").await.expect("warm").release().await;
        redlock.shutdown().await;
        redlock
    });
    let idle = runtime.metrics().num_alive_tasks();

    let keys: Vec<String> = (0..8).map(|i| format!("resend-{i}")).collect();
    let guards = runtime.block_on(async {
        let mut guards = Vec::new();
        for key in &keys {
            guards.push(redlock.lock(key).await.expect("every master is up"));
        }
        guards
    });
    cluster.node(0).kill();
    {
        let _inside = runtime.enter();
        // Released in the background: master 0's requests meet its
        // connection broken, and wait for the next one.
        drop(guards);
    }
    runtime.block_on(async {
        for key in &keys {
            while cluster.nodes()[1..].iter().any(|node| node.exists(key)) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        // Down for a while: the reconnection backs off.
        tokio::time::sleep(Duration::from_secs(1)).await;
    });
    cluster.node(0).restart_keeping_data();
    let back = keys
        .iter()
        .filter(|key| cluster.node(0).exists(key))
        .count();
    println!("master 0 back with {back} of {} keys", keys.len());

    runtime.block_on(redlock.shutdown());
    let left = runtime.metrics().num_alive_tasks();
    let on_masters: Vec<(usize, String)> = cluster
        .nodes()
        .iter()
        .enumerate()
        .flat_map(|(i, node)| {
            node.keys("*")
                .into_iter()
                .map(move |key| (i, String::from_utf8_lossy(&key).into_owned()))
        })
        .collect();
    // The client's long-lived tasks (its connections, and its drain if an
    // operation ever left a request in flight: the warm-up's release may
    // or may not have) end once the client is dropped; nothing else of it
    // may be left.
    drop(redlock);
    let dropped = runtime.block_on(async {
        let started = tokio::time::Instant::now();
        while tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks()
            > 0
            && started.elapsed() < Duration::from_secs(10)
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks()
    });
    println!(
        "tasks idle {idle}, after shutdown {left}, once the client is dropped {dropped}; \
         keys left {on_masters:?}"
    );
    // Exact, but for the drain: idle counts it only if the warm-up's
    // release left a master unanswered when it decided (then one task per
    // connection and the drain), and the drain runs now.
    let connections = cluster.nodes().len();
    assert!(
        left == idle || (idle == connections && left == idle + 1),
        "tasks of the client left after shutdown: idle {idle}, left {left}"
    );
    assert_eq!(dropped, 0, "tasks of the client left once it is dropped");
    assert!(
        on_masters.is_empty(),
        "keys left after shutdown: {on_masters:?}"
    );
}
