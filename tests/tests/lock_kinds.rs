//! Read-write, reentrant and multi-resource locks against three real
//! masters: who may share, who is refused, what the nodes hold, and that
//! bad input and foreign keys are typed errors that leave nothing behind.

mod support;

use std::future::IntoFuture;
use std::time::Duration;

use redis::Value;
use redlock_core::{AcquireError, ConfigError, NodeErrorKind};
use redlock_tests::RedisCluster;
use redlock_tokio::{Error, KeepAlive, LockGuard, Redlock, Wait};
use support::{assert_absent, builder, client, eventually};

/// The helper keys of a read-write lock on `resource` (no key prefix).
fn readers_key(resource: &str) -> Vec<u8> {
    [b"{", resource.as_bytes(), b"}\0readers"].concat()
}

fn writer_waiting_key(resource: &str) -> Vec<u8> {
    [b"{", resource.as_bytes(), b"}\0writer-waiting"].concat()
}

/// A reader that does not retry: refused at once when it cannot share.
async fn try_read(redlock: &Redlock, resource: &str) -> Result<LockGuard, Error> {
    redlock.lock(resource).read().wait(Wait::No).await
}

async fn try_write(redlock: &Redlock, resource: &str) -> Result<LockGuard, Error> {
    redlock.lock(resource).write().wait(Wait::No).await
}

/// How many nodes list `value` among the readers of `resource`.
fn nodes_with_reader(cluster: &RedisCluster, resource: &str, value: &[u8]) -> usize {
    cluster
        .nodes()
        .iter()
        .filter(|node| {
            !matches!(
                node.command(["ZSCORE".as_bytes(), &readers_key(resource), value]),
                Value::Nil
            )
        })
        .count()
}

fn assert_refused(result: Result<LockGuard, Error>, why: &str) {
    match result {
        Ok(guard) => panic!("{why}: granted {guard:?}"),
        Err(err) => assert!(err.is_held_by_other(), "{why}: {err:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_and_a_writer_waits_for_all_of_them() {
    let cluster = RedisCluster::start(3);
    let (a, b, c) = (
        client(&cluster).await,
        client(&cluster).await,
        client(&cluster).await,
    );

    let first = a.lock("doc").read().await.expect("a free read lock");
    let second = b.lock("doc").read().await.expect("readers share");
    let third = try_read(&c, "doc").await.expect("a third reader too");
    assert_ne!(
        first.value(),
        second.value(),
        "each reader has its own value"
    );
    eventually("both readers on every node", Duration::from_secs(8), || {
        nodes_with_reader(&cluster, "doc", first.value().as_bytes()) == 3
            && nodes_with_reader(&cluster, "doc", second.value().as_bytes()) == 3
    })
    .await;
    // Readers live in the sorted set, not in the writer's key.
    assert_absent(&cluster, "doc");

    assert_refused(try_write(&c, "doc").await, "a writer while readers hold");
    first.release().every_node().await;
    second.release().every_node().await;
    assert_refused(
        try_write(&c, "doc").await,
        "a writer while one reader holds",
    );
    third.release().every_node().await;

    let writer = try_write(&c, "doc").await.expect("free of readers");
    eventually(
        "the writer's value on every node",
        Duration::from_secs(8),
        || {
            cluster
                .nodes()
                .iter()
                .all(|node| node.get("doc").as_deref() == Some(writer.value().as_bytes()))
        },
    )
    .await;
    // Its successful acquire cleared the writer-waiting mark it left before.
    for node in cluster.nodes() {
        assert!(!node.exists(writer_waiting_key("doc")));
    }
    writer.release().every_node().await;
    assert_absent(&cluster, "doc");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_excludes_readers_and_other_writers() {
    let cluster = RedisCluster::start(3);
    let (a, b) = (client(&cluster).await, client(&cluster).await);

    let writer = a.lock("table").write().await.unwrap();
    assert_refused(try_read(&b, "table").await, "a reader while a writer holds");
    assert_refused(try_write(&b, "table").await, "a second writer");
    // An exclusive lock on the same resource is a writer too.
    assert_refused(b.lock("table").wait(Wait::No).await, "an exclusive lock");
    for node in cluster.nodes() {
        assert!(!node.exists(readers_key("table")), "no reader got in");
    }
    writer.release().every_node().await;

    let reader = try_read(&b, "table").await.expect("free again");
    reader.release().every_node().await;
    assert_absent(&cluster, readers_key("table"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_holds_off_new_readers() {
    let cluster = RedisCluster::start(3);
    let reader_client = client(&cluster).await;
    let latecomer = client(&cluster).await;
    // Notices off: the writer gets in at a retry of its own, so the test
    // sees the hold-off at work, not a wake-up.
    let writer_client = builder(&cluster)
        .wait(Wait::Retries(100))
        .retry_delay(Duration::from_millis(20))
        .retry_jitter(Duration::from_millis(20))
        .release_notices(false)
        .build()
        .await
        .unwrap();

    let reader = reader_client.lock("ledger").read().await.unwrap();
    let writer = tokio::spawn(async move {
        let guard = writer_client.lock("ledger").write().await;
        (guard, writer_client)
    });
    // The writer's first attempt found the reader and marked the lock.
    eventually(
        "the writer-waiting mark on a quorum",
        Duration::from_secs(8),
        || {
            cluster
                .nodes()
                .iter()
                .filter(|node| node.exists(writer_waiting_key("ledger")))
                .count()
                >= 2
        },
    )
    .await;
    // A stream of new readers is refused while the writer waits...
    for _ in 0..3 {
        assert_refused(
            try_read(&latecomer, "ledger").await,
            "a new reader while a writer waits",
        );
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    // ...while the reader that came first still holds and can extend.
    let mut reader = reader;
    reader
        .extend(Duration::from_secs(10))
        .await
        .expect("a reader already in is not cut off");

    reader.release().every_node().await;
    let (guard, _writer_client) = writer.await.unwrap();
    let guard = guard.expect("the writer gets in once the reader left");
    assert_refused(
        try_read(&latecomer, "ledger").await,
        "a new reader while the writer holds",
    );
    guard.release().every_node().await;
    let reader = try_read(&latecomer, "ledger")
        .await
        .expect("readers are welcome again");
    reader.release().every_node().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_never_release_each_other() {
    let cluster = RedisCluster::start(3);
    let (a, b, c) = (
        client(&cluster).await,
        client(&cluster).await,
        client(&cluster).await,
    );
    let first = a.lock("report").read().await.unwrap();
    let second = b.lock("report").read().await.unwrap();
    let second_value = second.value().clone();
    eventually("both readers everywhere", Duration::from_secs(8), || {
        nodes_with_reader(&cluster, "report", second_value.as_bytes()) == 3
            && nodes_with_reader(&cluster, "report", first.value().as_bytes()) == 3
    })
    .await;

    let report = first.release().every_node().await;
    assert_eq!((report.released(), report.failed()), (3, 0), "{report}");
    assert_eq!(
        nodes_with_reader(&cluster, "report", second_value.as_bytes()),
        3
    );
    assert_refused(
        try_write(&c, "report").await,
        "the second reader still holds",
    );
    assert!(!second.is_lost());

    // Releasing a reader's value by hand as if it were an exclusive lock
    // touches neither the readers nor anything else.
    let report = c.release_value("report", &second_value).await;
    assert_eq!(report.released(), 0, "{report}");
    assert_eq!(
        nodes_with_reader(&cluster, "report", second_value.as_bytes()),
        3
    );

    let report = second.release().every_node().await;
    assert_eq!(report.released(), 3, "{report}");
    assert_absent(&cluster, readers_key("report"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_lock_extends_and_is_kept_alive() {
    let cluster = RedisCluster::start(3);
    let redlock = builder(&cluster)
        .ttl(Duration::from_millis(600))
        .build()
        .await
        .unwrap();
    let writer = client(&cluster).await;

    let mut reader = redlock.lock("feed").read().await.unwrap();
    let validity = reader
        .extend(Duration::from_secs(5))
        .await
        .expect("a held read lock extends");
    assert!(validity > Duration::from_millis(4_500), "{validity:?}");
    assert_eq!(reader.extensions(), 1);
    // The reader's score is its expiry on the node's clock, and the sorted
    // set lives as long as its longest reader.
    eventually("the readers set lives ~5 s", Duration::from_secs(8), || {
        cluster
            .nodes()
            .iter()
            .all(|node| node.pttl(readers_key("feed")) > 3_000)
    })
    .await;
    reader.release().every_node().await;

    // Kept alive well past its 600 ms TTL, and still excluding a writer.
    let kept = redlock
        .lock("feed")
        .read()
        .keep_alive(KeepAlive::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(!kept.is_lost(), "{kept:?}");
    assert!(kept.extensions() >= 2, "{kept:?}");
    assert!(kept.loss().is_none());
    assert_refused(
        try_write(&writer, "feed").await,
        "a writer while kept alive",
    );
    let report = kept.release().every_node().await;
    assert_eq!(report.released(), 3, "{report}");
    try_write(&writer, "feed")
        .await
        .unwrap()
        .release()
        .every_node()
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reentrant_lock_is_shared_by_its_owner_only() {
    let cluster = RedisCluster::start(3);
    let (a, b) = (client(&cluster).await, client(&cluster).await);

    let outer = a.lock("batch").reentrant("worker-1").await.unwrap();
    // The same owner again, from another client: a second acquisition.
    let inner = b
        .lock("batch")
        .reentrant("worker-1")
        .await
        .expect("reentry");
    assert_ne!(outer.value(), inner.value());
    let other = b.lock("batch").reentrant("worker-2").wait(Wait::No).await;
    assert_refused(other, "another owner");
    let err = b.lock("batch").wait(Wait::No).await.unwrap_err();
    // An exclusive lock finds a hash, not a lock value: a typed node error,
    // never a grant.
    assert!(
        err.votes()
            .unwrap()
            .failures()
            .all(|(_, e)| e.kind == NodeErrorKind::WrongType),
        "{err}"
    );

    // The hash on every node: the owner and one field per acquisition,
    // with a TTL.
    eventually(
        "both acquisitions on every node",
        Duration::from_secs(8),
        || {
            cluster.nodes().iter().all(|node| {
                let fields = hash(node, "batch");
                fields.len() == 3
                    && fields.get("owner").map(String::as_str) == Some("worker-1")
                    && fields.get(outer.value().as_str()).map(String::as_str) == Some("1")
                    && fields.get(inner.value().as_str()).map(String::as_str) == Some("1")
            })
        },
    )
    .await;
    for node in cluster.nodes() {
        assert!((1..=10_000).contains(&node.pttl("batch")));
    }

    // Releasing one acquisition keeps the lock held by the owner.
    let report = inner.release().every_node().await;
    assert_eq!(report.released(), 3, "{report}");
    for node in cluster.nodes() {
        let fields = hash(node, "batch");
        assert_eq!(fields.len(), 2, "{fields:?}");
        assert!(fields.contains_key(outer.value().as_str()));
    }
    let other = b.lock("batch").reentrant("worker-2").wait(Wait::No).await;
    assert_refused(other, "another owner while one acquisition is left");

    // Releasing the last one frees it.
    outer.release().every_node().await;
    assert_absent(&cluster, "batch");
    let other = b.lock("batch").reentrant("worker-2").await.expect("free");
    other.release().every_node().await;
    assert_absent(&cluster, "batch");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentrancy_survives_a_client_restart_with_the_same_owner() {
    let cluster = RedisCluster::start(3);
    let host_7 = |redlock: &Redlock| {
        redlock
            .lock("deploy")
            .reentrant("host-7")
            .ttl(Duration::from_secs(2))
    };

    // A process takes the lock and dies without releasing it.
    let crashed = client(&cluster).await;
    let lost_value = host_7(&crashed).await.unwrap().forget();
    drop(crashed);

    // Its successor, a new client with the same owner id, enters at once.
    let restarted = client(&cluster).await;
    let guard = host_7(&restarted).await.expect("same owner");
    let stranger = client(&cluster).await;
    let refused = stranger
        .lock("deploy")
        .reentrant("host-8")
        .wait(Wait::No)
        .await;
    assert_refused(refused, "another owner");
    guard.release().every_node().await;
    // The dead process's acquisition is still counted until its TTL ends:
    // a release frees only its own.
    for node in cluster.nodes() {
        let fields = hash(node, "deploy");
        assert_eq!(fields.len(), 2, "{fields:?}");
        assert!(fields.contains_key(lost_value.as_str()));
    }
    eventually(
        "the dead acquisition expires with its TTL",
        Duration::from_secs(4),
        || cluster.nodes().iter().all(|node| !node.exists("deploy")),
    )
    .await;
    stranger
        .lock("deploy")
        .reentrant("host-8")
        .await
        .expect("free after the TTL")
        .release()
        .every_node()
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reentrant_lock_extends_and_is_kept_alive() {
    let cluster = RedisCluster::start(3);
    let redlock = builder(&cluster)
        .ttl(Duration::from_millis(600))
        .build()
        .await
        .unwrap();
    let mut guard = redlock.lock("cron").reentrant("me").await.unwrap();
    guard.extend(Duration::from_secs(5)).await.unwrap();
    eventually("the hash lives ~5 s", Duration::from_secs(8), || {
        cluster.nodes().iter().all(|node| node.pttl("cron") > 3_000)
    })
    .await;
    guard.release().every_node().await;
    assert_absent(&cluster, "cron");

    // Kept alive well past its 600 ms TTL, beside an entry of the same
    // owner that is not.
    let kept = redlock
        .lock("cron")
        .reentrant("me")
        .keep_alive(KeepAlive::default())
        .await
        .unwrap();
    let again = redlock.lock("cron").reentrant("me").await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(!kept.is_lost() && kept.loss().is_none(), "{kept:?}");
    assert!(kept.extensions() >= 2, "{kept:?}");
    again.release().every_node().await;
    kept.release().every_node().await;
    assert_absent(&cluster, "cron");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_resource_lock_and_single_locks_exclude_each_other() {
    let cluster = RedisCluster::start(3);
    let (a, b) = (client(&cluster).await, client(&cluster).await);

    let both = a.lock_all(["a", "b"]).await.unwrap();
    eventually(
        "both keys hold one value everywhere",
        Duration::from_secs(8),
        || {
            cluster.nodes().iter().all(|node| {
                node.get("a").as_deref() == Some(both.value().as_bytes())
                    && node.get("b").as_deref() == Some(both.value().as_bytes())
            })
        },
    )
    .await;
    assert_refused(
        b.lock("b").wait(Wait::No).await,
        "a single lock inside a multi lock",
    );
    assert_refused(
        b.lock("a").wait(Wait::No).await,
        "a single lock inside a multi lock",
    );
    let report = both.release().every_node().await;
    assert_eq!(report.released(), 3, "{report}");
    assert_absent(&cluster, "a");
    assert_absent(&cluster, "b");

    // The other way round: a held single lock makes the multi lock fail,
    // and none of its keys is left anywhere, not even the free one.
    let single = b.lock("b").wait(Wait::No).await.unwrap();
    let refused = a.lock_all(["a", "b"]).wait(Wait::No).await;
    assert_refused(refused, "a multi lock over a held resource");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_absent(&cluster, "a");
    for node in cluster.nodes() {
        assert_eq!(node.get("b").as_deref(), Some(single.value().as_bytes()));
    }
    single.release().every_node().await;

    // Named twice is locked once; release frees all.
    let three = a.lock_all(["c", "a", "b", "a"]).await.unwrap();
    assert_eq!(three.resource(), b"c");
    assert_eq!(three.key().as_bytes(), b"a", "keys are sorted");
    for resource in ["a", "b", "c"] {
        assert_refused(
            b.lock(resource).wait(Wait::No).await,
            "every resource is held",
        );
    }
    three.release().every_node().await;
    for resource in ["a", "b", "c"] {
        assert_absent(&cluster, resource);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_typed_configuration_error() {
    let cluster = RedisCluster::start(3);
    let redlock = client(&cluster).await;

    let err = redlock.lock_all::<&str>([]).await.unwrap_err();
    assert!(
        matches!(err, Error::Config(ConfigError::NoResources)),
        "{err:?}"
    );
    let err = redlock.lock("r").reentrant("").await.unwrap_err();
    assert!(
        matches!(err, Error::Config(ConfigError::EmptyOwner)),
        "{err:?}"
    );
    // Nothing was ever sent for the rejected calls.
    for node in cluster.nodes() {
        assert!(node.keys("*").is_empty(), "{:?}", node.keys("*"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_of_another_type_is_a_wrong_type_error_for_every_kind() {
    let cluster = RedisCluster::start(3);
    let redlock = client(&cluster).await;
    for node in cluster.nodes() {
        node.command(["RPUSH", "queue", "job"]);
    }
    // Awaited one by one: a request does nothing until then.
    let requests = [
        ("exclusive", redlock.lock("queue").into_future()),
        ("fenced", redlock.lock("queue").fencing().into_future()),
        ("read", redlock.lock("queue").read().into_future()),
        ("write", redlock.lock("queue").write().into_future()),
        (
            "reentrant",
            redlock.lock("queue").reentrant("o").into_future(),
        ),
        ("multi", redlock.lock_all(["free", "queue"]).into_future()),
    ];
    for (spec, request) in requests {
        let err = request.await.unwrap_err();
        let Error::Acquire(AcquireError::WrongType {
            votes, attempts, ..
        }) = &err
        else {
            panic!("{spec}: {err:?}");
        };
        assert_eq!(*attempts, 1, "{spec}: {err}");
        assert!(!err.is_held_by_other(), "{spec}: {err}");
        assert!(votes.failed() >= 2, "{spec}: {votes}");
        assert!(
            votes
                .failures()
                .all(|(_, error)| error.kind == NodeErrorKind::WrongType),
            "{spec}: {votes}"
        );
        assert!(err.to_string().contains("another type"), "{err}");
    }
    // Nothing held or left: the list is untouched and no lock key exists.
    tokio::time::sleep(Duration::from_millis(100)).await;
    for node in cluster.nodes() {
        assert_eq!(
            node.keys("*"),
            vec![b"queue".to_vec()],
            "only the list is left"
        );
        assert_eq!(node.command(["LLEN", "queue"]), Value::Int(1));
    }
}

/// `HGETALL key` on one node, as text.
fn hash(node: &redlock_tests::RedisNode, key: &str) -> std::collections::BTreeMap<String, String> {
    let Value::Array(items) = node.command(["HGETALL", key]) else {
        panic!("HGETALL answered something else");
    };
    let text = |value: &Value| match value {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        other => panic!("{other:?}"),
    };
    items
        .chunks(2)
        .map(|pair| (text(&pair[0]), text(&pair[1])))
        .collect()
}
