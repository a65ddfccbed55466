//! Extending by hand and keeping a lock alive: past the original TTL, not
//! after expiry, and a loss signal that fires when extensions fail.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use redlock_core::ExtendError;
use redlock_tests::RedisCluster;
use redlock_tokio::{Error, KeepAlive, LossReason, RunError, Wait};
use support::{QUICK, assert_absent, builder, client, eventually, timed};

/// For 300 ms locks: a lead of half the TTL (150 ms) leaves room for two
/// per-node timeouts of 50 ms.
const SHORT_NODE_TIMEOUT: Duration = Duration::from_millis(50);

/// The TTL of locks kept alive through a longer task: short enough that the
/// task outlives it three times, long enough (with the test node timeout)
/// that a busy machine's stalls do not lose it.
const KEPT_TTL: Duration = Duration::from_millis(1_000);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_keeps_the_lock_past_the_original_ttl() {
    let cluster = RedisCluster::start(3);
    let redlock = builder(&cluster)
        .ttl(Duration::from_millis(600))
        .build()
        .await
        .unwrap();
    let other = client(&cluster).await;

    let mut guard = redlock.lock("long").await.unwrap();
    let acquired = Instant::now();
    tokio::time::sleep(Duration::from_millis(250)).await;
    let validity = guard.extend(Duration::from_secs(3)).await.unwrap();
    assert!(validity > Duration::from_millis(2_500), "{validity:?}");
    assert_eq!(guard.extensions(), 1);
    assert_eq!(guard.ttl(), Duration::from_secs(3));

    // Well past the original 600 ms.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(acquired.elapsed() > Duration::from_millis(800));
    assert!(!guard.is_lost());
    assert!(guard.validity() > Duration::from_millis(1_500));
    let err = other.lock("long").wait(Wait::No).await.unwrap_err();
    assert!(err.is_held_by_other(), "{err}");
    for node in cluster.nodes() {
        assert!(node.pttl("long") > 1_500, "{}", node.pttl("long"));
    }
    assert_eq!(guard.release().every_node().await.released(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extending_an_expired_lock_fails_and_sets_nothing() {
    let cluster = RedisCluster::start(3);
    let redlock = builder(&cluster)
        .ttl(Duration::from_millis(300))
        .node_timeout(SHORT_NODE_TIMEOUT)
        .build()
        .await
        .unwrap();
    let mut guard = redlock.lock("short").await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(guard.is_lost());
    assert_eq!(guard.loss(), Some(LossReason::Expired));
    assert_eq!(guard.validity(), Duration::ZERO);

    let err = guard.extend(Duration::from_secs(5)).await.unwrap_err();
    assert!(
        matches!(err, Error::Extend(ExtendError::Expired { .. })),
        "{err:?}"
    );
    assert!(err.to_string().contains("expired"), "{err}");
    // The expired key was not set again.
    assert_absent(&cluster, "short");
    let report = guard.release().every_node().await;
    assert_eq!(report.released(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_holds_a_lock_through_a_task_of_three_ttls() {
    let cluster = RedisCluster::start(3);
    let redlock = builder(&cluster).ttl(KEPT_TTL).build().await.unwrap();
    let other = client(&cluster).await;

    let kept = redlock
        .lock("kept")
        .keep_alive(KeepAlive::default())
        .await
        .unwrap();
    let started = Instant::now();
    while started.elapsed() < KEPT_TTL * 3 {
        tokio::time::sleep(KEPT_TTL / 4).await;
        assert!(!kept.is_lost(), "{:?}", kept.loss());
        assert!(!kept.validity().is_zero());
        let err = other.lock("kept").wait(Wait::No).await.unwrap_err();
        assert!(err.is_held_by_other(), "{err}");
    }
    // Still valid after three TTLs: extended at least twice.
    assert!(kept.extensions() >= 2, "{} extensions", kept.extensions());
    let report = kept.release().every_node().await;
    assert_eq!(report.released(), 3);
    assert_absent(&cluster, "kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_keeps_a_lock_through_a_task_of_three_ttls() {
    let cluster = RedisCluster::start(3);
    let redlock = builder(&cluster).ttl(KEPT_TTL).build().await.unwrap();
    let other = client(&cluster).await;
    let refused = redlock
        .lock("task")
        .run(async |lock| {
            let mut refused = 0;
            for _ in 0..12 {
                tokio::time::sleep(KEPT_TTL / 4).await;
                assert!(!lock.is_lost());
                // Extended in the background: never down to zero.
                assert!(!lock.validity().is_zero());
                if other
                    .lock("task")
                    .wait(Wait::No)
                    .await
                    .unwrap_err()
                    .is_held_by_other()
                {
                    refused += 1;
                }
            }
            Ok(refused)
        })
        .await
        .unwrap();
    assert_eq!(refused, 12);
    // `run` returns once a quorum released; the last node's delete may
    // still be on its way.
    redlock.shutdown().await;
    assert_absent(&cluster, "task");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loss_signal_fires_when_the_nodes_are_killed() {
    let cluster = RedisCluster::start(3);
    let ttl = Duration::from_millis(300);
    let redlock = builder(&cluster)
        .ttl(ttl)
        .node_timeout(SHORT_NODE_TIMEOUT)
        .build()
        .await
        .unwrap();
    let kept = redlock
        .lock("doomed")
        .keep_alive(KeepAlive::default())
        .await
        .unwrap();
    let signal = kept.loss_signal();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!kept.is_lost());

    for node in cluster.nodes() {
        node.kill();
    }
    // Extensions now fail; the lock is lost at the latest when its validity
    // (under one TTL) runs out.
    let (reason, elapsed) = timed(tokio::time::timeout(Duration::from_secs(3), kept.lost())).await;
    let reason = reason.expect("the loss is signalled");
    assert!(elapsed < ttl + QUICK, "{elapsed:?}");
    assert!(
        matches!(
            reason,
            LossReason::ExtendFailed(ExtendError::NoQuorum { .. })
        ),
        "{reason:?}"
    );
    assert!(signal.is_lost());
    assert!(kept.is_lost());
    assert!(kept.validity().is_zero());
    let report = kept.release().every_node().await;
    assert_eq!(report.failed(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_cancels_the_work_and_reports_the_loss() {
    let cluster = RedisCluster::start(3);
    let redlock = builder(&cluster)
        .ttl(Duration::from_millis(300))
        .node_timeout(SHORT_NODE_TIMEOUT)
        .build()
        .await
        .unwrap();
    let finished = Arc::new(AtomicBool::new(false));
    let work_finished = Arc::clone(&finished);
    let run = redlock.lock("cancelled-work").run(async move |lock| {
        tokio::select! {
            _ = lock.lost() => {}
            () = tokio::time::sleep(Duration::from_secs(30)) => {}
        }
        // Never reached when the lock is lost: the future is dropped first.
        tokio::time::sleep(Duration::from_secs(30)).await;
        work_finished.store(true, Ordering::SeqCst);
        Ok(())
    });
    let kill = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        for node in cluster.nodes() {
            node.kill();
        }
    };
    let started = Instant::now();
    let (result, ()) = tokio::join!(run, kill);
    let Err(RunError::Lock(err)) = result else {
        panic!("the lock's error, got {result:?}");
    };
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(
        matches!(
            &err,
            Error::LockLost { key, reason: LossReason::ExtendFailed(_) } if key.as_bytes() == b"cancelled-work"
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("lost the lock"), "{err}");
    assert!(!finished.load(Ordering::SeqCst));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loss_signal_fires_when_someone_else_takes_the_key() {
    let cluster = RedisCluster::start(3);
    let redlock = builder(&cluster)
        .ttl(Duration::from_millis(400))
        .build()
        .await
        .unwrap();
    let kept = redlock
        .lock("stolen")
        .keep_alive(KeepAlive::default())
        .await
        .unwrap();
    eventually("every node has the key", Duration::from_secs(8), || {
        cluster.nodes().iter().all(|node| node.exists("stolen"))
    })
    .await;
    // An operator (or a node that lost its data and a new holder) replaces
    // our value on every node.
    for node in cluster.nodes() {
        node.set("stolen", "thief");
    }
    let reason = tokio::time::timeout(Duration::from_secs(2), kept.lost())
        .await
        .expect("the loss is signalled");
    assert!(
        matches!(reason, LossReason::ExtendFailed(ExtendError::Lost { .. })),
        "{reason:?}"
    );
    let report = kept.release().every_node().await;
    assert_eq!(report.not_held(), 3);
    for node in cluster.nodes() {
        assert_eq!(node.get("stolen").as_deref(), Some(&b"thief"[..]));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_stops_at_the_extension_limit() {
    let cluster = RedisCluster::start(3);
    let redlock = builder(&cluster)
        .ttl(Duration::from_millis(300))
        .node_timeout(SHORT_NODE_TIMEOUT)
        .build()
        .await
        .unwrap();
    let kept = redlock
        .lock("bounded")
        .keep_alive(KeepAlive::default().extend_when_left(0.5).max_extensions(2))
        .await
        .unwrap();
    let (reason, elapsed) = timed(tokio::time::timeout(Duration::from_secs(3), kept.lost())).await;
    assert_eq!(
        reason.expect("lost at the limit"),
        LossReason::ExtensionLimit { extensions: 2 }
    );
    // Two extensions about 150 ms apart, then one full validity.
    assert!(elapsed > Duration::from_millis(500), "{elapsed:?}");
    assert!(elapsed < Duration::from_millis(700) + QUICK, "{elapsed:?}");
    assert_eq!(kept.extensions(), 2);
    drop(kept);
    // Dropped without release: released in the background (or expired).
    eventually("the key is gone", Duration::from_secs(8), || {
        cluster.nodes().iter().all(|node| !node.exists("bounded"))
    })
    .await;
}

/// The PTTL of `key` on every node (-2: no such key).
fn pttls(cluster: &RedisCluster, key: &str) -> Vec<i64> {
    cluster.nodes().iter().map(|node| node.pttl(key)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_release_by_value_ends_the_keep_alive_and_is_not_undone() {
    let cluster = RedisCluster::start(3);
    let ttl = Duration::from_millis(400);
    let holder = builder(&cluster).ttl(ttl).build().await.unwrap();
    let operator = client(&cluster).await;
    let kept = holder
        .lock("released-by-hand")
        .keep_alive(KeepAlive::default())
        .await
        .unwrap();
    let signal = kept.loss_signal();
    eventually("every node has the key", Duration::from_secs(2), || {
        cluster
            .nodes()
            .iter()
            .all(|node| node.get("released-by-hand").as_deref() == Some(kept.value().as_bytes()))
    })
    .await;

    // What `redlock release released-by-hand --value V` does.
    let report = operator
        .release_value("released-by-hand", kept.value())
        .await;
    assert_eq!(report.released(), 3, "{report}");

    let reason = tokio::time::timeout(Duration::from_secs(2), kept.lost())
        .await
        .expect("the loss is signalled");
    let LossReason::ExtendFailed(error) = &reason else {
        panic!("{reason:?}");
    };
    assert!(matches!(error, ExtendError::Gone { .. }), "{error:?}");
    assert!(error.is_lost());
    assert!(signal.is_lost());
    assert!(kept.validity().is_zero());
    // Several keep-alive periods later the key is still gone everywhere: the
    // extension that found it missing did not re-create it (or deleted it
    // again right after).
    tokio::time::sleep(ttl * 2).await;
    assert_eq!(pttls(&cluster, "released-by-hand"), [-2, -2, -2]);
    let report = kept.release().every_node().await;
    assert_eq!(report.released(), 0, "{report}");
    assert_eq!(pttls(&cluster, "released-by-hand"), [-2, -2, -2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_stops_the_work_when_its_value_is_released_by_hand() {
    let cluster = RedisCluster::start(3);
    let holder = builder(&cluster)
        .ttl(Duration::from_millis(400))
        .build()
        .await
        .unwrap();
    let operator = client(&cluster).await;
    let (value_tx, value_rx) = tokio::sync::oneshot::channel();
    let finished = Arc::new(AtomicBool::new(false));
    let work_finished = Arc::clone(&finished);
    let key = "run-released";
    let run = holder.lock(key).run(async move |lock| {
        let _ = value_tx.send(());
        lock.lost().await;
        tokio::time::sleep(Duration::from_secs(30)).await;
        work_finished.store(true, Ordering::SeqCst);
        Ok(())
    });
    let release = async {
        value_rx.await.unwrap();
        eventually("every node has the key", Duration::from_secs(2), || {
            cluster.nodes().iter().all(|node| node.exists(key))
        })
        .await;
        let value = cluster.node(0).get(key).expect("held");
        let value = redlock_tokio::core::LockValue::from_string(String::from_utf8(value).unwrap());
        operator.release_value(key, &value).await
    };
    let (result, report) = tokio::join!(run, release);
    assert_eq!(report.released(), 3, "{report}");
    let Err(RunError::Lock(err)) = result else {
        panic!("the lock's error, got {result:?}");
    };
    assert!(
        matches!(
            &err,
            Error::LockLost {
                reason: LossReason::ExtendFailed(ExtendError::Gone { .. }),
                ..
            }
        ),
        "{err:?}"
    );
    assert!(!finished.load(Ordering::SeqCst));
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(pttls(&cluster, key), [-2, -2, -2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_restarted_empty_gets_the_key_back_and_the_lock_is_kept() {
    let cluster = RedisCluster::start(3);
    let ttl = Duration::from_millis(400);
    let holder = builder(&cluster).ttl(ttl).build().await.unwrap();
    let kept = holder
        .lock("restarted")
        .keep_alive(KeepAlive::default())
        .await
        .unwrap();
    let ours = |node: &redlock_tests::RedisNode| {
        node.get("restarted").as_deref() == Some(kept.value().as_bytes())
    };
    eventually("every node has the key", Duration::from_secs(2), || {
        cluster.nodes().iter().all(ours)
    })
    .await;
    cluster.node(0).restart();
    assert!(!cluster.node(0).exists("restarted"));
    eventually(
        "the restarted master has our value again",
        Duration::from_secs(5),
        || ours(cluster.node(0)),
    )
    .await;
    // Kept through a few more extensions.
    let extensions = kept.extensions();
    eventually("two more extensions", Duration::from_secs(3), || {
        kept.extensions() >= extensions + 2
    })
    .await;
    assert!(!kept.is_lost(), "{:?}", kept.loss());
    assert!(cluster.nodes().iter().all(ours));
    let report = kept.release().every_node().await;
    assert_eq!(report.released(), 3, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_on_a_bare_quorum_is_not_undone_while_a_master_is_silent() {
    // The holder's value deleted on masters 0 and 1 (an operator whose
    // release reached a bare quorum), then master 0 paused: the extension
    // hears "missing" from 1, "ours" from 2, nothing from 0. Our value is on
    // one master at most, so the lock must not come back on master 1 (nor on
    // master 0 once it resumes).
    let cluster = RedisCluster::start(3);
    let holder = builder(&cluster).build().await.unwrap();
    let mut guard = holder.lock("bare-quorum").await.unwrap();
    let value = guard.value().as_bytes().to_vec();
    // `lock` returns at a quorum: the third master's acquire may still be
    // on its way, and would set the key again after the `DEL` below.
    eventually(
        "every master holds the lock",
        Duration::from_secs(5),
        || {
            cluster
                .nodes()
                .iter()
                .all(|node| node.get("bare-quorum").as_deref() == Some(value.as_slice()))
        },
    )
    .await;
    for node in &cluster.nodes()[..2] {
        node.command(["DEL", "bare-quorum"]);
    }
    cluster.node(0).pause();
    let result = guard.extend(Duration::from_secs(10)).await;
    cluster.node(0).resume();
    let error = result.expect_err("one confirmation is not a quorum");
    assert!(
        matches!(
            error,
            redlock_tokio::Error::Extend(ExtendError::NoQuorum { .. })
        ),
        "{error}"
    );
    // The paused master ran the extend on resuming: nothing to extend there.
    eventually(
        "master 0 answered its queued extend",
        Duration::from_secs(5),
        || cluster.node(0).ping().is_ok(),
    )
    .await;
    assert!(!cluster.node(0).exists("bare-quorum"));
    assert!(!cluster.node(1).exists("bare-quorum"));
    assert_eq!(cluster.node(2).get("bare-quorum"), Some(value));
    // Asked again, with every master answering: gone.
    let error = guard.extend(Duration::from_secs(10)).await.unwrap_err();
    assert!(
        matches!(
            error,
            redlock_tokio::Error::Extend(ExtendError::Gone { .. })
        ),
        "{error}"
    );
    eventually(
        "our value released everywhere",
        Duration::from_secs(5),
        || {
            cluster
                .nodes()
                .iter()
                .all(|node| !node.exists("bare-quorum"))
        },
    )
    .await;
}
