//! Waiting for the AOF (`Builder::wait_for_aof`): a server's vote counts
//! only once its append-only file has the write. A server that cannot
//! confirm it (Redis before 7.2, AOF off, `appendfsync no`) fails the build
//! with a typed error naming it and what it lacks; on one that can (Valkey,
//! Redis 7.2 and later), every grant, extension and token is followed by
//! `WAITAOF`, and a yes whose write the AOF does not have is not counted.
//!
//! On a server without `WAITAOF` (Debian's Redis 7.0) only the refusal is
//! tested; `make nextest-valkey` runs the rest.

mod support;

use std::time::Duration;

use redlock_core::{ConfigError, NodeErrorKind, NodeVote};
use redlock_tests::{RedisCluster, ServerKind, server};
use redlock_tokio::{Error, Redlock, Wait, WeakPersistence};
use support::init_tracing;

/// Generous: with `appendfsync always` the AOF has each write before the
/// server answers, so nothing here waits for a sync.
const NODE_TIMEOUT: Duration = Duration::from_secs(1);

/// Where a server's AOF lags: its `WAITAOF` answers `0` at 3/4 of this
/// (the core's timing, `redlock_core::waitaof`), which the server checks
/// at its 10 Hz tick, so the answer comes about 0.75 s before the vote's
/// deadline: room for a busy machine, so that the vote reads as not on
/// disk, not as a timeout.
const LAGGING_NODE_TIMEOUT: Duration = Duration::from_secs(3);

/// Whether the servers of this run have `WAITAOF`: Valkey, Redis >= 7.2.
fn has_waitaof() -> bool {
    let version: Vec<u16> = server()
        .version()
        .split('.')
        .filter_map(|part| part.parse().ok())
        .collect();
    match server().kind() {
        ServerKind::Valkey => true,
        _ => version.as_slice() >= [7, 2].as_slice(),
    }
}

fn builder(cluster: &RedisCluster) -> redlock_tokio::Builder {
    Redlock::builder(cluster.urls())
        .node_timeout(NODE_TIMEOUT)
        .ttl(Duration::from_secs(5))
        .weak_persistence(WeakPersistence::Accept)
        .wait_for_aof(true)
}

/// [`RedisNode::persist`](redlock_tests::RedisNode::persist) on every node.
fn persist(cluster: &RedisCluster, appendonly: &str, appendfsync: &str) {
    for node in cluster.nodes() {
        node.persist(appendonly, appendfsync);
    }
}

/// The build's refusal, with what the server lacks and the fix in words.
fn refusal(result: Result<Redlock, Error>) -> String {
    let err = result.expect_err("refused");
    let shown = err.to_string();
    println!("{shown}");
    let Error::Config(ConfigError::NoWaitAof { reason, .. }) = &err else {
        panic!("not NoWaitAof: {err:?}");
    };
    assert!(err.is_config(), "{err:?}");
    assert!(
        shown.contains("appendonly yes and appendfsync always"),
        "names the fix: {shown}"
    );
    reason.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_confirm_its_aof_is_refused_at_build() {
    init_tracing();
    let cluster = RedisCluster::start(3);
    if !has_waitaof() {
        persist(&cluster, "yes", "always");
        let reason = refusal(builder(&cluster).build().await);
        assert!(reason.contains("has no WAITAOF"), "{reason}");
        return;
    }
    assert!(refusal(builder(&cluster).build().await).contains("appendonly no"));
    persist(&cluster, "yes", "no");
    assert!(refusal(builder(&cluster).build().await).contains("appendfsync no"));
    persist(&cluster, "yes", "everysec");
    assert!(refusal(builder(&cluster).build().await).contains("appendfsync everysec"));
    persist(&cluster, "yes", "always");
    let redlock = builder(&cluster).build().await.expect("appendfsync always");
    redlock
        .lock("durable")
        .wait(Wait::No)
        .await
        .unwrap()
        .release()
        .await;
}

/// Three servers with AOF and `appendfsync always`, or `None` (said) where
/// they have no `WAITAOF`.
fn durable_servers() -> Option<RedisCluster> {
    if !has_waitaof() {
        println!("skipped: {} has no WAITAOF", server());
        return None;
    }
    let cluster = RedisCluster::start(3);
    persist(&cluster, "yes", "always");
    Some(cluster)
}

/// How many `WAITAOF` each node ran.
fn waitaofs(cluster: &RedisCluster) -> Vec<u64> {
    cluster
        .nodes()
        .iter()
        .map(|node| node.commandstats().get("waitaof").copied().unwrap_or(0))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_extensions_tokens_and_terms_wait_for_the_aof() {
    init_tracing();
    let Some(cluster) = durable_servers() else {
        return;
    };
    let redlock = builder(&cluster).build().await.unwrap();
    let before = waitaofs(&cluster);
    let mut guard = redlock.lock("job").wait(Wait::No).await.unwrap();
    assert!(guard.votes().granted() >= 2, "{}", guard.votes());
    guard.extend(Duration::from_secs(5)).await.unwrap();
    guard.release().await;
    let fenced = redlock
        .lock("fenced")
        .fencing()
        .wait(Wait::No)
        .await
        .unwrap();
    assert!(fenced.fencing_token().is_some());
    fenced.release().await;
    let mut leader = redlock
        .election("scheduler")
        .wait(Wait::No)
        .campaign()
        .await
        .expect("elected");
    leader.proclaim("me").await.expect("proclaimed");
    leader.resign().await;
    let after = waitaofs(&cluster);
    for (node, (before, after)) in before.iter().zip(&after).enumerate() {
        // An acquire, an extension, a fenced acquire, a term, a
        // proclamation: each a batch of its own on each node, each with
        // its WAITAOF.
        assert!(
            after - before >= 5,
            "node {node}: {before} -> {after} WAITAOF"
        );
    }
    println!("WAITAOF per node: {before:?} -> {after:?}");
}

/// A lock asked for on three servers with AOF, two of which stopped
/// syncing it (`appendfsync no`, set after the build): whether it was
/// granted, with `bug` planted or none.
fn granted_while_two_aofs_lag(bug: Option<redlock_tokio::core::planted::Bug>) -> Option<bool> {
    let cluster = durable_servers()?;
    Some(support::planted_runtime(bug).block_on(async {
        let redlock = builder(&cluster)
            .node_timeout(LAGGING_NODE_TIMEOUT)
            .ttl(Duration::from_secs(10))
            .build()
            .await
            .unwrap();
        for node in &cluster.nodes()[..2] {
            node.command(["CONFIG", "SET", "appendfsync", "no"]);
        }
        match redlock.lock("job").wait(Wait::No).await {
            Ok(guard) => {
                println!("granted: {}", guard.votes());
                guard.release().every_node().await;
                true
            }
            Err(error) => {
                println!("refused: {error}");
                let votes = error.votes().expect("votes").votes();
                for vote in &votes[..2] {
                    assert!(
                        matches!(vote, NodeVote::Failed(e) if e.kind == NodeErrorKind::NotOnDisk),
                        "a yes its AOF did not have: {vote}"
                    );
                }
                // The refused attempt is withdrawn: nothing of it is left.
                let since = std::time::Instant::now();
                while cluster
                    .nodes()
                    .iter()
                    .any(|node| !node.keys("*job*").is_empty())
                {
                    assert!(
                        since.elapsed() < Duration::from_secs(10),
                        "a key was left behind"
                    );
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                false
            }
        }
    }))
}

#[test]
fn a_yes_the_aof_does_not_have_is_not_counted() {
    init_tracing();
    if let Some(granted) = granted_while_two_aofs_lag(None) {
        assert!(!granted, "granted on votes no AOF had");
    }
}

#[test]
fn a_planted_bug_that_counts_a_yes_before_the_aof_has_it_is_caught() {
    use redlock_tokio::core::planted::Bug;
    init_tracing();
    if let Some(granted) = granted_while_two_aofs_lag(Some(Bug::VoteBeforeAof)) {
        assert!(granted, "the planted bug went unseen: not granted");
    }
}
