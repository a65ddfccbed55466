//! The everyday path against three healthy masters: lock, refuse, release,
//! validity, and that a release never deletes a value that is not ours.

mod support;

use std::time::{Duration, Instant};

use redlock_core::{AcquireError, ConfigError, NodeVote};
use redlock_tests::RedisCluster;
use redlock_tokio::core::LockValue;
use redlock_tokio::{BoxError, Error, LossReason, Redlock, RunError, Wait};
use support::{QUICK, assert_absent, builder, client, eventually, name, timed};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_client_is_refused_until_the_first_releases() {
    let cluster = RedisCluster::start(3);
    let a = client(&cluster).await;
    let b = client(&cluster).await;

    let guard = a.lock("job").wait(Wait::No).await.expect("a free lock");
    // The decision came with a quorum; the third node may answer just after.
    eventually("every node holds a's value", Duration::from_secs(8), || {
        cluster
            .nodes()
            .iter()
            .all(|node| node.get("job").as_deref() == Some(guard.value().as_bytes()))
    })
    .await;

    let err = b.lock("job").wait(Wait::No).await.expect_err("held by a");
    assert!(err.is_held_by_other(), "{err}");
    assert!(
        matches!(err, Error::Acquire(AcquireError::Held { .. })),
        "{err:?}"
    );
    // Two refusals out of three already rule out a quorum.
    let votes = err.votes().expect("a round ran");
    assert!(votes.held_by_other() >= 2, "{votes}");
    let holders: Vec<&str> = votes.holders().collect();
    for holder in &holders {
        assert!(err.to_string().contains(holder), "{err}");
        assert!(cluster.nodes().iter().any(|node| name(node) == *holder));
    }

    let report = guard.release().every_node().await;
    assert_eq!(
        (report.released(), report.not_held(), report.failed()),
        (3, 0, 0)
    );
    assert_absent(&cluster, "job");

    let guard = b.lock("job").wait(Wait::No).await.expect("free again");
    assert!(guard.votes().granted() >= 2);
    guard.release().every_node().await;
    assert_absent(&cluster, "job");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_retries_until_the_holder_releases() {
    let cluster = RedisCluster::start(3);
    let a = client(&cluster).await;
    let b = builder(&cluster)
        .wait(Wait::Retries(100))
        .retry_delay(Duration::from_millis(10))
        .retry_jitter(Duration::from_millis(20))
        .build()
        .await
        .unwrap();

    let guard = a.lock("queue").await.unwrap();
    let holder = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        guard.release().every_node().await
    });
    let guard = b.lock("queue").await.expect("b gets it once a releases");
    // What the test names: a's release freed the lock and b, retrying, got
    // it. Not that every node answered a's release within the node timeout:
    // a busy machine may let one reply come late (it then counts as failed).
    let report = holder.await.unwrap();
    assert!(report.frees_lock(), "a's release: {report}");
    assert!(
        guard.votes().round().0 > 1,
        "b had to retry: {}",
        guard.votes()
    );
    guard.release().every_node().await;
}

/// A call's own wait limit: the waiter gives up with the deadline error,
/// naming its limit, although its client would retry for a minute, and the
/// holder keeps the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_at_most_gives_up_with_the_deadline_error() {
    let cluster = RedisCluster::start(3);
    let holder = client(&cluster).await;
    let waiter = builder(&cluster)
        .wait(Wait::AtMost(Duration::from_secs(60)))
        .build()
        .await
        .unwrap();
    let guard = holder
        .lock("busy")
        .wait(Wait::No)
        .await
        .expect("a free lock");

    let started = Instant::now();
    let error = waiter
        .lock("busy")
        .wait(Wait::AtMost(Duration::from_millis(300)))
        .await
        .expect_err("held by the holder");
    let waited = started.elapsed();
    println!("gave up after {waited:?}");
    let Error::Acquire(AcquireError::DeadlineExceeded {
        deadline, attempts, ..
    }) = &error
    else {
        panic!("expected the deadline error, got {error:?}");
    };
    assert_eq!(*deadline, Duration::from_millis(300), "{error}");
    assert!(error.is_held_by_other(), "{error}");
    assert!(*attempts >= 1);
    // Not the client's minute: only that it gave up long before it.
    assert!(waited < Duration::from_secs(30), "{waited:?}");
    // The waiter left nothing behind: every node holds the holder's value
    // or nothing (on a loaded machine the waiter's first attempt can reach a
    // node before the holder's background SET, and withdraws it), and the
    // holder's value is still on a quorum.
    eventually("no value but the holder's on any node", QUICK, || {
        let values: Vec<_> = cluster
            .nodes()
            .iter()
            .map(|node| node.get("busy"))
            .collect();
        // The waiter may have marked the holder's value as waited for
        // (`redlock_core::waited`): still the holder's.
        let ours = |v: &Option<Vec<u8>>| {
            v.as_deref()
                .is_some_and(|v| redlock_core::waited::is_ours(v, guard.value().as_bytes()))
        };
        values.iter().all(|v| v.is_none() || ours(v))
            && values.iter().filter(|v| ours(v)).count() >= 2
    })
    .await;
    assert!(!guard.is_lost());

    let zero = waiter
        .lock("busy")
        .wait(Wait::AtMost(Duration::ZERO))
        .await
        .expect_err("a zero wait limit");
    assert!(
        matches!(zero, Error::Config(ConfigError::ZeroDeadline)),
        "{zero:?}"
    );
    guard.release().every_node().await;
    // Free now: a limited wait takes it at once.
    let guard = waiter
        .lock("busy")
        .wait(Wait::AtMost(Duration::from_secs(5)))
        .await
        .expect("a free lock");
    guard.release().every_node().await;
    assert_absent(&cluster, "busy");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validity_after_acquire_is_close_to_the_ttl() {
    let cluster = RedisCluster::start(3);
    let redlock = builder(&cluster)
        .ttl(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let started = Instant::now();
    let guard = redlock.lock("v").await.unwrap();
    let validity = guard.validity();
    let took = started.elapsed();
    // 1 s - 12 ms drift - the time the round took, which is at most the time
    // the call took (measured here, so a slow machine cannot fail this).
    let bound = Duration::from_millis(988);
    assert!(validity <= bound, "{validity:?}");
    assert!(validity + took >= bound, "{validity:?} after {took:?}");
    assert!(!guard.is_lost());
    assert_eq!(guard.ttl(), Duration::from_secs(1));
    eventually(
        "every node has the key with a TTL",
        Duration::from_secs(8),
        || {
            cluster
                .nodes()
                .iter()
                .all(|node| (1..=1000).contains(&node.pttl("v")))
        },
    )
    .await;
    guard.release().every_node().await;

    // A per-call TTL.
    let started = Instant::now();
    let guard = redlock
        .lock("v")
        .ttl(Duration::from_secs(5))
        .wait(Wait::No)
        .await
        .unwrap();
    // 5 s - 52 ms drift - the round.
    let validity = guard.validity();
    let took = started.elapsed();
    let bound = Duration::from_millis(4_948);
    assert!(
        validity <= bound && validity + took >= bound,
        "{validity:?} after {took:?}"
    );
    eventually("every node has the 5 s TTL", Duration::from_secs(8), || {
        cluster.nodes().iter().all(|node| node.pttl("v") > 4_000)
    })
    .await;
    guard.release().every_node().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_never_deletes_a_value_that_is_not_ours() {
    let cluster = RedisCluster::start(3);
    let redlock = client(&cluster).await;

    // Someone else's value on every node.
    let guard = redlock.lock("shared").await.unwrap();
    for node in cluster.nodes() {
        node.set("shared", "someone-else");
    }
    let report = guard.release().every_node().await;
    assert_eq!(
        (report.released(), report.not_held(), report.failed()),
        (0, 3, 0)
    );
    for node in cluster.nodes() {
        assert_eq!(node.get("shared").as_deref(), Some(&b"someone-else"[..]));
    }
    for node in cluster.nodes() {
        node.command(["DEL", "shared"]);
    }

    // On one node only.
    let guard = redlock.lock("shared").await.unwrap();
    cluster.node(1).set("shared", "someone-else");
    let report = guard.release().every_node().await;
    assert_eq!((report.released(), report.not_held()), (2, 1));
    assert!(matches!(
        report.votes().votes()[1],
        NodeVote::HeldByOther(_)
    ));
    assert_eq!(
        cluster.node(1).get("shared").as_deref(),
        Some(&b"someone-else"[..])
    );
    assert!(!cluster.node(0).exists("shared"));

    // Releasing a value by hand touches only that value.
    let report = redlock
        .release_value("shared", &LockValue::from_string("not-the-value"))
        .await;
    assert_eq!(report.released(), 0);
    assert!(cluster.node(1).exists("shared"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_resources_and_key_prefix() {
    let cluster = RedisCluster::start(3);
    let redlock = builder(&cluster).key_prefix("lock:").build().await.unwrap();
    let resource: &[u8] = b"bin\xff\x00ary";
    let guard = redlock.lock(resource).wait(Wait::No).await.unwrap();
    assert_eq!(guard.resource(), resource);
    assert_eq!(guard.key().as_bytes(), b"lock:bin\xff\x00ary");
    eventually(
        "the prefixed key holds our value",
        Duration::from_secs(8),
        || cluster.node(2).get(b"lock:bin\xff\x00ary").as_deref() == Some(guard.value().as_bytes()),
    )
    .await;
    // 20 random bytes, hex.
    assert_eq!(guard.value().as_str().len(), 40);
    assert!(!cluster.node(2).exists(resource));
    guard.release().every_node().await;
    assert_absent(&cluster, b"lock:bin\xff\x00ary");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_guard_releases_in_the_background() {
    let cluster = RedisCluster::start(3);
    let redlock = client(&cluster).await;
    let guard = redlock.lock("dropped").await.unwrap();
    drop(guard);
    eventually(
        "the dropped guard's key is deleted",
        Duration::from_secs(8),
        || cluster.nodes().iter().all(|node| !node.exists("dropped")),
    )
    .await;
    // And the lock is free for someone else.
    redlock
        .lock("dropped")
        .wait(Wait::No)
        .await
        .unwrap()
        .release()
        .every_node()
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgotten_lock_stays_until_released_by_value() {
    let cluster = RedisCluster::start(3);
    let redlock = client(&cluster).await;
    let value = redlock.lock("cli").await.unwrap().forget();
    tokio::time::sleep(Duration::from_millis(100)).await;
    for node in cluster.nodes() {
        assert_eq!(node.get("cli").as_deref(), Some(value.as_bytes()));
    }
    let err = redlock.lock("cli").wait(Wait::No).await.unwrap_err();
    assert!(err.is_held_by_other());

    let report = redlock.release_value("cli", &value).await;
    assert_eq!(report.released(), 3);
    assert_absent(&cluster, "cli");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_returns_the_work_output_and_releases() {
    let cluster = RedisCluster::start(3);
    let redlock = client(&cluster).await;
    let other = client(&cluster).await;
    let output = redlock
        .lock("work")
        .run(async |lock| {
            assert!(!lock.is_lost());
            let err = other.lock("work").wait(Wait::No).await.unwrap_err();
            assert!(err.is_held_by_other());
            Ok(42)
        })
        .await
        .unwrap();
    assert_eq!(output, 42);
    // `run` returns once a quorum released; the last node's delete may
    // still be on its way.
    redlock.shutdown().await;
    assert_absent(&cluster, "work");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_shows_the_work_its_lock() {
    let cluster = RedisCluster::start(3);
    let redlock = client(&cluster).await;
    // An earlier holder, so that the token has something to exceed.
    let first = redlock.lock("shown").fencing().await.unwrap();
    let earlier = first.fencing_token().expect("fenced");
    first.release().every_node().await;
    let token = redlock
        .lock("shown")
        .fencing()
        .run(async |lock| {
            assert_eq!(lock.resource(), b"shown");
            assert_eq!(lock.key().as_bytes(), b"shown");
            // The value is the one on the nodes (the last node's answer may
            // come after the quorum's: it completes in the background).
            eventually("the value on every node", QUICK, || {
                cluster
                    .nodes()
                    .iter()
                    .all(|node| node.get("shown").as_deref() == Some(lock.value().as_bytes()))
            })
            .await;
            let validity = lock.validity();
            assert!(validity > Duration::from_secs(9), "{validity:?}");
            assert!(!lock.is_lost() && !lock.loss_signal().is_lost());
            Ok(lock.fencing_token())
        })
        .await
        .unwrap();
    assert!(
        token.expect("fenced") > earlier,
        "{token:?} after {earlier}"
    );
    // As above: the last node's delete may still be on its way.
    redlock.shutdown().await;
    assert_absent(&cluster, "shown");
}

/// The work's error (any type, boxed) and the lock's own come back in one
/// `RunError`, so one `?` reads both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_returns_the_work_error_through_one_question_mark() {
    // The work writes under a fencing token and fails on demand; `?` on
    // `run` is its caller's only error handling.
    async fn export(redlock: &Redlock, fail: bool) -> Result<u64, BoxError> {
        let token = redlock
            .lock("export")
            .fencing()
            .wait(Wait::No)
            .run(async |lock| {
                let token = lock
                    .fencing_token()
                    .ok_or("a fenced lock without a token")?;
                if fail {
                    Err(std::io::Error::other("disk full"))?;
                }
                Ok(token)
            })
            .await?;
        Ok(token)
    }

    let cluster = RedisCluster::start(3);
    let redlock = client(&cluster).await;

    let first = export(&redlock, false).await.expect("the work succeeds");
    let second = export(&redlock, false).await.expect("the work succeeds");
    assert!(second > first, "{second} after {first}");

    let failed = export(&redlock, true).await.expect_err("the work fails");
    let io = failed
        .downcast_ref::<RunError>()
        .and_then(RunError::as_work)
        .and_then(|work| work.downcast_ref::<std::io::Error>())
        .unwrap_or_else(|| panic!("the work's own error, got {failed:?}"));
    assert_eq!(io.to_string(), "disk full");
    // `run` released the lock although the work failed (decided on a
    // quorum; the last node's delete may still be on its way).
    redlock.settled().await;
    assert_absent(&cluster, "export");

    // The lock's error, in the same type.
    let holder = redlock.lock("export").await.unwrap();
    let refused = export(&redlock, false).await.expect_err("held");
    let error = refused
        .downcast_ref::<RunError>()
        .and_then(RunError::as_lock)
        .unwrap_or_else(|| panic!("the lock's error, got {refused:?}"));
    assert!(error.is_held_by_other(), "{error}");
    holder.release().every_node().await;
}

/// A guard without keep-alive is lost when its validity runs out: `lost()`
/// fires with `Expired` then, not before, and every view of the loss
/// agrees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_without_keep_alive_is_lost_when_its_ttl_runs_out() {
    let cluster = RedisCluster::start(3);
    let redlock = client(&cluster).await;
    let guard = redlock
        .lock("expiring")
        .ttl(Duration::from_millis(500))
        .await
        .unwrap();
    let signal = guard.loss_signal();
    assert!(!guard.is_lost() && !signal.is_lost());
    assert_eq!(guard.loss(), None);

    let reason = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("lost within the TTL and some slack");
    assert_eq!(reason, LossReason::Expired);
    assert!(Instant::now() >= guard.valid_until(), "fired early");
    assert!(guard.is_lost() && signal.is_lost());
    assert_eq!(guard.loss(), Some(LossReason::Expired));
    assert_eq!(signal.lost().await, LossReason::Expired);
    assert_eq!(guard.validity(), Duration::ZERO);
    // Nothing extended it: the nodes let the key expire, and the lock is
    // free for another owner.
    eventually("the key expired on every node", QUICK, || {
        cluster.nodes().iter().all(|node| !node.exists("expiring"))
    })
    .await;
    redlock
        .lock("expiring")
        .wait(Wait::No)
        .await
        .expect("free after the TTL")
        .release()
        .every_node()
        .await;
}

/// A lock let go is not lost: the loss signal of a released guard never
/// fires, even once its validity would have run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_lock_is_never_reported_lost() {
    let cluster = RedisCluster::start(3);
    let redlock = client(&cluster).await;
    let guard = redlock
        .lock("let-go")
        .ttl(Duration::from_millis(300))
        .await
        .unwrap();
    let signal = guard.loss_signal();
    let until = guard.valid_until();
    guard.release().every_node().await;
    tokio::time::sleep_until((until + Duration::from_millis(100)).into()).await;
    assert!(!signal.is_lost());
    assert!(
        tokio::time::timeout(Duration::from_millis(200), signal.lost())
            .await
            .is_err(),
        "a released lock was reported lost"
    );
}

/// A TTL, a fencing token and a wait limit in one expression: each is
/// honoured, whatever else the request asks for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_request_with_ttl_fencing_and_a_wait_limit() {
    let cluster = RedisCluster::start(3);
    let redlock = client(&cluster).await;
    let ttl = Duration::from_secs(3);

    let guard = redlock
        .lock("ledger")
        .ttl(ttl)
        .fencing()
        .wait(Wait::AtMost(Duration::from_secs(2)))
        .await
        .expect("a free lock");
    let token = guard.fencing_token().expect("fenced");
    assert_eq!(guard.ttl(), ttl);
    assert!(guard.validity() <= ttl && !guard.validity().is_zero());
    eventually("every node has the 3 s TTL", QUICK, || {
        cluster
            .nodes()
            .iter()
            .all(|node| (1..=3_000).contains(&node.pttl("ledger")))
    })
    .await;

    // Held: a waiter gives up at its limit, with the deadline error.
    let (error, waited) = timed(
        redlock
            .lock("ledger")
            .ttl(ttl)
            .fencing()
            .wait(Wait::AtMost(Duration::from_millis(300))),
    )
    .await;
    let error = error.expect_err("held");
    assert!(
        matches!(
            &error,
            Error::Acquire(AcquireError::DeadlineExceeded { deadline, .. })
                if *deadline == Duration::from_millis(300)
        ),
        "{error:?}"
    );
    assert!(waited >= Duration::from_millis(300), "{waited:?}");

    // Released within the limit: the waiter gets it, with a larger token.
    let holder = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        guard.release().every_node().await
    });
    let next = redlock
        .lock("ledger")
        .ttl(ttl)
        .fencing()
        .wait(Wait::AtMost(Duration::from_secs(5)))
        .await
        .expect("released within the limit");
    holder.await.unwrap();
    assert!(
        next.fencing_token().expect("fenced") > token,
        "{:?} after {token}",
        next.fencing_token()
    );
    assert_eq!(next.ttl(), ttl);
    next.release().every_node().await;
    assert_absent(&cluster, "ledger");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configuration_errors_are_typed() {
    // No server is contacted: validation comes first.
    let err = Redlock::connect(["redis://127.0.0.1:1", "redis://127.0.0.1:1/0"])
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Config(ConfigError::DuplicateNode { node }) if node == "127.0.0.1:1/0"),
        "{err:?}"
    );
    let err = Redlock::connect(["redis://LOCALHOST:1", "redis://localhost:1"])
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        Error::Config(ConfigError::DuplicateNode { .. })
    ));
    let none: [&str; 0] = [];
    let err = Redlock::connect(none).await.unwrap_err();
    assert!(matches!(err, Error::Config(ConfigError::NoNodes)));
    let err = Redlock::builder(["redis://127.0.0.1:1"])
        .ttl(Duration::ZERO)
        .build()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Config(ConfigError::ZeroTtl)));
    let err = Redlock::builder(["redis://127.0.0.1:1"])
        .drift_factor(1.5)
        .build()
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        Error::Config(ConfigError::DriftFactor { .. })
    ));

    let cluster = RedisCluster::start(1);
    let redlock = client(&cluster).await;
    let err = redlock
        .lock("r")
        .ttl(Duration::ZERO)
        .wait(Wait::No)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Config(ConfigError::ZeroTtl)));
    assert!(err.to_string().starts_with("invalid configuration"));
}
