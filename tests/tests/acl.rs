//! An ACL user with key rights but no channel rights (what Redis 7 gives a
//! new user by default): locks work, releases count, and release notices
//! are either refused without failing the release, or not sent at all.

mod support;

use redis::Value;
use redlock_tests::{RedisCluster, RedisNode};
use redlock_tokio::Redlock;
use support::{NODE_TIMEOUT, assert_absent, init_tracing};

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
    // Nobody waits for "plain": its release publishes nothing. A waiter
    // marked itself for "again" (as `scripts::MARK_WAITING` does): its
    // release publishes, and the server refuses.
    for (resource, waited) in [("plain", false), ("again", true)] {
        if waited {
            for node in cluster.nodes() {
                node.command([&b"SET"[..], b"{again}\0waiters", b"1", b"PX", b"60000"]);
            }
        }
        let guard = redlock.lock(resource).await.unwrap();
        let report = guard.release().await;
        assert_eq!(report.released(), 3, "{report}");
        assert_eq!(report.failed(), 0, "{report}");
        let refused = if waited { 3 } else { 0 };
        assert_eq!(report.notices_refused(), refused, "{report}");
        assert_absent(&cluster, resource);
    }
    // Every kind of lock releases the same way.
    let guard = redlock.read_lock("doc").await.unwrap();
    assert_eq!(guard.release().await.failed(), 0);
    let guard = redlock.lock_all(&["a", "b"]).await.unwrap();
    assert_eq!(guard.release().await.failed(), 0);
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
    let report = guard.release().await;
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
