//! Redis and Valkey masters in one quorum: the core picks each master's
//! command from what that master reported at connect, so one lock goes out
//! as a plain `SET NX PX GET` to both, and is withdrawn with the release
//! script on Redis 7 and with `DELIFEQ` on Valkey 9, with the same votes.
//!
//! Needs both servers: `redis-server` on `PATH` (or `REDLOCK_REDIS_BIN`) and
//! Valkey at `REDLOCK_VALKEY_BIN` or `target/valkey/bin/valkey-server`
//! (`make deps-valkey`); says so and passes without them.

mod support;

use std::path::PathBuf;
use std::time::Duration;

use redlock_tests::{NodeOptions, RedisCluster, RedisNode};
use redlock_tokio::{Redlock, Wait};
use support::{NODE_TIMEOUT, assert_absent, eventually, init_tracing};

/// The two binaries, or why the test cannot run.
fn binaries() -> Result<(PathBuf, PathBuf), String> {
    let redis = std::env::var_os("REDLOCK_REDIS_BIN")
        .map_or_else(|| PathBuf::from("redis-server"), PathBuf::from);
    let valkey = std::env::var_os("REDLOCK_VALKEY_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/valkey/bin/valkey-server"),
        PathBuf::from,
    );
    if !valkey.exists() {
        return Err(format!("no Valkey at {}", valkey.display()));
    }
    let runs = |bin: &PathBuf| {
        std::process::Command::new(bin)
            .arg("--version")
            .output()
            .is_ok_and(|out| out.status.success())
    };
    if !runs(&redis) {
        return Err(format!("{} does not run", redis.display()));
    }
    Ok((redis, valkey))
}

/// Node 0 Redis, nodes 1 and 2 Valkey.
fn mixed() -> Option<RedisCluster> {
    let (redis, valkey) = match binaries() {
        Ok(bins) => bins,
        Err(why) => {
            eprintln!("skipped: {why}");
            return None;
        }
    };
    let start = |bin: &PathBuf| {
        RedisNode::start_with(NodeOptions {
            bin: Some(bin.clone()),
            ..NodeOptions::default()
        })
    };
    Some(RedisCluster::from_nodes(vec![
        start(&redis),
        start(&valkey),
        start(&valkey),
    ]))
}

fn calls(node: &RedisNode, command: &str) -> u64 {
    node.commandstats().get(command).copied().unwrap_or(0)
}

fn is_valkey(node: &RedisNode) -> bool {
    let redis::Value::BulkString(info) = node.command(["INFO", "server"]) else {
        panic!("INFO answered something else");
    };
    String::from_utf8_lossy(&info).contains("server_name:valkey")
}

async fn client(cluster: &RedisCluster, notices: bool) -> Redlock {
    init_tracing();
    Redlock::builder(cluster.urls())
        .node_timeout(NODE_TIMEOUT)
        .release_notices(notices)
        .build()
        .await
        .expect("client builds")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_master_gets_the_command_its_server_has() {
    let Some(cluster) = mixed() else { return };
    assert!(!is_valkey(cluster.node(0)) && is_valkey(cluster.node(1)));
    let redlock = client(&cluster, false).await;
    for node in cluster.nodes() {
        node.reset_stats();
    }
    let guard = redlock.lock("mixed").wait(Wait::No).await.unwrap();
    for node in cluster.nodes() {
        assert_eq!(node.get("mixed").as_deref(), Some(guard.value().as_bytes()));
    }
    let report = guard.release().every_node().await;
    assert_eq!(report.released(), 3);
    assert_absent(&cluster, "mixed");
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Redis 7.0: SET for the acquire, the release script (told not to
    // publish) for the quiet release; Valkey 9: SET and DELIFEQ.
    assert_eq!(calls(cluster.node(0), "set"), 1);
    assert_eq!(calls(cluster.node(0), "evalsha"), 1);
    assert_eq!(calls(cluster.node(0), "publish"), 0);
    for node in &cluster.nodes()[1..] {
        assert_eq!(calls(node, "set"), 1);
        assert_eq!(calls(node, "delifeq"), 1);
        assert_eq!(calls(node, "evalsha"), 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_held_on_a_redis_and_a_valkey_master_is_refused_and_left_alone() {
    let Some(cluster) = mixed() else { return };
    for node in &cluster.nodes()[..2] {
        node.set("taken", "someone-else");
    }
    let redlock = client(&cluster, true).await;
    let error = redlock.lock("taken").wait(Wait::No).await.unwrap_err();
    assert!(error.is_held_by_other(), "{error}");
    // The refusal comes from the first two masters: the attempt on the
    // third, and its withdraw after it, may still be on their way. With
    // notices on, a withdraw is the script: a waiter may have marked the
    // value it withdraws (`redlock_core::waited`).
    eventually(
        "the free master is withdrawn",
        Duration::from_secs(5),
        || calls(cluster.node(2), "evalsha") == 1,
    )
    .await;
    assert!(!cluster.node(2).exists("taken"));
    for node in &cluster.nodes()[..2] {
        assert_eq!(node.get("taken").as_deref(), Some(&b"someone-else"[..]));
    }
    assert_eq!(calls(cluster.node(2), "publish"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_racing_on_mixed_masters_never_hold_at_once() {
    let Some(cluster) = mixed() else { return };
    let a = client(&cluster, true).await;
    let b = client(&cluster, true).await;
    for round in 0..30 {
        let key = format!("race-{round}");
        let (x, y) = tokio::join!(a.lock(&key).wait(Wait::No), b.lock(&key).wait(Wait::No));
        assert!(
            !(x.is_ok() && y.is_ok()),
            "round {round}: both clients hold the lock"
        );
        for guard in [x, y].into_iter().flatten() {
            guard.release().every_node().await;
        }
        // The loser's withdraws may still be on their way.
        eventually("the key is gone everywhere", Duration::from_secs(5), || {
            cluster.nodes().iter().all(|node| !node.exists(&key))
        })
        .await;
    }
}
