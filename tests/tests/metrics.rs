//! The client's metrics (feature `metrics`), read with a debugging recorder
//! after a scripted sequence on three real masters: a lock granted, a
//! try-lock refused, a waiter woken by a release notice, releases, an
//! extension, a kept-alive lock lost, and a master killed, whose failed vote
//! is counted against its address.

mod support;

use std::collections::HashMap;
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::{CompositeKey, MetricKind};
use redlock_tests::RedisCluster;
use redlock_tokio::{ExtendError, KeepAlive, LossReason, Wait};
use support::{QUICK, builder, eventually, subscribers};

/// A snapshot's values by metric kind, name and sorted labels.
type Values = HashMap<(MetricKind, String, Vec<(String, String)>), DebugValue>;

fn values(
    snapshot: Vec<(
        CompositeKey,
        Option<metrics::Unit>,
        Option<metrics::SharedString>,
        DebugValue,
    )>,
) -> (Values, HashMap<String, String>) {
    let mut values = Values::new();
    let mut help = HashMap::new();
    for (key, _unit, description, value) in snapshot {
        let (kind, key) = key.into_parts();
        let mut labels: Vec<(String, String)> = key
            .labels()
            .map(|label| (label.key().to_owned(), label.value().to_owned()))
            .collect();
        labels.sort();
        if let Some(description) = description {
            help.insert(key.name().to_owned(), description.to_string());
        }
        values.insert((kind, key.name().to_owned(), labels), value);
    }
    (values, help)
}

fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut labels: Vec<(String, String)> = pairs
        .iter()
        .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
        .collect();
    labels.sort();
    labels
}

fn counter(values: &Values, name: &str, pairs: &[(&str, &str)]) -> u64 {
    match values.get(&(MetricKind::Counter, name.to_owned(), labels(pairs))) {
        Some(DebugValue::Counter(count)) => *count,
        None => 0,
        other => panic!("{name}: {other:?}"),
    }
}

fn samples(values: &Values, name: &str, pairs: &[(&str, &str)]) -> usize {
    match values.get(&(MetricKind::Histogram, name.to_owned(), labels(pairs))) {
        Some(DebugValue::Histogram(samples)) => samples.len(),
        None => 0,
        other => panic!("{name}: {other:?}"),
    }
}

/// Runs `body` with a debugging recorder as this thread's, on a
/// current-thread runtime (every task of the clients runs here, so every
/// metric reaches the recorder); `body` and the caller read it through the
/// snapshotter.
fn recorded<F: Future<Output = ()>>(body: impl FnOnce(Snapshotter) -> F) -> Snapshotter {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(body(snapshotter.clone()));
    });
    snapshotter
}

#[test]
fn a_scripted_sequence_is_counted() {
    let cluster = RedisCluster::start(3);
    let mut names: Vec<String> = Vec::new();
    let mut value_text = String::new();
    let started = std::time::Instant::now();
    let snapshotter = recorded(async |_| {
        let holder = builder(&cluster).build().await.unwrap();
        // Only a notice wakes this waiter within the test.
        let waiter = builder(&cluster)
            .retry_delay(Duration::from_secs(10))
            .build()
            .await
            .unwrap();

        let mut guard = holder
            .lock("metered")
            .wait(Wait::No)
            .await
            .expect("a free lock");
        guard
            .extend(Duration::from_secs(10))
            .await
            .expect("extended");
        let refused = waiter
            .lock("metered")
            .wait(Wait::No)
            .await
            .expect_err("held");
        assert!(refused.is_held_by_other(), "{refused}");

        let waiting = tokio::spawn({
            let waiter = waiter.clone();
            async move { waiter.lock("metered").await }
        });
        eventually("the waiter listens on every node", QUICK * 4, || {
            cluster
                .nodes()
                .iter()
                .all(|node| subscribers(node, "metered") >= 1)
        })
        .await;
        guard.release().every_node().await;
        let second = tokio::time::timeout(Duration::from_secs(8), waiting)
            .await
            .expect("woken by the release notice, not its 10 s timer")
            .unwrap()
            .expect("the lock, once released");
        second.release().every_node().await;

        // A kept-alive lock whose value an operator releases: its
        // next extension finds it gone, and the keep-alive loses it.
        let kept = holder
            .lock("kept")
            .ttl(Duration::from_secs(1))
            .keep_alive(KeepAlive::default())
            .await
            .expect("a free lock");
        let value = kept.value().clone();
        value_text = value.as_str().to_owned();
        holder.release_value("kept", &value).await;
        let reason = tokio::time::timeout(Duration::from_secs(8), kept.lost())
            .await
            .expect("lost at its first extension");
        assert!(
            matches!(reason, LossReason::ExtendFailed(ExtendError::Gone { .. })),
            "{reason}"
        );
        kept.release().every_node().await;

        // A master killed: the next release's round counts its
        // failed vote (refused connection or timeout).
        names = holder.nodes().to_vec();
        let guard = holder.lock("after-kill").await.expect("a free lock");
        cluster.node(2).kill();
        let report = guard.release().every_node().await;
        assert_eq!(report.failed(), 1, "{report}");
        holder.shutdown().await;
        waiter.shutdown().await;
    });

    let elapsed = started.elapsed();
    let (values, help) = values(snapshotter.snapshot().into_vec());
    let mut shown: Vec<String> = values
        .iter()
        .map(|(key, value)| format!("{key:?} = {value:?}"))
        .collect();
    shown.sort();
    println!("{}", shown.join("\n"));
    let exclusive = |outcome| [("kind", "exclusive"), ("outcome", outcome)];
    let granted = exclusive("granted");
    assert_eq!(counter(&values, "redlock_acquires_total", &granted), 4);
    let held = exclusive("held_by_other");
    assert_eq!(counter(&values, "redlock_acquires_total", &held), 1);
    assert_eq!(
        samples(&values, "redlock_acquire_wait_seconds", &granted),
        4
    );
    assert_eq!(samples(&values, "redlock_acquire_attempts", &granted), 4);
    let released = [("kind", "exclusive"), ("end", "released")];
    assert_eq!(samples(&values, "redlock_lock_held_seconds", &released), 3);
    let lost = [("kind", "exclusive"), ("end", "lost")];
    assert_eq!(samples(&values, "redlock_lock_held_seconds", &lost), 1);
    // Three guards and the operator's release by value; the lost lock's
    // own release then found nothing.
    let releases = |outcome| counter(&values, "redlock_releases_total", &[("outcome", outcome)]);
    assert_eq!((releases("released"), releases("not_held")), (4, 1));
    let extensions =
        |outcome| counter(&values, "redlock_extensions_total", &[("outcome", outcome)]);
    assert_eq!((extensions("extended"), extensions("gone")), (1, 1));
    assert_eq!(
        counter(&values, "redlock_locks_lost_total", &[("reason", "gone")]),
        1
    );
    // At least a quorum of the three masters announced the release.
    let notices: u64 = names
        .iter()
        .map(|name| counter(&values, "redlock_release_notices_total", &[("node", name)]))
        .sum();
    assert!(notices >= 2, "{values:#?}");
    let killed_node = &names[2];
    let errors: u64 = ["connection", "timeout"]
        .iter()
        .map(|error| {
            counter(
                &values,
                "redlock_node_errors_total",
                &[("node", killed_node), ("error", error)],
            )
        })
        .sum();
    // Its failed vote in the last release at least (a busy machine may
    // time a node out in another round too).
    assert!(errors >= 1, "{killed_node}: {values:#?}");
    // The two drivers' work, all counted once each ended at its shutdown:
    // some, and no more than the test's time on its one thread.
    let busy = counter(&values, "redlock_driver_busy_microseconds_total", &[]);
    assert!(
        busy > 0 && u128::from(busy) <= elapsed.as_micros(),
        "{busy} µs busy in {elapsed:?}"
    );
    // No lock key or value in any label.
    for (_, _, labels) in values.keys() {
        for (_, value) in labels {
            let private = ["metered", "kept", "after-kill", value_text.as_str()];
            assert!(
                private.iter().all(|text| !value.contains(text)),
                "{labels:?}"
            );
        }
    }
    // Every metric has its help text.
    for (_, name, _) in values.keys() {
        assert!(help.contains_key(name), "{name} has no description");
    }
}

/// Node misses: none in a plain run; a master that loses the key of a held
/// lock (flushed, as a restart without persistence would) is one.
#[test]
fn a_release_that_finds_no_key_where_the_lock_was_held_is_a_node_miss() {
    const MISSES: &str = "redlock_release_node_misses_total";
    let cluster = RedisCluster::start(3);
    recorded(async |snapshotter| {
        let redlock = builder(&cluster).build().await.unwrap();
        for i in 0..20 {
            let guard = redlock
                .lock(format!("plain-{i}"))
                .wait(Wait::No)
                .await
                .unwrap();
            guard.release().every_node().await;
        }
        let (plain, _) = values(snapshotter.snapshot().into_vec());
        assert_eq!(counter(&plain, MISSES, &[]), 0, "a plain run");

        let guard = redlock.lock("flushed").wait(Wait::No).await.unwrap();
        // A master that said yes before the lock was decided (the
        // last may answer after it, in the background).
        let held = guard
            .votes()
            .votes()
            .iter()
            .position(|vote| matches!(vote, redlock_core::NodeVote::Granted))
            .expect("a quorum said yes");
        cluster.node(held).command(["FLUSHALL"]);
        assert_eq!(guard.release().every_node().await.released(), 2);
        let (flushed, _) = values(snapshotter.snapshot().into_vec());
        assert_eq!(counter(&flushed, MISSES, &[]), 1, "the flushed master");
    });
}

/// `inspect` (the read behind `redlock status`) goes through the one driver
/// like every request: a master that cannot be read counts in
/// `redlock_node_errors_total` against its address, and the others read.
#[test]
fn an_inspect_counts_the_master_it_could_not_read() {
    const ERRORS: &str = "redlock_node_errors_total";
    let cluster = RedisCluster::start(3);
    recorded(async |snapshotter| {
        let redlock = builder(&cluster).build().await.unwrap();
        let guard = redlock.lock("inspected").wait(Wait::No).await.unwrap();
        let reads = redlock.inspect("inspected").await;
        assert!(reads.iter().all(|read| read.result.is_ok()), "{reads:?}");
        let errors_of = |name: &str| -> u64 {
            let (values, _) = values(snapshotter.snapshot().into_vec());
            ["connection", "timeout"]
                .iter()
                .map(|error| counter(&values, ERRORS, &[("node", name), ("error", error)]))
                .sum()
        };
        let killed = redlock.nodes()[2].clone();
        assert_eq!(errors_of(&killed), 0, "all read");
        cluster.node(2).kill();
        let reads = redlock.inspect("inspected").await;
        assert!(reads[2].result.is_err(), "{reads:?}");
        assert!(
            reads[..2].iter().all(|read| read.result.is_ok()),
            "{reads:?}"
        );
        assert!(errors_of(&killed) >= 1, "the killed master's failed read");
        guard.release().every_node().await;
        redlock.shutdown().await;
    });
}
