//! An ACL user with key rights but no channel rights (what Redis 7 gives a
//! new user by default): locks work, releases count, and release notices
//! are either refused without failing the release, or not sent at all. And
//! one whose key patterns miss the waiters' marks: releases are sent again
//! without them, and waiters are still woken.

mod support;

use redis::Value;
use redlock_tests::{RedisCluster, RedisNode};
use redlock_tokio::{Redlock, Wait};
use std::time::Duration;

use support::{
    NODE_TIMEOUT, assert_absent, eventually, init_tracing, mark_waiting, subscribers, timed,
};

/// Creates user `locker` with every command and key but no channel on each
/// node, and returns the URLs that log in as it.
fn limited_user(cluster: &RedisCluster) -> Vec<String> {
    cluster
        .nodes()
        .iter()
        .map(|node| {
            node.command(["ACL", "SETUSER", "locker", "on", ">pw", "~*", "+@all"]);
            node.command(["ACL", "LOG", "RESET"]);
            format!("redis://locker:pw@127.0.0.1:{}", node.port())
        })
        .collect()
}

/// Entries of `ACL LOG` about channels: publishes the server refused.
fn refused_channels(node: &RedisNode) -> usize {
    let Value::Array(entries) = node.command(["ACL", "LOG"]) else {
        panic!("{node}: ACL LOG answered something else");
    };
    entries
        .iter()
        .filter(|entry| format!("{entry:?}").contains("channel"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_notice_does_not_fail_the_release() {
    init_tracing();
    let cluster = RedisCluster::start(3);
    let urls = limited_user(&cluster);
    let redlock = Redlock::builder(&urls)
        .node_timeout(NODE_TIMEOUT)
        .build()
        .await
        .unwrap();
    // Nobody waits for "plain": its release publishes nothing. A waiter of
    // another client marks "again" while it is held (`support::mark_waiting`):
    // its release publishes (on Valkey, the script that follows the
    // `DELIFEQ` that found our value marked), and the server refuses.
    for (resource, waited) in [("plain", false), ("again", true)] {
        let guard = redlock.lock(resource).await.unwrap();
        if waited {
            for node in cluster.nodes() {
                mark_waiting(node, resource, "another client");
            }
        }
        let report = guard.release().every_node().await;
        assert_eq!(report.released(), 3, "{report}");
        assert_eq!(report.failed(), 0, "{report}");
        let refused = if waited { 3 } else { 0 };
        assert_eq!(report.notices_refused(), refused, "{report}");
        assert_absent(&cluster, resource);
    }
    // Every kind of lock releases the same way.
    let guard = redlock.lock("doc").read().await.unwrap();
    assert_eq!(guard.release().every_node().await.failed(), 0);
    let guard = redlock.lock_all(["a", "b"]).await.unwrap();
    assert_eq!(guard.release().every_node().await.failed(), 0);
    assert_absent(&cluster, "a");
    for node in cluster.nodes() {
        assert!(refused_channels(node) > 0, "{node}: no refusal logged");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_notices_off_nothing_is_published() {
    init_tracing();
    let cluster = RedisCluster::start(3);
    let urls = limited_user(&cluster);
    let redlock = Redlock::builder(&urls)
        .node_timeout(NODE_TIMEOUT)
        .release_notices(false)
        .build()
        .await
        .unwrap();
    let guard = redlock.lock("quiet").await.unwrap();
    let report = guard.release().every_node().await;
    assert_eq!(report.released(), 3, "{report}");
    assert_eq!(report.notices_refused(), 0, "{report}");
    let value = redlock.lock("quiet").await.unwrap().forget();
    let report = redlock.release_value("quiet", &value).await;
    assert_eq!((report.released(), report.failed()), (3, 0), "{report}");
    assert_absent(&cluster, "quiet");
    for node in cluster.nodes() {
        assert_eq!(refused_channels(node), 0, "{node}: a PUBLISH was tried");
    }
}

/// A user whose key patterns cover its locks but not the waiters' marks
/// next to them (`~lock:*`; the marks are `{lock:x}\0waiters` and
/// `{lock:x}\0others`): the server refuses a release that names the marks
/// (`NOPERM`), and the release is sent again without them, which publishes
/// whenever it deletes our value; so the lock is released on every master
/// and a waiter of another client, whose own marks are refused too, hears
/// of it long before its retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_rights_on_the_marks_releases_and_wakes_waiters() {
    init_tracing();
    let cluster = RedisCluster::start(3);
    let urls = support::user_without_marks(&cluster);
    let build = |retry: Duration| {
        Redlock::builder(&urls)
            .node_timeout(NODE_TIMEOUT)
            .wait(Wait::Retries(3))
            .retry_delay(retry)
            .retry_jitter(Duration::ZERO)
            .build()
    };
    let holder = build(Duration::from_millis(200)).await.unwrap();
    let guard = holder.lock("lock:x").await.unwrap();
    let report = guard.release().every_node().await;
    assert_eq!((report.released(), report.failed()), (3, 0), "{report}");
    assert_absent(&cluster, "lock:x");

    // A retry far beyond the wake: not woken, the waiter would take a
    // minute; woken, it takes a round trip or two.
    let waiter = build(Duration::from_secs(60)).await.unwrap();
    let guard = holder.lock("lock:x").await.unwrap();
    // Held on every master before the waiter comes (`lock` returns at a
    // quorum), so that the release has our key to delete on each.
    eventually(
        "every master holds the lock",
        Duration::from_secs(8),
        || {
            cluster
                .nodes()
                .iter()
                .all(|node| node.get("lock:x").as_deref() == Some(guard.value().as_bytes()))
        },
    )
    .await;
    let waiting = tokio::spawn(async move { timed(waiter.lock("lock:x")).await });
    eventually("the waiter listens", Duration::from_secs(10), || {
        cluster
            .nodes()
            .iter()
            .all(|node| subscribers(node, "lock:x") >= 1)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let report = guard.release().every_node().await;
    assert_eq!((report.released(), report.failed()), (3, 0), "{report}");
    let (won, took) = waiting.await.unwrap();
    let won = won.expect("the waiter gets the lock");
    assert!(took < Duration::from_secs(30), "woken, not timed: {took:?}");
    // Woken by the first master's notice, it may have met the holder's key
    // on a master the release had not reached yet: a quorum, not all.
    let report = won.release().every_node().await;
    assert!(report.released() >= 2 && report.failed() == 0, "{report}");
    assert_absent(&cluster, "lock:x");
}
