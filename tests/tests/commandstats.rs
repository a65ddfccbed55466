//! What goes over the wire, counted by each node's `INFO commandstats`: one
//! `EVALSHA` per node per operation in steady state, scripts loaded once
//! per connection, and `NOSCRIPT` recovered with one load and one retry.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use redlock_tests::{RedisCluster, RedisNode};
use support::{assert_absent, client, eventually};

fn calls(node: &RedisNode, command: &str) -> u64 {
    node.commandstats().get(command).copied().unwrap_or(0)
}

/// Script-related commands counted on a node (`evalsha`, `eval`, `script|*`).
fn script_calls(node: &RedisNode) -> BTreeMap<String, u64> {
    node.commandstats()
        .into_iter()
        .filter(|(name, _)| name.starts_with("eval") || name.starts_with("script"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_evalsha_per_node_per_operation_in_steady_state() {
    let cluster = RedisCluster::start(3);
    let redlock = client(&cluster).await;
    // The connection loaded the scripts once each.
    for node in cluster.nodes() {
        assert_eq!(
            calls(node, "script|load") as usize,
            redlock_core::scripts::ALL.len(),
            "{:?}",
            node.commandstats()
        );
    }
    redlock.lock("warm").await.unwrap().release().await;
    // Let the slow node of the warm-up finish before counting.
    tokio::time::sleep(Duration::from_millis(100)).await;
    for node in cluster.nodes() {
        node.reset_stats();
    }

    const ROUNDS: u64 = 5;
    let mut guards = Vec::new();
    for i in 0..ROUNDS {
        guards.push(redlock.try_lock(format!("stat-{i}")).await.unwrap());
    }
    eventually(
        "every node saw every acquire",
        Duration::from_secs(8),
        || {
            cluster
                .nodes()
                .iter()
                .all(|node| calls(node, "evalsha") == ROUNDS)
        },
    )
    .await;
    for guard in guards {
        let report = guard.release().await;
        assert_eq!(report.released(), 3);
    }
    for node in cluster.nodes() {
        let expected = BTreeMap::from([("evalsha".to_owned(), 2 * ROUNDS)]);
        assert_eq!(script_calls(node), expected, "{}", node.port());
    }
    for i in 0..ROUNDS {
        assert_absent(&cluster, format!("stat-{i}"));
    }

    // An extension is one EVALSHA per node too.
    for node in cluster.nodes() {
        node.reset_stats();
    }
    let mut guard = redlock.try_lock("extended").await.unwrap();
    guard.extend(Duration::from_secs(20)).await.unwrap();
    guard.release().await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    for node in cluster.nodes() {
        let expected = BTreeMap::from([("evalsha".to_owned(), 3)]);
        assert_eq!(script_calls(node), expected, "{}", node.port());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noscript_is_recovered_with_one_load_and_one_retry() {
    let cluster = RedisCluster::start(3);
    let redlock = client(&cluster).await;
    redlock.lock("warm").await.unwrap().release().await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The script cache of node 0 is gone, as after a restart.
    cluster.node(0).command(["SCRIPT", "FLUSH"]);
    for node in cluster.nodes() {
        node.reset_stats();
    }

    let guard = redlock.try_lock("flushed").await.unwrap();
    eventually("node 0 holds the lock", Duration::from_secs(8), || {
        cluster.node(0).get("flushed").as_deref() == Some(guard.value().as_bytes())
    })
    .await;
    let first = script_calls(cluster.node(0));
    // EVALSHA (NOSCRIPT), SCRIPT LOAD, EVALSHA.
    assert_eq!(first.get("evalsha"), Some(&2), "{first:?}");
    assert_eq!(first.get("script|load"), Some(&1), "{first:?}");
    let report = guard.release().await;
    assert_eq!(report.released(), 3);
    // The release found the acquire script loaded but not the release one.
    let after = script_calls(cluster.node(0));
    assert_eq!(after.get("script|load"), Some(&2), "{after:?}");
    assert_eq!(after.get("evalsha"), Some(&4), "{after:?}");
    for node in &cluster.nodes()[1..] {
        let expected = BTreeMap::from([("evalsha".to_owned(), 2)]);
        assert_eq!(script_calls(node), expected);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnection_loads_the_scripts_again() {
    let cluster = RedisCluster::start(3);
    let redlock = client(&cluster).await;
    redlock.lock("warm").await.unwrap().release().await;
    cluster.node(1).restart();
    // The first request finds the connection broken; the lock holds on two.
    redlock.try_lock("after").await.unwrap().release().await;
    eventually("node 1 is reconnected", Duration::from_secs(5), || {
        redlock.connected_nodes() == 3
    })
    .await;
    let loaded = script_calls(cluster.node(1));
    assert_eq!(
        loaded.get("script|load").map(|&n| n as usize),
        Some(redlock_core::scripts::ALL.len()),
        "{loaded:?}"
    );
    cluster.node(1).reset_stats();
    let guard = redlock.try_lock("after").await.unwrap();
    eventually("node 1 holds the lock", Duration::from_secs(8), || {
        cluster.node(1).get("after").as_deref() == Some(guard.value().as_bytes())
    })
    .await;
    guard.release().await;
    let steady = script_calls(cluster.node(1));
    assert_eq!(steady, BTreeMap::from([("evalsha".to_owned(), 2)]));
}
