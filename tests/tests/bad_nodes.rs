//! Nodes that are misconfigured, unreachable, not Redis, or hold a key of
//! another type: typed errors, no panic, nothing left held, and passwords
//! never shown.

mod support;

use std::time::Duration;

use redlock_core::{AcquireError, ConfigError, NodeErrorKind, NodeVote};
use redlock_tests::{GarbageServer, NodeOptions, RedisCluster, RedisNode, SilentServer};
use redlock_tokio::{Error, Redlock, Wait};
use support::{NODE_TIMEOUT, QUICK, assert_absent, closed_port, init_tracing, name, timed};

const PASSWORD: &str = "correct-horse-1";
const WRONG: &str = "hunter2-wrong";

fn protected() -> RedisNode {
    RedisNode::start_with(NodeOptions {
        password: Some(PASSWORD.to_owned()),
        ..NodeOptions::default()
    })
}

fn kinds(err: &Error) -> Vec<Option<NodeErrorKind>> {
    err.votes()
        .expect("a round ran")
        .votes()
        .iter()
        .map(|vote| match vote {
            NodeVote::Failed(error) => Some(error.kind),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_fails_the_build_without_showing_it() {
    init_tracing();
    let node = protected();
    let others = RedisCluster::start(2);
    let mut urls = others.urls();
    urls.push(node.url_with_password(WRONG));
    let err = Redlock::builder(&urls)
        .node_timeout(NODE_TIMEOUT)
        .build()
        .await
        .unwrap_err();
    let Error::Auth { node: named, error } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(named, &name(&node));
    assert_eq!(error.kind, NodeErrorKind::Auth);
    for shown in [err.to_string(), format!("{err:?}")] {
        assert!(!shown.contains(WRONG), "{shown}");
    }

    // A password is required but none given: also a credentials error.
    urls.pop();
    urls.push(node.url());
    let err = Redlock::builder(&urls).build().await.unwrap_err();
    assert!(matches!(err, Error::Auth { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_right_password_works_and_is_never_shown() {
    init_tracing();
    let nodes = [protected(), protected(), protected()];
    let urls: Vec<String> = nodes
        .iter()
        .map(|node| node.url_with_password(PASSWORD))
        .collect();
    let redlock = Redlock::builder(&urls)
        .node_timeout(NODE_TIMEOUT)
        .build()
        .await
        .unwrap();
    assert_eq!(redlock.connected_nodes(), 3);
    let builder_debug = format!("{:?}", Redlock::builder(&urls));
    assert!(!builder_debug.contains(PASSWORD), "{builder_debug}");
    assert!(builder_debug.contains("***"), "{builder_debug}");
    let debug = format!("{redlock:?}");
    assert!(!debug.contains(PASSWORD), "{debug}");

    let guard = redlock.lock("secret").await.unwrap();
    let err = redlock.lock("secret").wait(Wait::No).await.unwrap_err();
    assert!(err.is_held_by_other());
    assert!(!format!("{err} {err:?} {guard:?}").contains(PASSWORD));
    guard.release().every_node().await;
    for node in &nodes {
        assert!(!node.exists("secret"));
    }

    // An unparsable URL is reported redacted.
    let err = Redlock::connect([format!("redis://user:{PASSWORD}@127.0.0.1:6379/notadb")])
        .await
        .unwrap_err();
    let Error::Config(ConfigError::InvalidNode { node, .. }) = &err else {
        panic!("{err:?}");
    };
    assert_eq!(node, "redis://user:***@127.0.0.1:6379/notadb");
    assert!(!format!("{err} {err:?}").contains(PASSWORD));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_nodes_count_as_failed_votes() {
    init_tracing();
    let cluster = RedisCluster::start(2);
    let mut urls = cluster.urls();
    let closed = closed_port();
    urls.push(format!("redis://127.0.0.1:{closed}"));
    let redlock = Redlock::builder(&urls)
        .node_timeout(NODE_TIMEOUT)
        .build()
        .await
        .expect("an unreachable node does not fail the build");
    assert_eq!(redlock.connected_nodes(), 2);
    let guard = redlock
        .lock("reach")
        .wait(Wait::No)
        .await
        .expect("two of three");
    guard.release().every_node().await;

    // Only unreachable nodes: a quick NoQuorum that names them.
    let urls: Vec<String> = (0..3)
        .map(|_| format!("redis://127.0.0.1:{}", closed_port()))
        .collect();
    let redlock = Redlock::builder(&urls)
        .node_timeout(NODE_TIMEOUT)
        .build()
        .await
        .unwrap();
    let (result, elapsed) = timed(redlock.lock("reach").wait(Wait::No)).await;
    let err = result.unwrap_err();
    assert!(elapsed < QUICK, "{elapsed:?}");
    assert!(
        matches!(err, Error::Acquire(AcquireError::NoQuorum { .. })),
        "{err:?}"
    );
    assert!(
        kinds(&err)
            .iter()
            .flatten()
            .all(|k| *k == NodeErrorKind::Connection)
    );
    assert!(
        err.to_string().contains(&urls[0]["redis://".len()..]),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_is_not_redis_is_a_failed_vote() {
    init_tracing();
    let cluster = RedisCluster::start(2);
    let garbage = GarbageServer::start();
    let mut urls = cluster.urls();
    urls.push(garbage.url());
    let redlock = Redlock::builder(&urls)
        .node_timeout(NODE_TIMEOUT)
        .build()
        .await
        .expect("a bad node does not fail the build");
    assert_eq!(redlock.connected_nodes(), 2);
    let guard = redlock
        .lock("garbage")
        .wait(Wait::No)
        .await
        .expect("two of three");
    let NodeVote::Failed(error) = &guard.votes().votes()[2] else {
        // The decision may come before the garbage node's answer.
        guard.release().every_node().await;
        return;
    };
    assert!(
        matches!(
            error.kind,
            NodeErrorKind::Connection | NodeErrorKind::Protocol
        ),
        "{error}"
    );
    guard.release().every_node().await;
    assert_absent(&cluster, "garbage");

    // A majority of garbage: NoQuorum, and the real node is released.
    let garbage2 = GarbageServer::start();
    let urls = vec![cluster.node(0).url(), garbage.url(), garbage2.url()];
    let redlock = Redlock::builder(&urls)
        .node_timeout(NODE_TIMEOUT)
        .build()
        .await
        .unwrap();
    let err = redlock.lock("garbage").wait(Wait::No).await.unwrap_err();
    assert!(
        matches!(err, Error::Acquire(AcquireError::NoQuorum { .. })),
        "{err:?}"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!cluster.node(0).exists("garbage"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_node_costs_the_connect_timeout_at_build_only() {
    init_tracing();
    let cluster = RedisCluster::start(2);
    let silent = SilentServer::start();
    let mut urls = cluster.urls();
    urls.push(silent.url());
    let connect_timeout = Duration::from_millis(300);
    let (redlock, elapsed) = timed(
        Redlock::builder(&urls)
            .node_timeout(NODE_TIMEOUT)
            .connect_timeout(connect_timeout)
            .build(),
    )
    .await;
    let redlock = redlock.unwrap();
    assert!(
        elapsed >= connect_timeout - Duration::from_millis(5),
        "{elapsed:?}"
    );
    assert!(elapsed < connect_timeout + QUICK, "{elapsed:?}");
    let (guard, elapsed) = timed(redlock.lock("silent").wait(Wait::No)).await;
    assert!(elapsed < QUICK, "{elapsed:?}");
    guard.unwrap().release().every_node().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_of_another_type_is_a_wrong_type_error_and_stays_untouched() {
    let cluster = RedisCluster::start(3);
    let redlock = support::client(&cluster).await;
    for node in cluster.nodes() {
        node.command(["HSET", "typed", "field", "value"]);
    }
    let err = redlock.lock("typed").wait(Wait::No).await.unwrap_err();
    assert!(
        matches!(err, Error::Acquire(AcquireError::WrongType { .. })),
        "{err:?}"
    );
    assert!(!err.is_held_by_other());
    let kinds = kinds(&err);
    assert!(kinds.iter().flatten().count() >= 2, "{err}");
    assert!(
        kinds
            .iter()
            .flatten()
            .all(|k| *k == NodeErrorKind::WrongType),
        "{err}"
    );
    assert!(err.to_string().contains("another type"), "{err}");

    // On one node only: the lock works on the other two.
    cluster.node(0).command(["DEL", "typed"]);
    cluster.node(1).command(["DEL", "typed"]);
    let guard = redlock.lock("typed").wait(Wait::No).await.unwrap();
    let report = guard.release().every_node().await;
    assert_eq!(report.released(), 2, "{report}");
    assert_eq!(report.failed(), 1, "{report}");
    let hash_type = cluster.node(2).command(["TYPE", "typed"]);
    assert_eq!(hash_type, redis_status("hash"));
    assert!(!cluster.node(0).exists("typed"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_of_another_type_fails_the_first_attempt_without_retries() {
    let cluster = RedisCluster::start(3);
    // The default retry schedule: 10 retries 50..200 ms apart.
    let redlock = support::client(&cluster).await;
    for node in cluster.nodes() {
        node.command(["LPUSH", "k", "x"]);
        node.reset_stats();
    }
    let err = redlock.lock("k").await.unwrap_err();
    let Error::Acquire(AcquireError::WrongType { keys, attempts, .. }) = &err else {
        panic!("expected WrongType, got {err:?}");
    };
    assert_eq!(
        keys.iter().map(|key| key.as_bytes()).collect::<Vec<_>>(),
        [b"k"]
    );
    assert_eq!(*attempts, 1, "{err}");
    assert!(err.as_acquire().is_some_and(AcquireError::is_wrong_type));
    assert!(!err.is_held_by_other());
    assert!(err.to_string().contains("the key k"), "{err}");
    // Counted on the nodes: one attempt and its clean-up, not eleven.
    tokio::time::sleep(Duration::from_millis(200)).await;
    for node in cluster.nodes() {
        let evalsha = node.commandstats().get("evalsha").copied().unwrap_or(0);
        assert!(
            evalsha <= 2,
            "{evalsha} EVALSHA calls: {:?}",
            node.commandstats()
        );
        // Nothing written: the list is as it was and no other key appeared.
        assert_eq!(node.keys("*"), vec![b"k".to_vec()]);
        assert_eq!(
            node.command(["LRANGE", "k", "0", "-1"]),
            redis::Value::Array(vec![redis::Value::BulkString(b"x".to_vec())])
        );
    }
}

fn redis_status(text: &str) -> redis::Value {
    redis::Value::SimpleString(text.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_urls_build_and_fail_cleanly_against_a_plain_server() {
    init_tracing();
    let cluster = RedisCluster::start(3);
    let urls: Vec<String> = cluster
        .nodes()
        .iter()
        .map(|node| format!("rediss://:{PASSWORD}@127.0.0.1:{}/#insecure", node.port()))
        .collect();
    let redlock = Redlock::builder(&urls)
        .node_timeout(NODE_TIMEOUT)
        .connect_timeout(Duration::from_millis(500))
        .build()
        .await
        .expect("a server that does not speak TLS is unreachable, not misconfigured");
    assert_eq!(redlock.nodes()[0], name(cluster.node(0)));
    assert_eq!(redlock.connected_nodes(), 0);
    let err = redlock.lock("tls").wait(Wait::No).await.unwrap_err();
    assert!(
        matches!(err, Error::Acquire(AcquireError::NoQuorum { .. })),
        "{err:?}"
    );
    assert!(!format!("{err} {err:?} {redlock:?}").contains(PASSWORD));
}
