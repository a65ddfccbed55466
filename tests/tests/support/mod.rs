//! Helpers shared by the redlock integration tests.
#![allow(dead_code)]

use std::future::IntoFuture;
use std::time::{Duration, Instant};

use redis::Value;
use redlock_tests::{RedisCluster, RedisNode};
use redlock_tokio::core::{Argument, Response};
use redlock_tokio::{Builder, Redlock};

/// The per-node timeout of most tests: generous, so that a busy 2-core
/// machine does not turn a slow answer into a failed vote.
pub(crate) const NODE_TIMEOUT: Duration = Duration::from_millis(150);

/// The bound on work that takes about one per-node timeout: ten of them.
/// These tests tell "one per-node timeout" from "a TTL, a response timeout,
/// a retry schedule or forever" (the bugs they guard against); a busy
/// machine's late timers come nowhere near it. How long the work really
/// takes is a figure of `make bench`, not a pass/fail condition.
pub(crate) const QUICK: Duration = Duration::from_millis(1_500);

/// Logs to the test output with `RUST_LOG=redlock_tokio=debug`.
pub(crate) fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// A builder for the cluster's nodes with the test node timeout.
pub(crate) fn builder(cluster: &RedisCluster) -> Builder {
    init_tracing();
    Redlock::builder(cluster.urls()).node_timeout(NODE_TIMEOUT)
}

/// A client for the cluster's nodes with the test node timeout.
pub(crate) async fn client(cluster: &RedisCluster) -> Redlock {
    builder(cluster).build().await.expect("client builds")
}

/// Subscribers of `resource`'s release channel on `node`.
pub(crate) fn subscribers(node: &RedisNode, resource: &str) -> i64 {
    let channel = [resource.as_bytes(), b"\0released"].concat();
    match node.command([&b"PUBSUB"[..], b"NUMSUB", &channel]) {
        redis::Value::Array(items) => match items.as_slice() {
            [_, redis::Value::Int(count)] => *count,
            other => panic!("PUBSUB NUMSUB answered {other:?}"),
        },
        other => panic!("PUBSUB NUMSUB answered {other:?}"),
    }
}

/// Whether `key` exists on each node, in node order.
pub(crate) fn presence(cluster: &RedisCluster, key: impl AsRef<[u8]>) -> Vec<bool> {
    cluster
        .nodes()
        .iter()
        .map(|node| node.exists(key.as_ref()))
        .collect()
}

/// Asserts that `key` exists on no node.
pub(crate) fn assert_absent(cluster: &RedisCluster, key: impl AsRef<[u8]>) {
    let key = key.as_ref();
    assert_eq!(
        presence(cluster, key),
        vec![false; cluster.len()],
        "key {:?} left on some node",
        String::from_utf8_lossy(key)
    );
}

/// Polls `condition` every 20 ms until it holds or `within` passes.
pub(crate) async fn eventually(what: &str, within: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    loop {
        if condition() {
            return;
        }
        assert!(Instant::now() < deadline, "not within {within:?}: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs `future` (or a lock request) and returns its output with the time
/// it took.
pub(crate) async fn timed<T>(future: impl IntoFuture<Output = T>) -> (T, Duration) {
    let start = Instant::now();
    let output = future.await;
    (output, start.elapsed())
}

/// A port on 127.0.0.1 that nothing listens on (bound, then released).
pub(crate) fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local addr").port()
}

/// The node's canonical name as the client reports it.
pub(crate) fn name(node: &RedisNode) -> String {
    format!("127.0.0.1:{}/0", node.port())
}

/// Whether the test server takes `SET key value NX PX ttl GET` (Redis >= 7,
/// every Valkey): then an exclusive acquire is that one plain command.
pub(crate) fn native_acquire() -> bool {
    let major: u32 = redlock_tests::server()
        .version()
        .split('.')
        .next()
        .and_then(|major| major.parse().ok())
        .unwrap_or(0);
    match redlock_tests::server().kind() {
        redlock_tests::ServerKind::Redis => major >= 7,
        redlock_tests::ServerKind::Valkey => true,
        _ => false,
    }
}

/// Whether an exclusive extend is `SET key value IFEQ value PX ttl GET` on
/// the test server (Valkey >= 9, like `DELIFEQ`).
pub(crate) fn native_extend() -> bool {
    native_delifeq()
}

/// Whether the test server has `DELIFEQ` (Valkey >= 9).
pub(crate) fn native_delifeq() -> bool {
    redlock_tests::server().kind() == redlock_tests::ServerKind::Valkey
        && redlock_tests::server()
            .version()
            .split('.')
            .next()
            .and_then(|major| major.parse::<u32>().ok())
            .is_some_and(|major| major >= 9)
}

/// Creates user `keys`, whose key patterns cover `lock:*` but not the
/// waiters' marks next to those locks (`{lock:x}\0waiters`), on each node,
/// and returns the URLs that log in as it.
pub(crate) fn user_without_marks(cluster: &RedisCluster) -> Vec<String> {
    cluster
        .nodes()
        .iter()
        .map(|node| {
            node.command([
                "ACL", "SETUSER", "keys", "on", ">pw", "~lock:*", "&*", "+@all",
            ]);
            format!("redis://keys:pw@127.0.0.1:{}", node.port())
        })
        .collect()
}

/// Marks the lock held at `key` (a key without a hash tag) on `node` as
/// waited for by a waiter of `client`, as that waiter's mark does
/// (`scripts::MARK_WAITING`): the waiters' mark next to the key, and the
/// holder's value itself (`redlock_core::waited`), which a Valkey release's
/// `DELIFEQ` then does not delete, so that its release script follows.
pub(crate) fn mark_waiting(node: &RedisNode, key: &str, client: &str) {
    let (waiters, others) = (format!("{{{key}}}\0waiters"), format!("{{{key}}}\0others"));
    let script = redlock_tokio::core::scripts::MARK_WAITING;
    let args = [
        "EVAL", script, "3", key, &waiters, &others, "a waiter", "60000", client,
    ];
    assert_eq!(node.command(args), Value::Int(1), "{node}: the mark");
}

/// A node's answer as the core's `Response`, as the client maps it.
pub(crate) fn to_response(value: Value) -> Response {
    match value {
        Value::Int(n) => Response::Int(n),
        Value::BulkString(bytes) => Response::Data(bytes),
        Value::Nil => Response::Nil,
        Value::Array(items) => Response::Array(items.into_iter().map(to_response).collect()),
        other => Response::Other(format!("{other:?}")),
    }
}

/// Appends the core's `arguments` (words of a command, or a script's
/// `ARGV`) to `command`.
pub(crate) fn push_arguments<'a>(
    command: &mut redis::Cmd,
    arguments: impl IntoIterator<Item = Argument<'a>>,
) {
    for argument in arguments {
        match argument {
            Argument::Bytes(bytes) => command.arg(bytes),
            Argument::Int(number) => command.arg(number),
        };
    }
}

/// Waits until node `node`'s votes count again for `redlock` (after it
/// restarted under the client, for the client's longest TTL): takes and
/// releases a probe lock until that node grants it, for at most `within`.
pub(crate) async fn until_counted(redlock: &Redlock, node: usize, within: std::time::Duration) {
    let since = std::time::Instant::now();
    loop {
        if let Ok(guard) = redlock
            .lock("until-counted")
            .wait(redlock_tokio::Wait::No)
            .await
        {
            let counted = matches!(
                guard.votes().get(redlock_core::NodeId(node)),
                Some(redlock_core::NodeVote::Granted)
            );
            guard.release().every_node().await;
            if counted {
                return;
            }
        }
        assert!(
            since.elapsed() < within,
            "node {node} never counted again within {within:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// A two-worker runtime whose threads have `bug` planted (or none), as
/// has the calling thread.
pub(crate) fn planted_runtime(
    bug: Option<redlock_tokio::core::planted::Bug>,
) -> tokio::runtime::Runtime {
    use redlock_tokio::core::planted;
    planted::set(bug);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .on_thread_start(move || planted::set(bug))
        .build()
        .expect("runtime")
}
