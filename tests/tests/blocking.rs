//! The blocking client against real servers: exclusivity, release on drop
//! and at process exit, keep-alive loss, and a typed error (never a panic
//! or a blocked runtime thread) when it is called from async code.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use redlock_tests::RedisCluster;
use redlock_tokio::{Error, KeepAlive, LossReason, RunError, Wait, blocking};
use support::{NODE_TIMEOUT, assert_absent, init_tracing};

fn client(cluster: &RedisCluster) -> blocking::Redlock {
    init_tracing();
    blocking::Redlock::builder(cluster.urls())
        .node_timeout(NODE_TIMEOUT)
        .build()
        .expect("the blocking client builds")
}

/// Waits (bounded) until `done` holds; the bound only stops a broken test.
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn one_holder_at_a_time_and_free_after_release() {
    let cluster = RedisCluster::start(3);
    let (a, b) = (client(&cluster), client(&cluster));
    let held = a
        .lock("blocking-one")
        .wait(Wait::No)
        .acquire()
        .expect("free");
    let refused = b
        .lock("blocking-one")
        .wait(Wait::No)
        .acquire()
        .expect_err("held by a");
    assert!(refused.is_held_by_other(), "{refused}");
    let report = held.release().expect("released outside a runtime");
    // `a` held a quorum; on the third node `b`'s attempt may have come
    // first (and been withdrawn), so our value may never have been there.
    assert!(report.released() >= 2 && report.frees_lock(), "{report}");
    let taken = b
        .lock("blocking-one")
        .wait(Wait::No)
        .acquire()
        .expect("free again");
    drop(taken);
}

#[test]
fn a_blocking_semaphore_admits_its_permits_and_no_more() {
    let cluster = RedisCluster::start(3);
    let (a, b) = (client(&cluster), client(&cluster));
    let first = a
        .lock("blocking-pool")
        .permits(2)
        .wait(Wait::No)
        .acquire()
        .expect("a permit");
    let second = b
        .lock("blocking-pool")
        .permits(2)
        .fencing()
        .wait(Wait::No)
        .acquire()
        .expect("the other permit");
    assert!(second.fencing_token().is_some(), "a fenced permit");
    assert_ne!(first.key(), second.key(), "two slots");
    let refused = b
        .lock("blocking-pool")
        .permits(2)
        .wait(Wait::No)
        .acquire()
        .expect_err("both permits taken");
    assert!(refused.is_held_by_other(), "{refused}");
    first.release().expect("released");
    let third = b
        .lock("blocking-pool")
        .permits(2)
        .wait(Wait::No)
        .acquire()
        .expect("a permit is free again");
    drop((second, third));
}

#[test]
fn a_dropped_guard_is_released_and_dropping_the_client_waits_for_it() {
    let cluster = RedisCluster::start(3);
    let redlock = client(&cluster);
    let guard = redlock.lock("blocking-drop").acquire().expect("free");
    drop(guard);
    redlock.shutdown().expect("outside a runtime");
    assert_absent(&cluster, "blocking-drop");

    // Without shutdown: the last handle's drop waits for the release.
    let redlock = client(&cluster);
    let guard = redlock.lock("blocking-drop-2").acquire().expect("free");
    drop(guard);
    drop(redlock);
    assert_absent(&cluster, "blocking-drop-2");
}

#[test]
fn a_kept_alive_lock_lost_to_another_owner_is_seen_and_run_reports_it() {
    let cluster = RedisCluster::start(3);
    let redlock = client(&cluster);
    let guard = redlock
        .lock("blocking-lost")
        .ttl(Duration::from_millis(600))
        .keep_alive(KeepAlive::default())
        .acquire()
        .expect("free");
    for node in cluster.nodes() {
        node.set("blocking-lost", "someone-else");
    }
    eventually("the keep-alive sees another owner", || guard.is_lost());
    assert!(
        matches!(guard.loss(), Some(LossReason::ExtendFailed(_))),
        "{:?}",
        guard.loss()
    );
    assert_eq!(guard.validity(), Duration::ZERO);
    drop(guard);

    let result: Result<u32, RunError> = redlock
        .lock("blocking-run")
        .ttl(Duration::from_millis(600))
        .run(|lock| {
            for node in cluster.nodes() {
                node.set("blocking-run", "someone-else");
            }
            eventually("the keep-alive sees another owner", || lock.is_lost());
            Ok(7)
        });
    let error = result.expect_err("the lock was lost during the work");
    assert!(error.as_lock().is_some_and(Error::is_lock_lost), "{error}");
    // The other owner's keys are never touched.
    for node in cluster.nodes() {
        assert_eq!(
            node.get("blocking-run").as_deref(),
            Some(&b"someone-else"[..])
        );
    }
}

#[test]
fn run_returns_the_work_result_with_one_question_mark() {
    let cluster = RedisCluster::start(3);
    let redlock = client(&cluster);
    let work = || -> Result<u64, Box<dyn std::error::Error + Send + Sync>> {
        let token = redlock
            .lock("blocking-fenced")
            .fencing()
            .run(|lock| Ok(lock.fencing_token().expect("fenced")))?;
        Ok(token)
    };
    let first = work().expect("granted");
    let second = work().expect("granted");
    assert!(second > first, "{second} > {first}");
    // `run` returns once a quorum released; the last node's delete may
    // still be on its way.
    redlock.shutdown().expect("outside a runtime");
    assert_absent(&cluster, "blocking-fenced");
}

#[test]
fn no_key_is_left_when_main_returns() {
    let cluster = RedisCluster::start(3);
    for mode in ["keep", "keep-alive", "drop"] {
        for run in 0..3 {
            let key = format!("blocking-exit-{mode}-{run}");
            let output = Command::new(env!("CARGO_BIN_EXE_exit-blocking"))
                .args([mode, &key])
                .args(cluster.urls())
                .output()
                .expect("the exit-blocking program runs");
            let stdout = String::from_utf8_lossy(&output.stdout);
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(output.status.success(), "{stderr}");
            assert!(stdout.contains("locked"), "{stdout} {stderr}");
            assert_absent(&cluster, &key);
        }
    }
}

#[test]
fn inside_a_runtime_every_call_is_a_typed_error() {
    let cluster = RedisCluster::start(3);
    let redlock = client(&cluster);
    let guard = redlock.lock("blocking-runtime").acquire().expect("free");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let urls = cluster.urls();
    let guard = runtime.block_on(async {
        let built = blocking::Redlock::connect(&urls).expect_err("inside a runtime");
        assert!(matches!(built, Error::InsideRuntime), "{built}");
        assert!(built.is_config());
        let acquired = redlock
            .lock("blocking-runtime-2")
            .acquire()
            .expect_err("inside a runtime");
        assert!(matches!(acquired, Error::InsideRuntime), "{acquired}");
        let run = redlock.lock("blocking-runtime-3").run(|_| Ok(()));
        assert!(
            matches!(run, Err(RunError::Lock(Error::InsideRuntime))),
            "{run:?}"
        );
        assert!(matches!(redlock.shutdown(), Err(Error::InsideRuntime)));
        let mut guard = guard;
        assert!(matches!(
            guard.extend(Duration::from_secs(5)),
            Err(Error::InsideRuntime)
        ));
        guard
    });
    // Dropped inside the runtime: released on the client's own thread,
    // without blocking this one.
    runtime.block_on(async { drop(guard) });
    redlock.shutdown().expect("outside a runtime again");
    assert_absent(&cluster, "blocking-runtime");
    for key in ["blocking-runtime-2", "blocking-runtime-3"] {
        assert_absent(&cluster, key);
    }
}

/// Where blocking stalls no runtime the blocking client works: from
/// `spawn_blocking` and from a task of a multi-thread runtime, whose other
/// tasks go on meanwhile (with one worker, a ticker on the same runtime
/// ticks while that worker's task waits for a held lock: the worker
/// handed its tasks over); only a current-thread runtime refuses
/// (`inside_a_runtime_every_call_is_a_typed_error`).
#[test]
fn from_spawn_blocking_and_a_multi_thread_worker_calls_block_only_their_thread() {
    let cluster = RedisCluster::start(3);
    let redlock = client(&cluster);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let urls = cluster.urls();
    runtime.block_on(async {
        let from_pool = {
            let redlock = redlock.clone();
            tokio::task::spawn_blocking(move || {
                let guard = redlock.lock("from-pool").acquire()?;
                guard.release()
            })
        };
        let report = from_pool
            .await
            .expect("ran")
            .expect("acquired on a pool thread");
        assert!(report.frees_lock(), "{report}");
        // Built and used inside a worker: a client of its own.
        let built = tokio::spawn(async move { blocking::Redlock::connect(&urls).map(|_| ()) });
        built.await.expect("ran").expect("built on a worker");
        // Held until the ticker has ticked thrice while the worker's task
        // waits for it: the runtime's other tasks run meanwhile.
        let held = redlock.lock("from-worker").acquire().expect("free");
        let ticks = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let ticker = {
            let ticks = std::sync::Arc::clone(&ticks);
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    ticks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            })
        };
        let calling = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let waiter = {
            let redlock = redlock.clone();
            let calling = std::sync::Arc::clone(&calling);
            tokio::spawn(async move {
                calling.store(true, std::sync::atomic::Ordering::SeqCst);
                redlock
                    .lock("from-worker")
                    .wait(Wait::Forever)
                    .acquire()
                    .map(|guard| guard.forget())
            })
        };
        // The bound only stops a broken test; a busy machine just takes longer.
        let deadline = Instant::now() + Duration::from_secs(60);
        while !calling.load(std::sync::atomic::Ordering::SeqCst) {
            assert!(Instant::now() < deadline, "the waiter never ran");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let before = ticks.load(std::sync::atomic::Ordering::Relaxed);
        while ticks.load(std::sync::atomic::Ordering::Relaxed) < before + 3 {
            assert!(
                Instant::now() < deadline,
                "the runtime's other tasks stalled"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let waiting = !waiter.is_finished();
        drop(held);
        let value = waiter.await.expect("ran").expect("granted once released");
        ticker.abort();
        assert!(waiting, "the waiter was granted a held lock");
        redlock
            .release_value("from-worker", &value)
            .expect("released");
    });
    assert_absent(&cluster, "from-pool");
    assert_absent(&cluster, "from-worker");
}

/// The blocking twins of the async methods do what those do: a builder of
/// its own, the reports, an inspection, a release that waits for every
/// node, and an election's `run`, which resigns once its work returns.
#[test]
fn the_blocking_twins_do_what_the_async_methods_do() {
    let cluster = RedisCluster::start(3);
    let redlock = client(&cluster);
    assert_eq!(redlock.nodes().len(), 3);
    assert_eq!(redlock.settings().node_timeout(), NODE_TIMEOUT);
    assert_eq!(redlock.connected_nodes(), 3);
    assert_eq!(redlock.servers().len(), 3);
    assert!(redlock.slow_nodes().is_empty());
    let guard = redlock.lock("twins").acquire().expect("free");
    let held: Vec<bool> = redlock
        .inspect("twins")
        .expect("read")
        .iter()
        .map(|node| matches!(node.result, Ok(Some(_))))
        .collect();
    assert_eq!(held, [true, true, true]);
    let report = guard.release_every_node().expect("released");
    assert_eq!(report.pending(), 0, "{report}");
    redlock.settled().expect("settled");
    assert_absent(&cluster, "twins");

    let mut terms = Vec::new();
    let mut stops = 0;
    redlock
        .election("twins-election")
        .run(|leadership| terms.push(leadership.term()), |_| stops += 1)
        .expect("led once");
    assert_eq!((terms.len(), stops), (1, 0));
    assert_absent(&cluster, "twins-election");
}

#[test]
fn a_blocking_election_leads_resigns_and_the_next_term_is_higher() {
    let cluster = RedisCluster::start(3);
    let (a, b) = (client(&cluster), client(&cluster));
    let timing = |redlock: &blocking::Redlock| {
        redlock.election("blocking-election").timing(
            Duration::from_millis(1_500),
            Duration::from_millis(900),
            Duration::from_millis(200),
        )
    };
    let mut first = timing(&a).campaign().expect("free");
    first.proclaim("a:1").expect("leading");
    let busy = timing(&b).wait(Wait::No).campaign().expect_err("a leads");
    assert!(busy.is_held_by_other(), "{busy}");
    let leader = timing(&b).leader().expect("outside a runtime");
    let leader = leader.leader().expect("a quorum names the leader");
    assert_eq!(
        (leader.term, leader.value.as_deref()),
        (first.term(), Some(&b"a:1"[..]))
    );
    assert!(!first.is_lost());
    let report = first.resign().expect("outside a runtime").expect("leading");
    assert!(report.frees_lock(), "{report}");
    assert!(first.is_lost());
    assert_eq!(
        first.wait_lost().unwrap(),
        redlock_tokio::LeadershipLoss::Resigned
    );
    let mut observed = timing(&a).observe();
    let second = timing(&b).wait(Wait::No).campaign().expect("free at once");
    assert!(second.term() > first.term());
    let seen = observed.next().expect("a stream without end").unwrap();
    assert!(seen.term >= first.term(), "terms only rise: {seen:?}");
    // Dropped: resigned on the client's thread, and the client's drop
    // waits for it.
    drop(second);
    drop(b);
    assert_absent(&cluster, "blocking-election");
}
