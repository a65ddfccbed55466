//! What goes over the wire, counted by each node's `INFO commandstats`: one
//! command per node per operation in steady state (a plain `SET NX PX GET`
//! per acquire where the server has it, Redis >= 7 and Valkey; `DELIFEQ`
//! per release on Valkey >= 9, notices on or off, as the safe floor sends:
//! nobody waiting, nothing follows it; `EVALSHA` otherwise), scripts loaded
//! once per connection, and `NOSCRIPT` recovered with one repeat in full.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use redlock_tests::{RedisCluster, RedisNode};
use redlock_tokio::Wait;
use support::{
    assert_absent, builder, client, eventually, native_acquire, native_delifeq, native_extend,
};

fn calls(node: &RedisNode, command: &str) -> u64 {
    node.commandstats().get(command).copied().unwrap_or(0)
}

/// `EVALSHA` calls of one exclusive release with notices on, per node:
/// none where it is `DELIFEQ` (Valkey >= 9).
fn release_evalsha() -> u64 {
    u64::from(!native_delifeq())
}

/// The command one exclusive acquire sends each node.
fn acquire_command() -> &'static str {
    if native_acquire() { "set" } else { "evalsha" }
}

/// Every command counted on a node but the test's own `INFO` and `CONFIG
/// RESETSTAT`; commands run inside scripts count too (`get`, `set`, `del`,
/// `publish`), so a plain command shows up alone.
fn sent(node: &RedisNode) -> BTreeMap<String, u64> {
    node.commandstats()
        .into_iter()
        .filter(|(name, _)| name != "info" && name != "config|resetstat")
        .collect()
}

/// Script-related commands counted on a node (`evalsha`, `eval`, `script|*`).
fn script_calls(node: &RedisNode) -> BTreeMap<String, u64> {
    node.commandstats()
        .into_iter()
        .filter(|(name, _)| name.starts_with("eval") || name.starts_with("script"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_command_per_node_per_operation_in_steady_state() {
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
    redlock
        .lock("warm")
        .await
        .unwrap()
        .release()
        .every_node()
        .await;
    // Let the slow node of the warm-up finish before counting.
    tokio::time::sleep(Duration::from_millis(100)).await;
    for node in cluster.nodes() {
        node.reset_stats();
    }

    const ROUNDS: u64 = 5;
    let mut guards = Vec::new();
    for i in 0..ROUNDS {
        guards.push(
            redlock
                .lock(format!("stat-{i}"))
                .wait(Wait::No)
                .await
                .unwrap(),
        );
    }
    eventually(
        "every node saw every acquire",
        Duration::from_secs(8),
        || {
            cluster
                .nodes()
                .iter()
                .all(|node| calls(node, acquire_command()) == ROUNDS)
        },
    )
    .await;
    if native_acquire() {
        // One plain SET per node per acquire, and nothing else.
        for node in cluster.nodes() {
            let expected = BTreeMap::from([("set".to_owned(), ROUNDS)]);
            assert_eq!(sent(node), expected, "{}", node.port());
        }
    }
    for guard in guards {
        let report = guard.release().every_node().await;
        assert_eq!(report.released(), 3);
    }
    // A release with notices on publishes only when it deleted our value
    // and a waiter marked itself (nobody waits here). Where the server has
    // `DELIFEQ` it is that alone: nobody marked our value
    // (`redlock_core::waited`); elsewhere the release script, which reads
    // the mark with one `GET` (a second to the lock key).
    eventually(
        "every node saw every release",
        Duration::from_secs(8),
        || {
            let release = if native_delifeq() {
                "delifeq"
            } else {
                "evalsha"
            };
            let before = if native_acquire() || native_delifeq() {
                0
            } else {
                ROUNDS
            };
            cluster
                .nodes()
                .iter()
                .all(|node| calls(node, release) == before + ROUNDS)
        },
    )
    .await;
    if native_delifeq() {
        let mut release_commands = 0;
        for node in cluster.nodes() {
            let expected =
                BTreeMap::from([("delifeq".to_owned(), ROUNDS), ("set".to_owned(), ROUNDS)]);
            let stats = sent(node);
            assert_eq!(stats, expected, "{}", node.port());
            release_commands += stats.values().sum::<u64>() - ROUNDS;
        }
        // The protocol, not a timing: as the safe floor's release.
        let per_release = release_commands as f64 / (ROUNDS * cluster.nodes().len() as u64) as f64;
        println!("commands_per_release={per_release:.2} (per node, nobody waiting)");
        assert_eq!(per_release, 1.0);
    } else {
        let scripted = if native_acquire() { ROUNDS } else { 2 * ROUNDS };
        // The acquire script reads the key too.
        let acquire_gets = if native_acquire() { 0 } else { ROUNDS };
        for node in cluster.nodes() {
            let expected = BTreeMap::from([("evalsha".to_owned(), scripted)]);
            assert_eq!(script_calls(node), expected, "{}", node.port());
            assert_eq!(calls(node, "publish"), 0, "{}", node.port());
            assert_eq!(calls(node, "exists"), 0, "{}", node.port());
            let gets = calls(node, "get");
            assert_eq!(gets, acquire_gets + 2 * ROUNDS, "{}", node.port());
        }
    }
    for i in 0..ROUNDS {
        assert_absent(&cluster, format!("stat-{i}"));
    }

    // An extension is one command per node too: `SET ... IFEQ ... GET`
    // where the server has it (Valkey >= 9), else EVALSHA (as the release
    // is where it is not `DELIFEQ`).
    for node in cluster.nodes() {
        node.reset_stats();
    }
    let mut guard = redlock.lock("extended").wait(Wait::No).await.unwrap();
    guard.extend(Duration::from_secs(20)).await.unwrap();
    guard.release().every_node().await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let plain = u64::from(native_acquire()) + u64::from(native_extend());
    for node in cluster.nodes() {
        let scripted = 2 - plain + release_evalsha();
        assert_eq!(calls(node, "evalsha"), scripted, "{}", node.port());
        assert_eq!(calls(node, "set"), plain, "{}", node.port());
    }
}

/// With notices off a release is a withdraw: `DELIFEQ` where the server has
/// it, the release script (told not to publish) elsewhere; and a failed
/// attempt's clean-up is one withdraw per node either way, with no notice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quiet_releases_and_withdraws_are_one_command_and_publish_nothing() {
    let cluster = RedisCluster::start(3);
    let redlock = builder(&cluster)
        .release_notices(false)
        .build()
        .await
        .unwrap();
    redlock
        .lock("warm")
        .await
        .unwrap()
        .release()
        .every_node()
        .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    for node in cluster.nodes() {
        node.reset_stats();
    }
    let release = if native_delifeq() {
        "delifeq"
    } else {
        "evalsha"
    };

    const ROUNDS: u64 = 3;
    for i in 0..ROUNDS {
        let guard = redlock
            .lock(format!("quiet-{i}"))
            .wait(Wait::No)
            .await
            .unwrap();
        assert_eq!(guard.release().every_node().await.released(), 3);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    for node in cluster.nodes() {
        let stats = sent(node);
        assert_eq!(stats.get(acquire_command()), Some(&ROUNDS), "{stats:?}");
        assert_eq!(stats.get(release), Some(&ROUNDS), "{stats:?}");
        assert_eq!(stats.get("publish"), None, "{stats:?}");
        if native_delifeq() {
            let expected =
                BTreeMap::from([("delifeq".to_owned(), ROUNDS), ("set".to_owned(), ROUNDS)]);
            assert_eq!(stats, expected, "{}", node.port());
        }
        node.reset_stats();
    }

    // Held by another value on two of three nodes: the attempt fails and is
    // withdrawn everywhere, without a notice, with the notices client too.
    // Its withdraw is the script: where waiters listen, one may have marked
    // the value it withdraws, which `DELIFEQ` would leave
    // (`redlock_core::waited`).
    for node in &cluster.nodes()[..2] {
        node.set("taken", "someone-else");
    }
    let noisy = client(&cluster).await;
    for node in cluster.nodes() {
        node.reset_stats();
    }
    let error = noisy.lock("taken").wait(Wait::No).await.unwrap_err();
    assert!(error.is_held_by_other(), "{error}");
    eventually(
        "every node saw the withdraw",
        Duration::from_secs(8),
        || {
            cluster
                .nodes()
                .iter()
                .all(|node| calls(node, "evalsha") == 1)
        },
    )
    .await;
    for node in cluster.nodes() {
        assert_eq!(calls(node, "publish"), 0, "{}", node.port());
        assert_eq!(calls(node, acquire_command()), 1, "{}", node.port());
    }
    for node in &cluster.nodes()[..2] {
        assert_eq!(node.get("taken").as_deref(), Some(&b"someone-else"[..]));
    }
    assert!(!cluster.node(2).exists("taken"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noscript_is_recovered_with_one_repeat_in_full() {
    let cluster = RedisCluster::start(3);
    let redlock = client(&cluster).await;
    redlock
        .lock("warm")
        .await
        .unwrap()
        .release()
        .every_node()
        .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The script cache of node 0 is gone, as after a restart.
    cluster.node(0).command(["SCRIPT", "FLUSH"]);
    for node in cluster.nodes() {
        node.reset_stats();
    }

    let guard = redlock.lock("flushed").wait(Wait::No).await.unwrap();
    eventually("node 0 holds the lock", Duration::from_secs(8), || {
        cluster.node(0).get("flushed").as_deref() == Some(guard.value().as_bytes())
    })
    .await;
    let first = script_calls(cluster.node(0));
    // A plain SET needs no script; a scripted acquire is EVALSHA
    // (NOSCRIPT), then the same in full: EVAL, which caches the script.
    let scripted = u64::from(!native_acquire());
    let count = |calls: &BTreeMap<String, u64>, name: &str| calls.get(name).copied().unwrap_or(0);
    assert_eq!(count(&first, "evalsha"), scripted, "{first:?}");
    assert_eq!(count(&first, "eval"), scripted, "{first:?}");
    assert_eq!(count(&first, "script|load"), 0, "{first:?}");
    let report = guard.release().every_node().await;
    assert_eq!(report.released(), 3);
    // A scripted release found its script gone too, and went in full.
    let after = script_calls(cluster.node(0));
    assert_eq!(
        count(&after, "evalsha"),
        scripted + release_evalsha(),
        "{after:?}"
    );
    assert_eq!(
        count(&after, "eval"),
        scripted + release_evalsha(),
        "{after:?}"
    );
    assert_eq!(count(&after, "script|load"), 0, "{after:?}");
    let per_node = u64::from(!native_acquire()) + release_evalsha();
    for node in &cluster.nodes()[1..] {
        let calls = script_calls(node).get("evalsha").copied().unwrap_or(0);
        assert_eq!(calls, per_node);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnection_loads_the_scripts_again() {
    let cluster = RedisCluster::start(3);
    let redlock = support::builder(&cluster)
        .ttl(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    redlock
        .lock("warm")
        .await
        .unwrap()
        .release()
        .every_node()
        .await;
    cluster.node(1).restart();
    // The first request finds the connection broken; the lock holds on two.
    redlock
        .lock("after")
        .wait(Wait::No)
        .await
        .unwrap()
        .release()
        .every_node()
        .await;
    eventually("node 1 is reconnected", Duration::from_secs(5), || {
        redlock.connected_nodes() == 3
    })
    .await;
    // A restarted server votes again one TTL after the client saw it back.
    support::until_counted(&redlock, 1, Duration::from_secs(8)).await;
    let loaded = script_calls(cluster.node(1));
    assert_eq!(
        loaded.get("script|load").map(|&n| n as usize),
        Some(redlock_core::scripts::ALL.len()),
        "{loaded:?}"
    );
    cluster.node(1).reset_stats();
    let guard = redlock.lock("after").wait(Wait::No).await.unwrap();
    eventually("node 1 holds the lock", Duration::from_secs(8), || {
        cluster.node(1).get("after").as_deref() == Some(guard.value().as_bytes())
    })
    .await;
    guard.release().every_node().await;
    let steady = script_calls(cluster.node(1));
    let scripted = u64::from(!native_acquire()) + release_evalsha();
    assert_eq!(steady.get("evalsha").copied().unwrap_or(0), scripted);
    assert_eq!(steady.get("script|load"), None, "{steady:?}");
    // The facts were read again on the new connection: the acquire went
    // out as the same plain command as before the restart.
    assert_eq!(calls(cluster.node(1), acquire_command()), 1);
}

/// A node's facts go with its connection: a server that would not say what
/// it is (`INFO` refused) gets scripts, and once it restarts as one that
/// does, the new connection reads its facts again and acquires go out as
/// plain commands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_is_detected_again_on_reconnect() {
    if !native_acquire() {
        return;
    }
    let cluster = RedisCluster::start(3);
    // The default user, which the client and the harness use, may not run
    // INFO until the restart resets it; `admin` reads the counts meanwhile.
    cluster
        .node(1)
        .command(["ACL", "SETUSER", "admin", "on", ">pw", "~*", "&*", "+@all"]);
    cluster
        .node(1)
        .command(["ACL", "SETUSER", "default", "-info"]);
    let admin = redis::Client::open(format!(
        "redis://admin:pw@127.0.0.1:{}",
        cluster.node(1).port()
    ))
    .unwrap();
    let redlock = client(&cluster).await;
    for node in cluster.nodes() {
        node.reset_stats();
    }
    redlock
        .lock("before")
        .wait(Wait::No)
        .await
        .unwrap()
        .release()
        .every_node()
        .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(calls(cluster.node(0), "set"), 1);
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut admin.get_connection().unwrap())
        .unwrap();
    assert!(stats.contains("cmdstat_evalsha:calls=2,"), "{stats}");

    cluster.node(1).restart();
    redlock
        .lock("probe")
        .wait(Wait::No)
        .await
        .unwrap()
        .release()
        .every_node()
        .await;
    eventually("node 1 is reconnected", Duration::from_secs(5), || {
        redlock.connected_nodes() == 3
    })
    .await;
    // The probe's release may have met node 1's broken connection: it is
    // sent again on the new one (a `DELIFEQ` that deletes nothing, then the
    // script that publishes) and must not land in the counts below.
    redlock.settled().await;
    cluster.node(1).reset_stats();
    redlock
        .lock("after")
        .wait(Wait::No)
        .await
        .unwrap()
        .release()
        .every_node()
        .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(calls(cluster.node(1), "set"), 1);
    assert_eq!(calls(cluster.node(1), "evalsha"), release_evalsha());
}

/// `Builder::native_commands(false)`: scripts only, on any server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switched_off_every_operation_is_one_evalsha() {
    let cluster = RedisCluster::start(3);
    let redlock = builder(&cluster)
        .native_commands(false)
        .release_notices(false)
        .build()
        .await
        .unwrap();
    for node in cluster.nodes() {
        node.reset_stats();
    }
    redlock
        .lock("scripted")
        .wait(Wait::No)
        .await
        .unwrap()
        .release()
        .every_node()
        .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    for node in cluster.nodes() {
        let expected = BTreeMap::from([("evalsha".to_owned(), 2)]);
        assert_eq!(script_calls(node), expected, "{}", node.port());
        assert_eq!(calls(node, "delifeq"), 0);
    }
}
