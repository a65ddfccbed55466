//! A guard alive or dropped on the way out of `main` (an early `?`, a panic,
//! a task the runtime drops as it shuts down) leaves no key behind, with or
//! without `Redlock::shutdown`, on the current-thread and the multi-thread
//! runtime alike.

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
