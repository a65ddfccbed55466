//! A guard alive or dropped on the way out of `main` (an early `?`, a panic,
//! a task the runtime drops as it shuts down) leaves no key behind, with or
//! without `Redlock::shutdown`, on the current-thread and the multi-thread
//! runtime alike; and `shutdown` awaits everything the client still has to
//! deliver, the resends to a master that was down included.

mod support;

use std::process::Command;
use std::time::Duration;

use redlock_tests::{NodeOptions, RedisCluster};
use redlock_tokio::Redlock;
use support::{assert_absent, builder, init_tracing};

/// A current-thread runtime of the test's own: every task runs on its one
/// thread, so a count of live tasks, or the order two futures are polled
/// in, is exact.
fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// Runs the `exit-early` program: lock `key`, fail, return from `main`.
fn exit_early(cluster: &RedisCluster, flavor: &str, mode: &str, key: &str) {
    let output = Command::new(env!("CARGO_BIN_EXE_exit-early"))
        .args([flavor, mode, key])
        .args(cluster.urls())
        .output()
        .expect("the exit-early program runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    // It fails on purpose, after it held the lock.
    if mode == "panic" {
        assert_eq!(output.status.code(), Some(101), "{stderr}");
        assert!(stderr.contains("the work panicked"), "{stderr}");
    } else {
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("the work failed"), "{stderr}");
    }
}

#[test]
fn no_key_is_left_when_main_returns_on_either_runtime() {
    init_tracing();
    let cluster = RedisCluster::start(3);
    for flavor in ["current", "multi"] {
        for mode in ["shutdown", "no-shutdown", "panic", "keep"] {
            // A few times each: the runtime's shutdown races the release.
            for run in 0..3 {
                let key = format!("exit-{flavor}-{mode}-{run}");
                exit_early(&cluster, flavor, mode, &key);
                // The process is gone: whatever it did not send is lost for good.
                assert_absent(&cluster, &key);
            }
        }
    }
}

/// Releases that met a master down are sent again once it is back, and
/// `shutdown` waits for them: a master killed while guards are dropped comes
/// back with its keys (persistence on), and once `shutdown` returns no task
/// of the client is left and no key of ours is on any master. While it
/// runs (release notices off), the client is one task: its driver, which
/// polls every master's connection itself.
///
/// On a current-thread runtime of its own, so that the count of tasks is
/// exact when `shutdown` returns (a task's end and its count are one step on
/// that thread).
#[test]
fn shutdown_awaits_the_resends_to_a_master_that_was_down() {
    let options = NodeOptions {
        extra_args: ["--appendonly", "yes", "--appendfsync", "always"]
            .map(String::from)
            .to_vec(),
        ..NodeOptions::default()
    };
    let cluster = RedisCluster::start_with(3, &options);
    let runtime = current_thread();
    let redlock = runtime.block_on(async {
        let redlock = builder(&cluster)
            // Longer than the test: only a release deletes the keys.
            .ttl(Duration::from_secs(60))
            // Pub/sub connections reconnect on their own schedule.
            .release_notices(false)
            .build()
            .await
            .expect("client builds");
        // Warm up: the driver runs, as it does at the end.
        redlock.lock("warm").await.expect("warm").release().await;
        redlock.settled().await;
        redlock
    });
    let idle = runtime.metrics().num_alive_tasks();
    assert_eq!(idle, 1, "the driver alone, no task per connection");

    let keys: Vec<String> = (0..8).map(|i| format!("resend-{i}")).collect();
    let guards = runtime.block_on(async {
        let mut guards = Vec::new();
        for key in &keys {
            guards.push(redlock.lock(key).await.expect("every master is up"));
        }
        guards
    });
    cluster.node(0).kill();
    {
        let _inside = runtime.enter();
        // Released in the background: master 0's requests meet its
        // connection broken, and wait for the next one.
        drop(guards);
    }
    runtime.block_on(async {
        for key in &keys {
            while cluster.nodes()[1..].iter().any(|node| node.exists(key)) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        // Down for a while: the reconnection backs off.
        tokio::time::sleep(Duration::from_secs(1)).await;
    });
    cluster.node(0).restart_keeping_data();
    let back = keys
        .iter()
        .filter(|key| cluster.node(0).exists(key))
        .count();
    println!("master 0 back with {back} of {} keys", keys.len());

    runtime.block_on(redlock.shutdown());
    let left = runtime.metrics().num_alive_tasks();
    let on_masters = keys_on(&cluster, 0..cluster.nodes().len());
    drop(redlock);
    println!("tasks idle {idle}, after shutdown {left}; keys left {on_masters:?}");
    assert_eq!(left, 0, "tasks of the client left after shutdown");
    assert!(
        on_masters.is_empty(),
        "keys left after shutdown: {on_masters:?}"
    );
}

/// Every key on masters `which`, with the master's index.
fn keys_on(cluster: &RedisCluster, which: std::ops::Range<usize>) -> Vec<(usize, String)> {
    which
        .flat_map(|i| {
            cluster
                .node(i)
                .keys("*")
                .into_iter()
                .map(move |key| (i, String::from_utf8_lossy(&key).into_owned()))
        })
        .collect()
}

/// `shutdown` closes the client with everything in play: a plain guard, a
/// kept-alive one, a leadership, an observer of its election, an acquire
/// waiting without end, release notices subscribed and a paused master.
/// When it returns, no task of the client runs (Tokio's count of live
/// tasks is back at zero), no key of ours is on a master that answers, the
/// guards and the leadership are lost with `LossReason::Closed`, the
/// waiter ended with `Error::Closed`, the observer's stream ended, and
/// every later call fails the same way.
#[test]
fn shutdown_releases_everything_and_ends_every_task() {
    init_tracing();
    let cluster = RedisCluster::start(3);
    // One worker: the count of live tasks is exact when `shutdown` returns.
    let runtime = current_thread();
    assert_eq!(runtime.metrics().num_alive_tasks(), 0);
    runtime.block_on(async {
        let redlock = builder(&cluster)
            // The release owed to the paused master is given up one TTL
            // past its deadline: short, so the test is.
            .ttl(Duration::from_secs(2))
            .build()
            .await
            .expect("client builds");
        let plain = redlock.lock("plain").await.expect("plain lock");
        let kept = redlock
            .lock("kept")
            .keep_alive(redlock_tokio::KeepAlive::default())
            .await
            .expect("kept lock");
        let leadership = redlock
            .election("leader")
            .campaign()
            .await
            .expect("elected");
        let waiter = {
            let redlock = redlock.clone();
            tokio::spawn(async move {
                redlock
                    .lock("plain")
                    .wait(redlock_tokio::Wait::Forever)
                    .await
                    .map(|_| ())
            })
        };
        let observer = tokio::spawn(futures::StreamExt::count(
            redlock.election("leader").observe(),
        ));
        // The waiter subscribes to the release notices, then waits.
        support::eventually("the waiter listens", Duration::from_secs(10), || {
            redlock.release_notice_connections() == 3
        })
        .await;
        cluster.node(2).pause();
        redlock.shutdown().await;
        // The waiter's and the observer's own tasks, told at the close.
        let waited = waiter.await.expect("the waiter's task ran");
        let observed = observer.await.expect("the observer's task ran");
        let tasks = tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks();
        // The election's fencing counter stays, by design: terms never go
        // back.
        let keys: Vec<_> = keys_on(&cluster, 0..2)
            .into_iter()
            .filter(|(_, key)| !key.ends_with("\0fencing"))
            .collect();

        println!(
            "after shutdown: {tasks} task(s) alive, keys {keys:?}; the observer saw {observed} leader(s)"
        );
        assert!(
            matches!(waited, Err(redlock_tokio::Error::Closed)),
            "the waiter: {waited:?}"
        );
        assert_eq!(tasks, 0, "tasks of the client left after shutdown");
        assert!(
            keys.is_empty(),
            "keys left on the masters that answer: {keys:?}"
        );
        assert_eq!(plain.loss(), Some(redlock_tokio::LossReason::Closed));
        assert_eq!(kept.loss(), Some(redlock_tokio::LossReason::Closed));
        assert!(leadership.loss().is_some(), "the leadership is lost");
        drop((plain, kept, leadership));
        tokio::task::yield_now().await;
        assert_eq!(
            tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks(),
            0,
            "guards and a leadership dropped after shutdown start nothing"
        );
        let later = redlock.lock("later").await.map(|_| ());
        assert!(
            matches!(later, Err(redlock_tokio::Error::Closed)),
            "a lock after shutdown: {later:?}"
        );
    });
    cluster.node(2).resume();
}

/// A lock granted in the instant the shutdown begins, whose guard is made
/// after the shutdown took the live guards, is released by that shutdown
/// too: the guard is born lost (`Closed`), and no key is left once
/// `shutdown` returns.
///
/// The acquire is polled once (it starts), then left alone while the
/// driver gets its grant; the shutdown is polled first, then the acquire,
/// which makes its guard from the grant waiting for it.
#[test]
fn a_lock_granted_as_the_shutdown_begins_is_released_by_it() {
    init_tracing();
    let cluster = RedisCluster::start(3);
    let runtime = current_thread();
    runtime.block_on(async {
        let redlock = builder(&cluster).build().await.expect("client builds");
        let acquire = std::future::IntoFuture::into_future(redlock.lock("late"));
        let mut acquire = std::pin::pin!(acquire);
        assert!(futures::poll!(&mut acquire).is_pending());
        support::eventually("every master holds it", Duration::from_secs(10), || {
            (0..3).all(|node| cluster.node(node).get("late").is_some())
        })
        .await;
        // The grant reaches the acquire's mailbox; nobody reads it yet.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let ((), guard) = tokio::join!(biased; redlock.shutdown(), acquire);
        let guard = guard.expect("granted before the shutdown");
        assert_eq!(guard.loss(), Some(redlock_tokio::LossReason::Closed));
        assert_absent(&cluster, "late");
    });
}

/// One driver task at a time: a release that comes after the shutdown
/// began (its task taken) starts a task of its own, which waits for the
/// closing one to end, so the nodes see one client's order. Node 2 is
/// paused with an acquire of the closing task unanswered; the release of
/// that lock's value (its guard forgotten) must not reach node 0 while the
/// closing task still waits. With the planted bug `DriverTasksOverlap` it
/// does: the second task runs beside the first (on a cluster node its
/// release could then overtake the acquire and leave the key).
fn a_release_during_the_shutdown(bug: Option<redlock_tokio::core::planted::Bug>) -> bool {
    let cluster = RedisCluster::start(3);
    let runtime = current_thread();
    redlock_tokio::core::planted::set(bug);
    let overlapped = runtime.block_on(async {
        let redlock = Redlock::builder(cluster.urls())
            .node_timeout(Duration::from_secs(5))
            .build()
            .await
            .expect("client builds");
        cluster.node(2).pause();
        let value = redlock
            .lock("closing")
            .await
            .expect("granted by nodes 0 and 1")
            .forget();
        let shutdown = redlock.shutdown();
        let mut shutdown = std::pin::pin!(shutdown);
        assert!(
            futures::poll!(&mut shutdown).is_pending(),
            "node 2 holds it up"
        );
        let release = redlock.release_value("closing", &value);
        let mut release = std::pin::pin!(release);
        assert!(futures::poll!(&mut release).is_pending());
        // A task running beside the closing one deletes the key on node 0
        // at once; 1.5 s of watching leaves a busy machine time to show
        // it, well before the closing one gives node 2 up (5 s).
        let watch_until = std::time::Instant::now() + Duration::from_millis(1_500);
        let mut overlapped = false;
        while !overlapped && std::time::Instant::now() < watch_until {
            tokio::time::sleep(Duration::from_millis(20)).await;
            overlapped = cluster.node(0).get("closing").is_none();
        }
        cluster.node(2).resume();
        let ((), report) = tokio::join!(shutdown, release);
        assert!(report.is_complete(), "{report}");
        overlapped
    });
    redlock_tokio::core::planted::set(None);
    assert_absent(&cluster, "closing");
    overlapped
}

#[test]
fn a_release_during_the_shutdown_waits_for_the_closing_task() {
    init_tracing();
    assert!(!a_release_during_the_shutdown(None));
}

#[test]
fn a_release_during_the_shutdown_overlaps_with_the_planted_bug() {
    init_tracing();
    assert!(a_release_during_the_shutdown(Some(
        redlock_tokio::core::planted::Bug::DriverTasksOverlap
    )));
}
