//! `Redlock::inspect`: every node's value, PTTL and fencing counter for a
//! lock, and a per-node error for a node that is down.

mod support;

use std::time::Duration;

use redlock_tests::RedisCluster;
use redlock_tokio::core::NodeErrorKind;
use support::{client, name};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_reads_every_node() {
    let cluster = RedisCluster::start(3);
    let redlock = client(&cluster).await;

    let free = redlock.inspect("report").await;
    assert_eq!(free.len(), 3);
    for (inspection, node) in free.iter().zip(cluster.nodes()) {
        assert_eq!(inspection.node, name(node));
        assert_eq!(inspection.result, Ok(None));
        assert_eq!(inspection.fencing_counter, None);
    }

    let guard = redlock
        .lock("report")
        .ttl(Duration::from_secs(5))
        .fencing()
        .await
        .expect("a free lock");
    let token = guard.fencing_token().expect("fenced");
    // The third node may still be answering in the background.
    support::eventually("every node holds the key", Duration::from_secs(5), || {
        cluster.nodes().iter().all(|node| node.exists("report"))
    })
    .await;
    let held = redlock.inspect("report").await;
    let stored_token = held
        .iter()
        .filter(|i| i.fencing_counter == Some(token))
        .count();
    assert!(stored_token >= 2, "{held:?}");
    for inspection in &held {
        let holding = inspection
            .result
            .as_ref()
            .expect("answered")
            .as_ref()
            .expect("held");
        assert_eq!(holding.value, guard.value().as_bytes());
        let pttl = holding.pttl.expect("a lock expires");
        assert!(
            pttl > Duration::ZERO && pttl <= Duration::from_secs(5),
            "{pttl:?}"
        );
    }

    // A node that is down is an error for that node only.
    cluster.node(1).kill();
    let partial = redlock.inspect("report").await;
    assert!(partial[0].result.as_ref().is_ok_and(Option::is_some));
    let error = partial[1].result.as_ref().expect_err("node 1 is down");
    assert!(
        matches!(
            error.kind,
            NodeErrorKind::Connection | NodeErrorKind::Timeout
        ),
        "{error}"
    );
    assert_eq!(partial[1].fencing_counter, None);
    let _ = guard.release().await;

    // A key of another type says so.
    cluster.node(0).command(["HSET", "other", "f", "v"]);
    let wrong = redlock.inspect("other").await;
    assert_eq!(
        wrong[0].result.as_ref().expect_err("a hash").kind,
        NodeErrorKind::WrongType
    );
}
