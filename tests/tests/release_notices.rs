//! Waiting without hammering: a blocked acquire is woken by the release
//! notice of any node, through one pub/sub connection per node shared by
//! every waiter, and falls back to its retry timer when pub/sub is down.

mod support;

use std::future::IntoFuture;
use std::time::Duration;

use redis::Value;
use redlock_tests::{RedisCluster, RedisNode};
use redlock_tokio::{LockGuard, Redlock, Wait};
use support::{builder, client, eventually, subscribers, timed};

/// The retry delay of the waiters: a release heard through pub/sub gets
/// them the lock long before it.
const RETRY_DELAY: Duration = Duration::from_secs(10);

/// A waiter that got the lock sooner than this was woken by the release,
/// not by its timer: half the retry delay, far more than a busy machine
/// adds to a wake-up. How soon it really comes is a figure of `make bench`.
const WOKEN: Duration = Duration::from_secs(5);

/// When the holder releases.
const HOLD: Duration = Duration::from_millis(300);

/// A waiter that retries only every [`RETRY_DELAY`] (no jitter).
async fn slow_waiter(cluster: &RedisCluster, notices: bool) -> Redlock {
    waiter_every(cluster, notices, RETRY_DELAY).await
}

/// A waiter that retries only every `delay` (no jitter).
async fn waiter_every(cluster: &RedisCluster, notices: bool, delay: Duration) -> Redlock {
    builder(cluster)
        .wait(Wait::Retries(3))
        .retry_delay(delay)
        .retry_jitter(Duration::ZERO)
        .release_notices(notices)
        .build()
        .await
        .unwrap()
}

/// `redlock.lock(resource)` in a task, timed.
fn lock_in_task(
    redlock: &Redlock,
    resource: &'static str,
) -> tokio::task::JoinHandle<(Result<LockGuard, redlock_tokio::Error>, Duration)> {
    let redlock = redlock.clone();
    tokio::spawn(async move { timed(redlock.lock(resource)).await })
}

/// Releases `guard` after [`HOLD`], in a task.
fn release_later(guard: LockGuard) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        tokio::time::sleep(HOLD).await;
        let report = guard.release().every_node().await;
        assert!(report.released() >= 2, "{report}");
    })
}

/// Releases `guard` after [`HOLD`], once the waiter listens for `resource`
/// on each of `nodes`: a notice published before the waiter subscribed
/// reaches nobody, and how long subscribing takes is the machine's business,
/// not what these tests judge.
async fn release_once_listening(
    guard: LockGuard,
    cluster: &RedisCluster,
    resource: &str,
    nodes: &[usize],
) {
    tokio::time::sleep(HOLD).await;
    eventually("the waiter listens", Duration::from_secs(10), || {
        nodes
            .iter()
            .all(|&node| subscribers(cluster.node(node), resource) >= 1)
    })
    .await;
    let report = guard.release().every_node().await;
    assert!(report.released() >= 2, "{report}");
}

/// Pub/sub connections on `node` (`CLIENT LIST TYPE pubsub`).
fn pubsub_clients(node: &RedisNode) -> usize {
    match node.command(["CLIENT", "LIST", "TYPE", "pubsub"]) {
        Value::BulkString(text) => String::from_utf8_lossy(&text)
            .lines()
            .filter(|line| !line.trim().is_empty())
            .count(),
        Value::VerbatimString { text, .. } => {
            text.lines().filter(|line| !line.trim().is_empty()).count()
        }
        other => panic!("CLIENT LIST answered {other:?}"),
    }
}

/// Waits until `nodes` of `redlock`'s listeners had a subscription
/// confirmed: the node counts its subscriber before the client reads the
/// confirmation.
async fn listening(redlock: &Redlock, nodes: usize) {
    eventually(
        "the listeners read their confirmations",
        Duration::from_secs(10),
        || redlock.release_notice_connections() == nodes,
    )
    .await;
}

fn assert_no_pubsub(cluster: &RedisCluster) {
    for node in cluster.nodes() {
        assert_eq!(pubsub_clients(node), 0, "{node}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_the_waiter_long_before_its_retry_delay() {
    let cluster = RedisCluster::start(3);
    let holder = client(&cluster).await;
    let waiter = slow_waiter(&cluster, true).await;

    let held = holder.lock("job").await.unwrap();
    let ((guard, took), ()) = tokio::join!(
        timed(waiter.lock("job")),
        release_once_listening(held, &cluster, "job", &[0, 1, 2])
    );
    let guard = guard.expect("the waiter gets the lock once released");
    assert!(
        took >= HOLD - Duration::from_millis(50),
        "it waited: {took:?}"
    );
    assert!(took < WOKEN, "woken, not timed: {took:?}");
    // Each node's listener counts once it read its node's confirmation.
    listening(&waiter, 3).await;
    guard.release().every_node().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_notices_the_waiter_sleeps_out_its_retry_delay() {
    let cluster = RedisCluster::start(3);
    let holder = client(&cluster).await;
    let delay = Duration::from_secs(2);
    let waiter = waiter_every(&cluster, false, delay).await;

    let held = release_later(holder.lock("job").await.unwrap());
    let (guard, took) = timed(waiter.lock("job")).await;
    let guard = guard.unwrap();
    held.await.unwrap();
    assert!(took >= delay - Duration::from_millis(100), "{took:?}");
    assert_eq!(waiter.release_notice_connections(), 0);
    assert_no_pubsub(&cluster);
    guard.release().every_node().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_acquire_opens_no_pubsub_connection() {
    let cluster = RedisCluster::start(3);
    let redlock = client(&cluster).await;
    for _ in 0..3 {
        redlock
            .lock("free")
            .await
            .unwrap()
            .release()
            .every_node()
            .await;
        redlock
            .lock("free")
            .read()
            .await
            .unwrap()
            .release()
            .every_node()
            .await;
        redlock
            .lock("free")
            .write()
            .await
            .unwrap()
            .release()
            .every_node()
            .await;
        let guard = redlock.lock("free").reentrant("me").await.unwrap();
        guard.release().every_node().await;
        redlock
            .lock_all(["x", "y"])
            .await
            .unwrap()
            .release()
            .every_node()
            .await;
    }
    // A try-lock that fails never waits, so it does not listen either.
    let held = redlock.lock("busy").await.unwrap();
    assert!(redlock.lock("busy").wait(Wait::No).await.is_err());
    held.release().every_node().await;

    assert_eq!(redlock.release_notice_connections(), 0);
    assert_no_pubsub(&cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_lock_kind_is_woken_by_the_release_it_waits_for() {
    let cluster = RedisCluster::start(3);
    let holder = client(&cluster).await;
    let waiter = slow_waiter(&cluster, true).await;
    // (the case, what the holder takes, what the waiter wants, the channel
    // the holder's release publishes on, that the waiter hears); requests
    // as futures, of one type whatever their kind, that start when awaited.
    let cases = [
        (
            "a reader behind a writer",
            holder.lock("rw1").write().into_future(),
            waiter.lock("rw1").read().into_future(),
            "rw1",
        ),
        (
            "a writer behind a reader",
            holder.lock("rw2").read().into_future(),
            waiter.lock("rw2").write().into_future(),
            "rw2",
        ),
        (
            "a reentrant owner behind another",
            holder.lock("re").reentrant("a").into_future(),
            waiter.lock("re").reentrant("b").into_future(),
            "re",
        ),
        (
            "a multi-resource lock behind an exclusive one",
            holder.lock("m2").into_future(),
            waiter.lock_all(["m1", "m2"]).into_future(),
            "m2",
        ),
        (
            "an exclusive lock behind a multi-resource one",
            holder.lock_all(["m3", "m4"]).into_future(),
            waiter.lock("m4").into_future(),
            "m4",
        ),
    ];
    for (case, held, wanted, channel) in cases {
        let guard = held.await.unwrap();
        let ((guard, took), ()) = tokio::join!(
            timed(wanted),
            release_once_listening(guard, &cluster, channel, &[0, 1, 2])
        );
        let guard = guard.unwrap_or_else(|err| panic!("{case}: {err}"));
        assert!(took < WOKEN, "{case}: {took:?}");
        guard.release().every_node().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_waiters_share_one_pubsub_connection_per_node() {
    let cluster = RedisCluster::start(3);
    let holder = client(&cluster).await;
    let waiters = builder(&cluster)
        .wait(Wait::Retries(5))
        .retry_delay(RETRY_DELAY)
        .retry_jitter(Duration::ZERO)
        .build()
        .await
        .unwrap();
    let resources = ["r0", "r1", "r2", "r3"];
    let mut held = Vec::new();
    for resource in resources {
        held.push(holder.lock(resource).await.unwrap());
    }
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let waiters = waiters.clone();
            tokio::spawn(async move {
                let guard = waiters.lock(resources[i % 4]).await?;
                tokio::time::sleep(Duration::from_millis(10)).await;
                guard.release().every_node().await;
                Ok::<_, redlock_tokio::Error>(())
            })
        })
        .collect();

    eventually(
        "every resource subscribed once on every node",
        Duration::from_secs(8),
        || {
            cluster
                .nodes()
                .iter()
                .all(|node| resources.iter().all(|r| subscribers(node, r) == 1))
        },
    )
    .await;
    for node in cluster.nodes() {
        assert_eq!(pubsub_clients(node), 1, "{node}");
    }
    listening(&waiters, 3).await;

    let (results, took) = timed(async {
        for guard in held {
            guard.release().every_node().await;
        }
        let mut results = Vec::new();
        for task in tasks {
            results.push(task.await.unwrap());
        }
        results
    })
    .await;
    for result in results {
        result.expect("every waiter gets its turn");
    }
    // Five turns per resource, each a 10 ms hold, and no retry timer.
    assert!(took < WOKEN, "{took:?}");

    // The last waiter of each channel unsubscribed it; the connections stay
    // for the next wait (Redis no longer lists a connection without
    // subscriptions as a pub/sub client).
    eventually("channels unsubscribed", Duration::from_secs(8), || {
        cluster
            .nodes()
            .iter()
            .all(|node| resources.iter().all(|r| subscribers(node, r) == 0))
    })
    .await;
    assert_eq!(waiters.release_notice_connections(), 3);
    for node in cluster.nodes() {
        assert!(pubsub_clients(node) <= 1, "{node}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_does_not_hammer_the_nodes() {
    let cluster = RedisCluster::start(3);
    let make = || {
        builder(&cluster)
            .wait(Wait::Retries(100))
            .retry_delay(Duration::from_millis(200))
            .retry_jitter(Duration::from_millis(100))
            .build()
    };
    let holder = make().await.unwrap();
    let guard = holder.lock("hot").await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..5 {
        let waiter = make().await.unwrap();
        tasks.push(tokio::spawn(async move {
            let guard = waiter.lock("hot").await.unwrap();
            tokio::time::sleep(HOLD).await;
            guard.release().every_node().await;
        }));
    }
    tokio::time::sleep(HOLD).await;
    for node in cluster.nodes() {
        node.reset_stats();
    }
    let ((), took) = timed(async {
        guard.release().every_node().await;
        for task in tasks {
            task.await.unwrap();
        }
    })
    .await;
    let calls: u64 = cluster
        .nodes()
        .iter()
        .map(|node| node.commandstats().get("evalsha").copied().unwrap_or(0))
        .sum();
    // Five 300 ms holds in turn. Waiting on the timer alone costs about a
    // hundred script calls here (each attempt is one per node); clean-ups
    // of failed attempts must not wake the waiters into a storm of
    // thousands.
    println!("5 waiters: {took:?}, {calls} script calls");
    assert!(calls < 1_000, "{calls} script calls in {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_or_dead_node_does_not_hold_up_waiting() {
    let cluster = RedisCluster::start(5);
    cluster.node(4).kill();
    cluster.node(3).pause();
    let holder = client(&cluster).await;
    let waiter = slow_waiter(&cluster, true).await;

    let held = holder.lock("job").await.unwrap();
    let ((guard, took), ()) = tokio::join!(
        timed(waiter.lock("job")),
        release_once_listening(held, &cluster, "job", &[0, 1, 2])
    );
    let guard = guard.expect("three of five nodes are enough");
    assert!(took < WOKEN, "{took:?}");
    // Only the live nodes have a pub/sub connection.
    listening(&waiter, 3).await;
    guard.release().every_node().await;

    // Node 3 comes back: its pub/sub connection is made at the next wait.
    // Then node 2 stops while its pub/sub connection is up: nothing waits
    // for it, and nodes 0, 1 and 3 still carry the lock and the notices.
    // (The holder must hold node 3 too: a release heard from fewer than
    // three of five nodes could be failed attempts cleaning up, and the
    // waiter would wait for its timer instead.)
    cluster.node(3).resume();
    eventually(
        "the holder reconnected node 3",
        Duration::from_secs(5),
        || holder.connected_nodes() == 4,
    )
    .await;
    let guard = holder.lock("job").await.unwrap();
    let waiting = tokio::spawn({
        let waiter = waiter.clone();
        async move { waiter.lock("job").await }
    });
    eventually("node 3 listens again", Duration::from_secs(5), || {
        waiter.release_notice_connections() == 4 && subscribers(cluster.node(3), "job") == 1
    })
    .await;
    // And the waiter's attempt after that subscription marked it there: a
    // release on node 3 before the mark publishes nothing, and two notices
    // of five would leave the waiter on its timer (seen on a loaded
    // machine: 9.98 s).
    eventually(
        "the waiter marked itself on node 3",
        Duration::from_secs(10),
        || cluster.node(3).keys("*waiters").len() == 1,
    )
    .await;
    cluster.node(2).pause();
    let (result, took) = timed(async {
        guard.release().every_node().await;
        waiting.await.unwrap()
    })
    .await;
    let guard = result.expect("nodes 0, 1 and 3 grant it");
    assert!(took < WOKEN, "{took:?}");
    cluster.node(2).resume();
    guard.release().every_node().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_pubsub_connection_is_replaced_while_someone_waits() {
    let cluster = RedisCluster::start(3);
    let holder = client(&cluster).await;
    let waiter = slow_waiter(&cluster, true).await;

    // Subscribe once, so that the connections exist.
    let held = release_later(holder.lock("job").await.unwrap());
    waiter
        .lock("job")
        .await
        .unwrap()
        .release()
        .every_node()
        .await;
    held.await.unwrap();

    let guard = holder.lock("job").await.unwrap();
    let waiting = tokio::spawn({
        let waiter = waiter.clone();
        async move { waiter.lock("job").await }
    });
    eventually("subscribed everywhere", Duration::from_secs(8), || {
        cluster
            .nodes()
            .iter()
            .all(|node| subscribers(node, "job") == 1)
    })
    .await;
    // The server drops the pub/sub connections of two nodes.
    for node in &cluster.nodes()[..2] {
        node.command(["CLIENT", "KILL", "TYPE", "pubsub"]);
    }
    eventually(
        "resubscribed on new connections",
        Duration::from_secs(8),
        || {
            cluster
                .nodes()
                .iter()
                .all(|node| subscribers(node, "job") == 1 && pubsub_clients(node) == 1)
        },
    )
    .await;
    let (result, took) = timed(async {
        guard.release().every_node().await;
        waiting.await.unwrap()
    })
    .await;
    result.expect("woken").release().every_node().await;
    assert!(took < WOKEN, "{took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_client_closes_its_pubsub_connections() {
    let cluster = RedisCluster::start(3);
    let holder = client(&cluster).await;
    let waiter = slow_waiter(&cluster, true).await;
    let guard = holder.lock("job").await.unwrap();
    let waiting = tokio::spawn({
        let waiter = waiter.clone();
        async move { waiter.lock("job").await }
    });
    eventually("the waiter listens", Duration::from_secs(8), || {
        cluster.nodes().iter().all(|node| pubsub_clients(node) == 1)
    })
    .await;
    // Cancel the wait and drop every handle: nothing may keep a connection.
    waiting.abort();
    let _ = waiting.await;
    guard.release().every_node().await;
    drop((holder, waiter));
    eventually(
        "only the assertion connection is left",
        Duration::from_secs(8),
        || cluster.nodes().iter().all(|node| connections(node) == 1),
    )
    .await;
}

/// Connections on `node`, counting the one that asks.
fn connections(node: &RedisNode) -> usize {
    match node.command(["CLIENT", "LIST"]) {
        Value::BulkString(text) => String::from_utf8_lossy(&text)
            .lines()
            .filter(|line| !line.trim().is_empty())
            .count(),
        Value::VerbatimString { text, .. } => {
            text.lines().filter(|line| !line.trim().is_empty()).count()
        }
        other => panic!("CLIENT LIST answered {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_that_forbid_subscribe_leave_waiters_on_their_timer() {
    let cluster = RedisCluster::start(3);
    for node in cluster.nodes() {
        node.command(["ACL", "SETUSER", "default", "-subscribe"]);
    }
    let holder = client(&cluster).await;
    let waiter = slow_waiter(&cluster, true).await;
    let received = |node: &RedisNode| -> u64 {
        let Value::BulkString(info) = node.command(["INFO", "stats"]) else {
            panic!("INFO answered something else");
        };
        String::from_utf8_lossy(&info)
            .lines()
            .find_map(|line| line.strip_prefix("total_connections_received:"))
            .and_then(|n| n.trim().parse().ok())
            .expect("total_connections_received")
    };
    let before: Vec<u64> = cluster.nodes().iter().map(received).collect();

    let held = release_later(holder.lock("job").await.unwrap());
    let (guard, took) = timed(waiter.lock("job")).await;
    guard
        .expect("the timer still works")
        .release()
        .every_node()
        .await;
    held.await.unwrap();
    assert!(took >= RETRY_DELAY - Duration::from_millis(100), "{took:?}");

    // Each refused SUBSCRIBE drops the connection, and the next one comes
    // after a growing backoff (50 ms doubling), not in a tight loop. The
    // count includes the assertion connections of this test.
    for (node, before) in cluster.nodes().iter().zip(before) {
        let made = received(node) - before;
        assert!(made <= 15, "{node}: {made} connections in {took:?}");
    }
}

/// A fair lock's release by the waiter's own client hands the lock over at
/// once, with no notice from any node: here no node lets it subscribe, and
/// its retry delay is ten seconds. (A plain lock's waiter hears the nodes'
/// notices with other clients' waiters, so as not to overtake them.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_release_by_the_same_client_hands_over_without_any_notice() {
    let cluster = RedisCluster::start(3);
    for node in cluster.nodes() {
        node.command(["ACL", "SETUSER", "default", "-subscribe"]);
    }
    let redlock = slow_waiter(&cluster, true).await;
    let held = redlock.lock("job").fair().await.unwrap();
    let released = release_later(held);
    let (guard, took) = timed(redlock.lock("job").fair()).await;
    let guard = guard.expect("handed over");
    released.await.unwrap();
    assert!(
        took >= HOLD - Duration::from_millis(50),
        "it waited: {took:?}"
    );
    assert!(took < WOKEN, "handed over, not timed: {took:?}");
    assert_eq!(
        redlock.release_notice_connections(),
        0,
        "no node let it listen"
    );
    guard.release().every_node().await;
}

/// A pub/sub connection counts as up once its node accepted a
/// subscription, not when it merely connected, and a link that was slow to
/// connect subscribes to what is wanted then, not when it began: here node
/// 0 is paused while its listener connects, and resumes only once nobody
/// waits any more, so the link that comes up subscribes to nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notice_connection_counts_once_its_node_accepted_a_subscription() {
    let cluster = RedisCluster::start(3);
    let holder = client(&cluster).await;
    let waiter = builder(&cluster)
        .retry_delay(RETRY_DELAY)
        .retry_jitter(Duration::ZERO)
        .connect_timeout(Duration::from_secs(60))
        .build()
        .await
        .unwrap();
    let held = holder.lock("job").await.unwrap();
    let before = connections(cluster.node(0));
    cluster.node(0).reset_stats();
    cluster.node(0).pause();
    let gave_up = waiter.lock("job").wait(Wait::AtMost(HOLD)).await;
    assert!(gave_up.is_err(), "the holder still holds it");
    eventually(
        "nodes 1 and 2 were subscribed to, and are not any more",
        Duration::from_secs(30),
        || {
            waiter.release_notice_connections() == 2
                && (1..3).all(|node| subscribers(cluster.node(node), "job") == 0)
        },
    )
    .await;
    cluster.node(0).resume();
    eventually(
        "node 0 took the listener's connection",
        Duration::from_secs(10),
        || connections(cluster.node(0)) == before + 1,
    )
    .await;
    for _ in 0..50 {
        assert_eq!(
            waiter.release_notice_connections(),
            2,
            "node 0's link never subscribed"
        );
        assert_eq!(subscribers(cluster.node(0), "job"), 0);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Not even for a moment (a subscription dropped again at once).
    let subscribes = cluster.node(0).commandstats().get("subscribe").copied();
    assert_eq!(subscribes.unwrap_or(0), 0, "node 0 was sent SUBSCRIBE");
    held.release().every_node().await;
}

/// A plain lock's release by the waiter's own client hands the lock over
/// with no notice from any node: here no node lets it subscribe, and its
/// retry delay is ten seconds. The first release is handed over once its
/// nodes answered that no other client's waiter is marked; the next, as
/// soon as it is queued (the client knows by then).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_release_by_the_same_client_hands_over_when_no_other_client_waits() {
    let cluster = RedisCluster::start(3);
    for node in cluster.nodes() {
        node.command(["ACL", "SETUSER", "default", "-subscribe"]);
    }
    let redlock = slow_waiter(&cluster, true).await;
    let mut held = redlock.lock("job").await.unwrap();
    for round in 0..2 {
        let waiter = lock_in_task(&redlock, "job");
        // The waiter was turned away and sleeps out its retry.
        tokio::time::sleep(HOLD).await;
        let report = held.release().every_node().await;
        assert_eq!(report.released(), 3, "{report}");
        let (guard, took) = waiter.await.unwrap();
        held = guard.expect("handed over");
        assert!(
            took < WOKEN,
            "round {round}: handed over, not timed: {took:?}"
        );
    }
    assert_eq!(
        redlock.release_notice_connections(),
        0,
        "no node let it listen"
    );
    held.release().every_node().await;
}

/// A release that only its own client's waiters wait for publishes
/// nothing: the client tells its first waiter itself, once the nodes
/// answered that no other client's waiter is marked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_only_its_own_clients_waiters_wait_for_publishes_nothing() {
    let cluster = RedisCluster::start(3);
    let redlock = slow_waiter(&cluster, true).await;
    let held = redlock.lock("job").await.unwrap();
    let waiter = lock_in_task(&redlock, "job");
    eventually(
        "the waiter marked itself on every node",
        Duration::from_secs(10),
        || marks(&cluster).iter().all(|marks| marks.len() == 1),
    )
    .await;
    for node in cluster.nodes() {
        node.reset_stats();
    }
    assert_eq!(held.release().every_node().await.released(), 3);
    let (guard, took) = waiter.await.unwrap();
    let guard = guard.expect("told by its own client");
    assert!(took < WOKEN, "told, not timed: {took:?}");
    assert_eq!(publishes(&cluster), vec![0, 0, 0], "nobody else listens");
    guard.release().every_node().await;
}

/// `PUBLISH` calls on each node since its stats were reset (a script's
/// inner calls count).
fn publishes(cluster: &RedisCluster) -> Vec<u64> {
    cluster
        .nodes()
        .iter()
        .map(|node| node.commandstats().get("publish").copied().unwrap_or(0))
        .collect()
}

/// Waiters marks (`{<key>}\0waiters`) on each node, with their PTTLs.
fn marks(cluster: &RedisCluster) -> Vec<Vec<i64>> {
    cluster
        .nodes()
        .iter()
        .map(|node| {
            node.keys("*waiters")
                .into_iter()
                .map(|key| node.pttl(key))
                .collect()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nobody_waiting_a_release_publishes_nothing() {
    let cluster = RedisCluster::start(3);
    let redlock = client(&cluster).await;
    for node in cluster.nodes() {
        node.reset_stats();
    }
    for _ in 0..20 {
        let guard = redlock.lock("alone").await.unwrap();
        let report = guard.release().every_node().await;
        assert_eq!(report.released(), 3, "{report}");
    }
    assert_eq!(publishes(&cluster), vec![0, 0, 0]);
    assert_eq!(marks(&cluster), vec![Vec::<i64>::new(); 3], "nobody waited");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_marks_itself_is_woken_and_its_mark_expires_after_it() {
    let cluster = RedisCluster::start(3);
    let holder = client(&cluster).await;
    // Retries every second: its mark lives a little longer than that.
    let waiter = waiter_every(&cluster, true, Duration::from_secs(1)).await;
    let mark_ttl = redlock_core::Config::new(["a"])
        .retry(
            redlock_core::RetryConfig::default()
                .count(3)
                .delay(Duration::from_secs(1))
                .jitter(Duration::ZERO),
        )
        .validate()
        .unwrap()
        .waiters_mark_ttl(support::NODE_TIMEOUT);

    let held = holder.lock("queued").await.unwrap();
    for node in cluster.nodes() {
        node.reset_stats();
    }
    let (guard, ()) = tokio::join!(waiter.lock("queued"), async {
        tokio::time::sleep(HOLD).await;
        eventually("the waiter listens", Duration::from_secs(10), || {
            cluster
                .nodes()
                .iter()
                .all(|node| subscribers(node, "queued") >= 1)
        })
        .await;
        // It marked itself on every node once it listened, before its
        // attempt there: the release sees it.
        eventually("the waiter marked itself", Duration::from_secs(10), || {
            marks(&cluster).iter().all(|marks| marks.len() == 1)
        })
        .await;
        for node_marks in marks(&cluster) {
            assert!(
                node_marks[0] > 0 && node_marks[0] <= mark_ttl.as_millis() as i64,
                "a mark lives at most {mark_ttl:?}: {node_marks:?}"
            );
        }
        let report = held.release().every_node().await;
        assert!(report.released() >= 2, "{report}");
    });
    let guard = guard.expect("the waiter gets the lock once released");
    let published = publishes(&cluster);
    assert!(
        published.iter().filter(|&&count| count > 0).count() >= 2,
        "the release published where the waiter marked itself: {published:?}"
    );
    guard.release().every_node().await;
    // Nothing left: the mark expires on its own within its TTL.
    eventually(
        "the waiter's mark expires",
        Duration::from_millis(mark_ttl.as_millis()) + Duration::from_secs(10),
        || marks(&cluster).iter().all(Vec::is_empty),
    )
    .await;
}

/// The exclusive release script against a real server, in the cases the
/// model of `lua_model.rs` leaves out: a key of another type is
/// `WRONGTYPE`, not absent, and a mark that is left out (its key in another
/// slot) or cannot be read (another type) publishes.
#[test]
fn the_release_script_tells_every_case_apart() {
    let node = RedisNode::start();
    let client = redis::Client::open(node.url()).expect("a valid URL");
    let mut connection = client.get_connection().expect("connects");
    let script = redis::Script::new(redlock_core::scripts::RELEASE_IF_WAITED);
    let (key, mark, others) = ("{r}", "{r}\0waiters", "{r}\0others");
    let release = |connection: &mut redis::Connection, keys: &[&str]| {
        let mut invocation = script.prepare_invoke();
        for key in keys {
            invocation.key(*key);
        }
        invocation
            .arg("mine")
            .arg(1)
            .arg("tag")
            .invoke::<i64>(connection)
    };
    let all = [key, mark, others];
    let held = |what: &str| node.command(["SET", key, what]);

    held("mine");
    assert_eq!(release(&mut connection, &all).unwrap(), 1, "nobody waits");
    assert!(!node.exists(key));
    assert_eq!(release(&mut connection, &all).unwrap(), -1, "absent");
    held("theirs");
    assert_eq!(release(&mut connection, &all).unwrap(), 0, "another holder");
    node.command(["DEL", key]);
    node.command(["HSET", key, "f", "v"]);
    let err = release(&mut connection, &all).unwrap_err();
    assert_eq!(err.code(), Some("WRONGTYPE"), "{err}");
    node.command(["DEL", key]);

    // The mark: our own client's waiter, another client's, another type.
    for (content, answer) in [("tag", 1), ("other", 3)] {
        held("mine");
        node.command(["SET", mark, content]);
        assert_eq!(release(&mut connection, &all).unwrap(), answer, "{content}");
    }
    node.command(["DEL", mark]);
    node.command(["HSET", mark, "f", "v"]);
    held("mine");
    assert_eq!(release(&mut connection, &all).unwrap(), 3, "unreadable");
    node.command(["DEL", mark]);

    // A mark left out (its key in another slot): publish.
    held("mine");
    assert_eq!(release(&mut connection, &[key]).unwrap(), 3, "left out");
    assert!(!node.exists(key), "released all the same");
}

/// A waiter marks the holder's value (`redlock_core::waited`), on a real
/// server: its attempt and its mark append its client, keeping the TTL; a
/// second client turns it into "several"; a key that is absent stays
/// absent. The holder's scripts take the marked value as its own; on
/// Valkey >= 9 its plain `DELIFEQ` does not (that is what tells the
/// release that someone waited), and the release script it falls back to
/// publishes unless only its own client waited.
#[test]
fn a_waiter_marks_the_holders_value_and_the_holder_still_owns_it() {
    let node = RedisNode::start();
    let client = redis::Client::open(node.url()).expect("a valid URL");
    let mut connection = client.get_connection().expect("connects");
    let scripts = redlock_core::scripts::RELEASE_IF_WAITED;
    let (key, mark, others) = ("{r}", "{r}\0waiters", "{r}\0others");
    let value = |connection: &mut redis::Connection| -> Option<Vec<u8>> {
        redis::cmd("GET").arg(key).query(connection).unwrap()
    };
    let attempt = |connection: &mut redis::Connection, client: &str| {
        redis::Script::new(redlock_core::scripts::ACQUIRE)
            .key(key)
            .arg("new")
            .arg(60_000)
            .arg(client)
            .invoke::<Value>(connection)
            .unwrap()
    };
    let wait_mark = |connection: &mut redis::Connection, client: &str| {
        redis::Script::new(redlock_core::scripts::MARK_WAITING)
            .key(key)
            .key(mark)
            .key(others)
            .arg("next")
            .arg(60_000)
            .arg(client)
            .invoke::<i64>(connection)
            .unwrap()
    };
    let release = |connection: &mut redis::Connection| {
        redis::Script::new(scripts)
            .key(key)
            .key(mark)
            .key(others)
            .arg("mine")
            .arg(1)
            .arg("tag")
            .invoke::<i64>(connection)
            .unwrap()
    };
    let hold = || {
        node.command(["DEL", key, mark, others]);
        node.command(["SET", key, "mine", "PX", "50000"]);
    };

    // Marked by our own client's waiter: the release publishes nothing.
    hold();
    assert_eq!(
        attempt(&mut connection, "tag"),
        Value::BulkString(b"mine".to_vec())
    );
    assert_eq!(value(&mut connection).as_deref(), Some(&b"mine\0tag"[..]));
    assert_eq!(
        attempt(&mut connection, "tag"),
        Value::BulkString(b"mine\0tag".to_vec())
    );
    assert_eq!(
        value(&mut connection).as_deref(),
        Some(&b"mine\0tag"[..]),
        "once"
    );
    let pttl: i64 = redis::cmd("PTTL").arg(key).query(&mut connection).unwrap();
    assert!(pttl > 40_000 && pttl <= 50_000, "the TTL is kept: {pttl}");
    // Its scripts take it as the holder's: extend, store a token.
    let extended: i64 = redis::Script::new(redlock_core::scripts::EXTEND)
        .key(key)
        .arg("mine")
        .arg(70_000)
        .arg(0)
        .invoke(&mut connection)
        .unwrap();
    assert_eq!(extended, 1);
    assert_eq!(
        value(&mut connection).as_deref(),
        Some(&b"mine\0tag"[..]),
        "kept marked"
    );
    let stored: i64 = redis::Script::new(redlock_core::scripts::STORE_TOKEN)
        .key(key)
        .key("{r}\0fence")
        .arg("mine")
        .arg(7)
        .invoke(&mut connection)
        .unwrap();
    assert_eq!(stored, 1);
    if support::native_delifeq() {
        let deleted: i64 = redis::cmd("DELIFEQ")
            .arg(key)
            .arg("mine")
            .query(&mut connection)
            .unwrap();
        assert_eq!(
            deleted, 0,
            "a marked value is not deleted by the plain release"
        );
        let extended: Value = redis::cmd("SET")
            .arg(key)
            .arg("mine")
            .arg("IFEQ")
            .arg("mine")
            .arg("PX")
            .arg(80_000)
            .arg("GET")
            .query(&mut connection)
            .unwrap();
        assert_eq!(
            extended,
            Value::BulkString(b"mine\0tag".to_vec()),
            "nor extended"
        );
    }
    assert_eq!(
        release(&mut connection),
        1,
        "our own client waited: no notice"
    );
    assert_eq!(value(&mut connection), None);

    // Another client's waiter, by its mark; then a second client: several.
    hold();
    assert_eq!(wait_mark(&mut connection, "you"), 1);
    assert_eq!(value(&mut connection).as_deref(), Some(&b"mine\0you"[..]));
    attempt(&mut connection, "tag");
    assert_eq!(value(&mut connection).as_deref(), Some(&b"mine\0you\0"[..]));
    attempt(&mut connection, "third");
    assert_eq!(
        value(&mut connection).as_deref(),
        Some(&b"mine\0you\0"[..]),
        "stays"
    );
    node.command(["DEL", mark, others]);
    assert_eq!(
        release(&mut connection),
        3,
        "another client waited: published"
    );
    assert_eq!(value(&mut connection), None);

    // Absent: a waiter's attempt takes it, unmarked; its mark creates nothing.
    node.command(["DEL", key]);
    wait_mark(&mut connection, "you");
    assert_eq!(value(&mut connection), None, "a mark creates no lock");
    assert_eq!(attempt(&mut connection, "you"), Value::Int(1));
    assert_eq!(value(&mut connection).as_deref(), Some(&b"new"[..]));
    // Another holder's value is never taken for ours.
    node.command(["SET", key, "mine-not\0tag"]);
    assert_eq!(release(&mut connection), 0);
}
