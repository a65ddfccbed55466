//! Nodes killed, paused and restarted: a minority costs at most one per-node
//! timeout, a majority gives a quick `NoQuorum` naming the nodes, and nodes
//! that come back are reconnected in the background.

mod support;

use std::time::Duration;

use redlock_core::{AcquireError, NodeErrorKind, NodeVote};
use redlock_tests::RedisCluster;
use redlock_tokio::{Error, Wait};
use support::{NODE_TIMEOUT, QUICK, assert_absent, builder, client, eventually, name, timed};

/// Lock, extend and release with the nodes in `down` unavailable.
async fn minority_down(cluster: &RedisCluster, down: &[usize], pause: bool) {
    let redlock = client(cluster).await;
    // Warm up: every connection is up and the scripts are loaded.
    redlock.lock("warm").await.unwrap().release().await;
    for &i in down {
        if pause {
            cluster.node(i).pause();
        } else {
            cluster.node(i).kill();
        }
    }

    let (guard, elapsed) = timed(redlock.lock("minority").wait(Wait::No)).await;
    let mut guard = guard.expect("a majority is up");
    assert!(elapsed < QUICK, "acquire took {elapsed:?}");
    let granted = cluster.len() - down.len();
    assert_eq!(guard.votes().granted(), granted, "{}", guard.votes());

    let validity = guard.extend(Duration::from_secs(20)).await.unwrap();
    assert!(validity > Duration::from_secs(19));

    let (report, elapsed) = timed(guard.release()).await;
    assert!(elapsed < QUICK, "release took {elapsed:?}");
    assert!(report.frees_lock(), "{report}");
    for (i, vote) in report.votes().votes().iter().enumerate() {
        match (down.contains(&i), vote) {
            // Decided by the nodes that answer: a paused node is not waited
            // for (a release that waited out its timeout says "timed out"),
            // nor a killed one whose refused connection came after the
            // quorum's answers (a busy machine).
            (true, NodeVote::Pending) => {}
            (true, NodeVote::Failed(error)) if !pause => {
                assert_eq!(error.kind, NodeErrorKind::Connection, "{error}")
            }
            (false, NodeVote::Granted | NodeVote::Pending) => {}
            _ => panic!("node {i}: {vote}; {report}"),
        }
    }
    let waited = report.released() + report.failed();
    assert!(waited + report.pending() == cluster.len(), "{report}");

    if pause {
        // The paused nodes run the acquire, extend and release that queued
        // up, in that order: nothing is left behind.
        for &i in down {
            cluster.node(i).resume();
        }
        redlock.shutdown().await;
        assert_absent(cluster, "minority");
    }
}

/// A paused master: after a few requests left unanswered past their
/// timeout it is known slow, new acquires skip it (their votes say so) and
/// a lock taken then owes it no release; once it runs again it is trusted
/// again, and after `shutdown` no key of ours is left on any master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_master_is_known_slow_skipped_and_trusted_again() {
    let cluster = RedisCluster::start(5);
    let redlock = client(&cluster).await;
    redlock.lock("warm").await.unwrap().release().await;
    let paused = name(cluster.node(4));
    cluster.node(4).pause();

    // Lock-and-release cycles, bounded in count and time, until the
    // client knows it slow: its requests pass their deadline unanswered.
    let mut cycles = 0;
    let until = std::time::Instant::now() + Duration::from_secs(30);
    while redlock.slow_nodes().is_empty() && cycles < 3_000 && std::time::Instant::now() < until {
        let guard = redlock.lock(format!("cycle-{cycles}")).await.unwrap();
        guard.release().await;
        cycles += 1;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(
        redlock.slow_nodes(),
        [paused.as_str()],
        "after {cycles} cycles"
    );

    let guard = redlock.lock("while-slow").wait(Wait::No).await.unwrap();
    let vote = guard.votes().get(redlock_core::NodeId(4)).cloned();
    assert!(
        matches!(&vote, Some(NodeVote::Failed(e)) if e.kind == NodeErrorKind::Slow),
        "{vote:?}"
    );
    let report = guard.release().every_node().await;
    assert_eq!(
        report.votes().get(redlock_core::NodeId(4)),
        Some(&NodeVote::NotAsked),
        "{report}"
    );
    assert!(report.is_complete(), "{report}");

    cluster.node(4).resume();
    // The releases it owes and the probes it was sent are answered now.
    let mut after = 0;
    while !redlock.slow_nodes().is_empty() && after < 3_000 {
        let guard = redlock.lock(format!("after-{after}")).await.unwrap();
        guard.release().await;
        after += 1;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        redlock.slow_nodes().is_empty(),
        "still slow after {after} cycles"
    );
    redlock.shutdown().await;
    for node in cluster.nodes() {
        let left = node.keys("*");
        assert!(
            left.is_empty(),
            "port {}: {} keys left",
            node.port(),
            left.len()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_of_three_killed() {
    minority_down(&RedisCluster::start(3), &[2], false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_of_three_paused() {
    minority_down(&RedisCluster::start(3), &[0], true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_of_five_killed() {
    minority_down(&RedisCluster::start(5), &[1, 3], false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_of_five_paused() {
    minority_down(&RedisCluster::start(5), &[0, 4], true).await;
}

/// What `anyhow`'s `{:#}` prints: the error and every source, joined.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text = format!("{text}: {cause}");
        source = cause.source();
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_down_read_as_one_short_line() {
    let cluster = RedisCluster::start(3);
    let redlock = client(&cluster).await;
    redlock.lock("warm").await.unwrap().release().await;
    cluster.node(1).kill();
    cluster.node(2).kill();

    let err = redlock.lock("one-line").wait(Wait::No).await.unwrap_err();
    let message = chain(&err);
    assert_eq!(message, err.to_string(), "each fact once");
    assert!(!message.contains('\n'), "{message}");
    assert!(message.len() <= 200, "{} chars: {message}", message.len());
    assert!(
        message.starts_with("lock not acquired: no quorum"),
        "{message}"
    );
    for i in [1, 2] {
        assert!(
            message.contains(&format!("{} unreachable", name(cluster.node(i)))),
            "{message}"
        );
    }
    assert!(err.is_unavailable(), "{err:?}");
    assert!(!err.is_held_by_other() && !err.is_config() && !err.is_lock_lost());
    // The nodes' own words are in the votes.
    let failures: Vec<String> = err
        .votes()
        .unwrap()
        .failures()
        .map(|(_, error)| error.to_string())
        .collect();
    assert_eq!(failures.len(), 2, "{failures:?}");
    assert!(
        failures.iter().all(|f| f.starts_with("unreachable")),
        "{failures:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn majority_killed_is_a_quick_no_quorum_naming_the_nodes() {
    let cluster = RedisCluster::start(3);
    let redlock = client(&cluster).await;
    redlock.lock("warm").await.unwrap().release().await;
    cluster.node(0).kill();
    cluster.node(2).kill();

    let (result, elapsed) = timed(redlock.lock("nq").wait(Wait::No)).await;
    let err = result.unwrap_err();
    assert!(elapsed < QUICK, "{elapsed:?}");
    assert!(
        matches!(err, Error::Acquire(AcquireError::NoQuorum { .. })),
        "{err:?}"
    );
    assert!(!err.is_held_by_other());
    let message = err.to_string();
    assert!(message.contains(&name(cluster.node(0))), "{message}");
    assert!(message.contains(&name(cluster.node(2))), "{message}");
    let failed: Vec<&str> = err.votes().unwrap().failures().map(|(n, _)| n).collect();
    assert_eq!(failed, [name(cluster.node(0)), name(cluster.node(2))]);

    // The node that said yes was released again.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!cluster.node(1).exists("nq"));

    // With retries: every attempt fails the same way, within the retry budget.
    let redlock = builder(&cluster)
        .wait(Wait::Retries(2))
        .retry_delay(Duration::from_millis(20))
        .retry_jitter(Duration::from_millis(20))
        .build()
        .await
        .unwrap();
    let (result, elapsed) = timed(redlock.lock("nq")).await;
    let err = result.unwrap_err();
    assert_eq!(err.as_acquire().unwrap().attempts(), 3);
    assert!(elapsed < QUICK, "{elapsed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn majority_paused_is_no_quorum_after_one_node_timeout() {
    let cluster = RedisCluster::start(3);
    let redlock = client(&cluster).await;
    redlock.lock("warm").await.unwrap().release().await;
    for node in &cluster.nodes()[1..] {
        node.reset_stats();
    }
    cluster.node(1).pause();
    cluster.node(2).pause();

    let (result, elapsed) = timed(redlock.lock("stalled").wait(Wait::No)).await;
    let err = result.unwrap_err();
    assert!(
        elapsed >= NODE_TIMEOUT - Duration::from_millis(5),
        "{elapsed:?}"
    );
    assert!(elapsed < QUICK, "{elapsed:?}");
    let Error::Acquire(AcquireError::NoQuorum { votes, .. }) = &err else {
        panic!("{err:?}");
    };
    let kinds: Vec<_> = votes.failures().map(|(_, e)| e.kind).collect();
    assert_eq!(kinds, [NodeErrorKind::Timeout, NodeErrorKind::Timeout]);

    // Once resumed, the queued acquire and its withdraw both run, in that
    // order: no key left once each master ran the withdraw (a script on
    // Redis, `DELIFEQ` on Valkey 9).
    cluster.node(1).resume();
    cluster.node(2).resume();
    eventually(
        "the resumed masters ran the withdraw",
        Duration::from_secs(10),
        || {
            cluster.nodes()[1..].iter().all(|node| {
                let calls = node.commandstats();
                ["evalsha", "delifeq"]
                    .iter()
                    .map(|command| calls.get(*command).copied().unwrap_or(0))
                    .sum::<u64>()
                    >= 1
            })
        },
    )
    .await;
    assert_absent(&cluster, "stalled");
    redlock
        .lock("stalled")
        .wait(Wait::No)
        .await
        .unwrap()
        .release()
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_down_at_build_is_connected_when_it_comes_back() {
    let cluster = RedisCluster::start(3);
    cluster.node(2).kill();
    let redlock = client(&cluster).await;
    assert_eq!(redlock.connected_nodes(), 2);

    let guard = redlock
        .lock("late")
        .wait(Wait::No)
        .await
        .expect("two of three are up");
    assert_eq!(guard.votes().granted(), 2);
    guard.release().await;

    cluster.node(2).restart();
    eventually("the node is reconnected", Duration::from_secs(5), || {
        redlock.connected_nodes() == 3
    })
    .await;
    let guard = redlock.lock("late").wait(Wait::No).await.unwrap();
    eventually(
        "all three nodes hold the lock",
        Duration::from_secs(8),
        || cluster.node(2).get("late").as_deref() == Some(guard.value().as_bytes()),
    )
    .await;
    guard.release().every_node().await;
    assert_absent(&cluster, "late");
}

/// The reconnection runs on the client's driver as its core asks, from the
/// build on: a node down at build that comes back is connected before any
/// operation needs it (the backoff between attempts is the core's, counted
/// in `redlock-core/tests/client.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_down_at_build_is_connected_before_any_operation() {
    let cluster = RedisCluster::start(3);
    cluster.node(2).kill();
    let redlock = client(&cluster).await;
    assert_eq!(redlock.connected_nodes(), 2);
    // Down for a second: about six attempts (50 ms doubling), not hundreds.
    tokio::time::sleep(Duration::from_secs(1)).await;
    cluster.node(2).restart();
    eventually("the node is reconnected", Duration::from_secs(5), || {
        redlock.connected_nodes() == 3
    })
    .await;
    let guard = redlock.lock("late").wait(Wait::No).await.unwrap();
    let report = guard.release().every_node().await;
    assert_eq!(report.released(), 3, "the node held it too: {report}");
    assert_absent(&cluster, "late");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_requires_every_node_is_not_built_without_one() {
    let cluster = RedisCluster::start(3);
    cluster.node(2).kill();
    let error = builder(&cluster)
        .require_connected(usize::MAX)
        .build()
        .await
        .expect_err("a node is down");
    let shown = error.to_string();
    println!("{shown}");
    let down = format!("127.0.0.1:{}", cluster.node(2).port());
    assert!(
        matches!(
            &error,
            Error::Unreachable { connected: 2, required: 3, unreachable }
                if unreachable.len() == 1
                    && unreachable[0].1.kind == NodeErrorKind::Connection
        ),
        "{error:?}"
    );
    assert!(error.is_unavailable(), "{error:?}");
    assert!(
        shown.starts_with("2 of 3 servers reachable at build, 3 required: ")
            && shown.contains(&down),
        "names the missing server: {shown}"
    );
    // Two required, two up: built.
    let redlock = builder(&cluster)
        .require_connected(2)
        .build()
        .await
        .expect("two of three are up");
    assert_eq!(redlock.connected_nodes(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_node_is_reconnected_in_the_background() {
    let cluster = RedisCluster::start(3);
    // A restarted server votes again one TTL after the client saw it back.
    let redlock = builder(&cluster)
        .ttl(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    redlock.lock("warm").await.unwrap().release().await;

    // Comes back empty on the same port: the old connection is broken.
    cluster.node(0).restart();
    let guard = redlock
        .lock("again")
        .wait(Wait::No)
        .await
        .expect("two of three work");
    guard.release().await;
    eventually("the node is reconnected", Duration::from_secs(5), || {
        redlock.connected_nodes() == 3
    })
    .await;
    let mut guard = redlock.lock("again").wait(Wait::No).await.unwrap();
    let held = |guard: &redlock_tokio::LockGuard| {
        cluster.node(0).get("again").as_deref() == Some(guard.value().as_bytes())
    };
    let since = std::time::Instant::now();
    while !held(&guard) {
        assert!(
            since.elapsed() < Duration::from_secs(8),
            "node 0 never voted again"
        );
        guard.release().await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        guard = redlock.lock("again").wait(Wait::No).await.unwrap();
    }
    let report = guard.release().every_node().await;
    assert_eq!(report.released(), 3, "{report}");
}

/// Two masters down while `a` takes a lock, so it holds exactly a quorum
/// (masters 0 and 1); master 2 comes back empty, and master 0 restarts
/// empty under the second client: masters 0 and 2 would grant the lock
/// again while `a` holds it. Whether `b` was granted it within 2 s, with
/// `bug` planted or none on the runtime's threads.
fn a_second_holder_after_a_restart(bug: Option<redlock_tokio::core::planted::Bug>) -> bool {
    let cluster = RedisCluster::start(3);
    support::planted_runtime(bug).block_on(async {
        let ttl = Duration::from_secs(5);
        let a = builder(&cluster).ttl(ttl).build().await.unwrap();
        let b = builder(&cluster).ttl(ttl).build().await.unwrap();
        b.lock("warm").await.unwrap().release().await;
        cluster.node(2).kill();
        let held = a.lock("job").wait(Wait::No).await.expect("two of three");
        assert_eq!(held.votes().granted(), 2);
        cluster.node(2).restart();
        cluster.node(0).restart();
        let second = b
            .lock("job")
            .wait(Wait::AtMost(Duration::from_secs(2)))
            .await;
        let granted = second.is_ok();
        match second {
            Ok(guard) => println!("b granted while a holds: {}", guard.votes()),
            Err(error) => println!("b refused: {error}"),
        }
        assert!(!held.is_lost(), "a still holds its lock");
        granted
    })
}

#[test]
fn a_server_restarted_under_the_client_does_not_vote_until_the_ttl_has_passed() {
    assert!(!a_second_holder_after_a_restart(None), "two holders");
}

#[test]
fn a_restarted_server_that_votes_at_once_lets_a_second_holder_in() {
    use redlock_tokio::core::planted::Bug;
    assert!(
        a_second_holder_after_a_restart(Some(Bug::RestartedNodeVotes)),
        "the planted bug went unseen: no second holder"
    );
}

/// The timeout a release reported for `node`, in words.
fn timeout_detail(report: &redlock_core::ReleaseReport, node: usize) -> String {
    match &report.votes().votes()[node] {
        NodeVote::Failed(error) if error.kind == NodeErrorKind::Timeout => error.to_string(),
        other => panic!("node {node}: expected a timeout, got {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_release_waits_for_a_paused_node_with_the_same_timeout() {
    let cluster = RedisCluster::start(3);
    // Timeouts derived from the TTL: 50 ms for the default 10 s, 30 ms for a
    // 3 s lock, so a lock's release and a release by value could differ.
    let redlock = redlock_tokio::Redlock::builder(cluster.urls())
        .build()
        .await
        .unwrap();
    let release_timeout = redlock.settings().release_timeout();
    assert_eq!(release_timeout, Duration::from_millis(50));
    let short = redlock
        .lock("short")
        .ttl(Duration::from_secs(3))
        .await
        .unwrap();
    let by_value = redlock.lock("by-value").await.unwrap().forget();
    eventually("every node holds both", Duration::from_secs(2), || {
        cluster
            .nodes()
            .iter()
            .all(|node| node.exists("short") && node.exists("by-value"))
    })
    .await;

    // A paused node never answers: each report that waits for every node
    // says how long it was waited for.
    cluster.node(2).pause();
    let guard_report = short.release().every_node().await;
    let value_report = redlock.release_value("by-value", &by_value).await;
    let expected = redlock_core::NodeError::timeout(release_timeout).to_string();
    assert_eq!(timeout_detail(&guard_report, 2), expected, "{guard_report}");
    assert_eq!(timeout_detail(&value_report, 2), expected, "{value_report}");

    cluster.node(2).resume();
    eventually("the queued releases ran", Duration::from_secs(2), || {
        cluster
            .nodes()
            .iter()
            .all(|node| !node.exists("short") && !node.exists("by-value"))
    })
    .await;
}
