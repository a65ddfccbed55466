//! A guard dropped on the way out of `main` (an early `?`): with
//! `Redlock::shutdown` before `main` returns, no key is left behind, on the
//! current-thread and the multi-thread runtime alike.

mod support;

use std::process::Command;

use redlock_tests::RedisCluster;
use support::{assert_absent, init_tracing};

/// Runs the `exit-early` program: lock `key`, fail, return from `main`.
fn exit_early(cluster: &RedisCluster, flavor: &str, mode: &str, key: &str) {
    let output = Command::new(env!("CARGO_BIN_EXE_exit-early"))
        .args([flavor, mode, key])
        .args(cluster.urls())
        .output()
        .expect("the exit-early program runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    // It fails on purpose, after it held the lock.
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("the work failed"), "{stderr}");
}

#[test]
fn shutdown_before_main_returns_leaves_no_key_on_either_runtime() {
    init_tracing();
    let cluster = RedisCluster::start(3);
    for flavor in ["current", "multi"] {
        let key = format!("exit-{flavor}");
        exit_early(&cluster, flavor, "shutdown", &key);
        // The process is gone: whatever it did not send is lost for good.
        assert_absent(&cluster, &key);
    }
}

#[test]
fn without_shutdown_a_current_thread_runtime_drops_the_release() {
    init_tracing();
    let cluster = RedisCluster::start(3);
    exit_early(&cluster, "current", "no-shutdown", "exit-abrupt");
    // The limit the docs state: the release task was spawned but never
    // ran, since the runtime went away first; the key stays until its TTL.
    for node in cluster.nodes() {
        let pttl = node.pttl("exit-abrupt");
        assert!((1..=10_000).contains(&pttl), "{node}: {pttl}");
    }
}
