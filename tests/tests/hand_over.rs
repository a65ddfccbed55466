//! A release reaches the waiter it frees, on every server: a waiter of the
//! releasing client (told by its own client, `Notice::HandedOver`) and a
//! waiter of another client (told by the masters' notices), for the plain
//! lock and the fair lock.
//!
//! Every waiter here retries only every ten seconds, so a grant that
//! follows a release by less than half of that was woken by the release,
//! not by its timer: a wake-up takes milliseconds, a retry seconds. On
//! Valkey 9 the release is one `DELIFEQ` where nobody waited, and the
//! release script only after a `DELIFEQ` that deleted nothing (a waiter
//! marked the holder's value, `redlock_core::waited`): a hand-over told
//! before that script ran sent the waiter's attempt ahead of it, and the
//! waiter slept out its retry (issue 52). `make nextest-valkey` runs this
//! file on Valkey.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redlock_tests::RedisCluster;
use redlock_tokio::{LockGuard, Redlock, Wait};
use support::{QUICK, builder, eventually};

/// The retry delay of every waiter.
const RETRY_DELAY: Duration = Duration::from_secs(10);

/// A grant sooner than this after the release before it was woken by that
/// release: half the retry delay, far more than a busy machine adds to a
/// wake-up. How soon it really comes is a figure of `make bench`.
const WOKEN: Duration = Duration::from_secs(5);

/// How long each holder holds: longer than the per-node timeout, so that a
/// waiter that queues behind its client's others marks the holder's value
/// itself (its client's last mark is too old to rely on).
const HOLD: Duration = Duration::from_millis(200);

/// A client whose waiters retry only every [`RETRY_DELAY`] (no jitter).
async fn slow_client(cluster: &RedisCluster) -> Redlock {
    builder(cluster)
        .wait(Wait::Retries(3))
        .retry_delay(RETRY_DELAY)
        .retry_jitter(Duration::ZERO)
        .build()
        .await
        .unwrap()
}

/// The plain or the fair lock on `resource`: a waiter whose three retries
/// of ten seconds ran out slept through the releases.
async fn lock(redlock: &Redlock, resource: &str, fair: bool) -> LockGuard {
    let request = redlock.lock(resource);
    let guard = if fair {
        request.fair().await
    } else {
        request.await
    };
    guard.unwrap_or_else(|error| panic!("not granted, after sleeping out its retries: {error}"))
}

/// Waits until every node holds `held`'s value: granted at a quorum, the
/// third node's write may still be on its way, and a waiter of another
/// client (its own connection) could take that node first on a busy
/// machine; the tests' releases count three.
async fn on_every_node(cluster: &RedisCluster, held: &LockGuard) {
    let value = held.value().as_bytes();
    eventually("the holder on every node", QUICK, || {
        cluster
            .nodes()
            .iter()
            .all(|node| node.get(held.key().as_bytes()).as_deref() == Some(value))
    })
    .await;
}

/// When each release of the test started, and who was granted when: each
/// grant must follow the last release before it by less than [`WOKEN`].
#[derive(Clone)]
struct Turns {
    start: Instant,
    log: Arc<Mutex<Vec<(Duration, Turn)>>>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Turn {
    Released,
    Granted(&'static str),
}

impl Turns {
    fn new() -> Self {
        Self {
            start: Instant::now(),
            log: Arc::default(),
        }
    }

    fn record(&self, turn: Turn) {
        let at = self.start.elapsed();
        self.log.lock().unwrap().push((at, turn));
    }

    /// Takes the lock as `who`, records the grant, holds it for [`HOLD`]
    /// and releases it, recording the release as it starts. A task that
    /// waits longer than [`WOKEN`] and the holds before its turn fails at
    /// once: it slept through a release (the grants' gaps tell which).
    async fn take_turn(&self, redlock: &Redlock, resource: &str, fair: bool, who: &'static str) {
        let Ok(guard) = tokio::time::timeout(WOKEN + 3 * HOLD, lock(redlock, resource, fair)).await
        else {
            panic!(
                "{who} waited more than {:?}: it slept through a release [{}]",
                WOKEN + 3 * HOLD,
                self.story()
            );
        };
        self.record(Turn::Granted(who));
        tokio::time::sleep(HOLD).await;
        self.record(Turn::Released);
        let report = guard.release().every_node().await;
        assert!(report.released() >= 2, "{report}");
    }

    /// Asserts that every grant after the first release followed the
    /// release before it by less than [`WOKEN`], and that `grants` were
    /// made.
    fn assert_woken(&self, grants: usize) {
        let story = self.story();
        let log = self.log.lock().unwrap();
        let mut released: Option<Duration> = None;
        let mut granted = 0;
        for (at, turn) in log.iter() {
            match turn {
                Turn::Released => released = Some(*at),
                Turn::Granted(who) => {
                    granted += 1;
                    if let Some(released) = released {
                        let after = *at - released;
                        assert!(
                            after < WOKEN,
                            "{who} was granted {after:?} after the release: \
                             it slept out its retry [{story}]"
                        );
                    }
                }
            }
        }
        assert_eq!(granted, grants, "[{story}]");
    }

    /// The log so far, for a failure's message.
    fn story(&self) -> String {
        let log = self.log.lock().unwrap();
        let turns: Vec<String> = log
            .iter()
            .map(|(at, turn)| match turn {
                Turn::Released => format!("{:.3} s released", at.as_secs_f64()),
                Turn::Granted(who) => format!("{:.3} s {who} granted", at.as_secs_f64()),
            })
            .collect();
        turns.join("; ")
    }
}

/// Three tasks of one client take turns at one lock, four times each: each
/// release is handed over to the client's next waiter, who never sleeps out
/// its retry. Each waiter that queues behind marks the holder's value as
/// waited for by its own client, so on Valkey most releases are a `DELIFEQ`
/// that deletes nothing and the script after it, unless the client sends
/// the script at once.
async fn tasks_of_one_client_take_turns(fair: bool) {
    let cluster = RedisCluster::start(3);
    let redlock = slow_client(&cluster).await;
    let turns = Turns::new();
    let tasks: Vec<_> = ["a", "b", "c"]
        .into_iter()
        .map(|who| {
            let (redlock, turns) = (redlock.clone(), turns.clone());
            tokio::spawn(async move {
                for _ in 0..4 {
                    turns.take_turn(&redlock, "job", fair, who).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    turns.assert_woken(12);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_release_hands_over_to_the_next_task_of_the_same_client() {
    tasks_of_one_client_take_turns(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_release_hands_over_to_the_next_task_of_the_same_client() {
    tasks_of_one_client_take_turns(true).await;
}

/// One client holds the lock while a task of its own and a task of another
/// client wait: the release wakes one of them and the next release the
/// other, each long before its retry, whichever wins first.
async fn a_task_of_each_client_waits(fair: bool) {
    let cluster = RedisCluster::start(3);
    let (holder, other) = (slow_client(&cluster).await, slow_client(&cluster).await);
    let turns = Turns::new();
    let held = lock(&holder, "job", fair).await;
    turns.record(Turn::Granted("holder"));
    on_every_node(&cluster, &held).await;
    let waiters: Vec<_> = [(holder.clone(), "same client"), (other, "other client")]
        .into_iter()
        .map(|(redlock, who)| {
            let turns = turns.clone();
            tokio::spawn(async move { turns.take_turn(&redlock, "job", fair, who).await })
        })
        .collect();
    // Both were turned away, listen, and marked the holder's value.
    tokio::time::sleep(3 * HOLD).await;
    turns.record(Turn::Released);
    let report = held.release().every_node().await;
    assert_eq!(report.released(), 3, "{report}");
    for waiter in waiters {
        waiter.await.unwrap();
    }
    turns.assert_woken(3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_release_wakes_a_waiter_of_the_same_client_and_one_of_another() {
    a_task_of_each_client_waits(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_release_wakes_a_waiter_of_the_same_client_and_one_of_another() {
    a_task_of_each_client_waits(true).await;
}

/// A waiter of another client, alone: woken by the masters' notices of the
/// release (on Valkey, published by the script that follows the holder's
/// `DELIFEQ`, which the waiter's mark made delete nothing).
async fn a_waiter_of_another_client(fair: bool) {
    let cluster = RedisCluster::start(3);
    let (holder, other) = (slow_client(&cluster).await, slow_client(&cluster).await);
    let turns = Turns::new();
    let held = lock(&holder, "job", fair).await;
    turns.record(Turn::Granted("holder"));
    on_every_node(&cluster, &held).await;
    let waiter = {
        let turns = turns.clone();
        tokio::spawn(async move { turns.take_turn(&other, "job", fair, "other client").await })
    };
    tokio::time::sleep(3 * HOLD).await;
    turns.record(Turn::Released);
    let report = held.release().every_node().await;
    assert_eq!(report.released(), 3, "{report}");
    waiter.await.unwrap();
    turns.assert_woken(2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_release_wakes_a_waiter_of_another_client() {
    a_waiter_of_another_client(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_release_wakes_a_waiter_of_another_client() {
    a_waiter_of_another_client(true).await;
}
