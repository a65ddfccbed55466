//! Leader election (`redlock.election(name)`) on real masters (Redis, or
//! Valkey with `REDLOCK_SERVER_BIN`): a killed leader is followed by one
//! with a higher term, resign frees the name at once and twice changes
//! nothing, a leader whose renewals fail steps down and the run loop
//! campaigns again, a deposed leader releases what it still held, and an
//! observer catches up after every server restarted (with an fsynced AOF:
//! terms, like fencing tokens, need the data kept).

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use redlock_tests::{NodeOptions, RedisCluster};
use redlock_tokio::{Election, LeadershipLoss, Redlock, Wait};
use support::client;

const LEASE: Duration = Duration::from_millis(1_500);
const RENEW: Duration = Duration::from_millis(900);
const RETRY: Duration = Duration::from_millis(200);

/// A client whose TTL is the lease: a server that restarted under it
/// votes again one lease after it was seen back.
async fn leased(cluster: &RedisCluster) -> Redlock {
    support::builder(cluster).ttl(LEASE).build().await.unwrap()
}

fn election(redlock: &Redlock, name: &str) -> Election {
    redlock
        .election(name)
        .timing(LEASE, RENEW, RETRY)
        .wait(Wait::AtMost(Duration::from_secs(10)))
}

#[test]
fn a_killed_leader_is_followed_by_one_with_a_higher_term() {
    let cluster = RedisCluster::start(3);
    // The leader runs on its own runtime, shut down under it: its renewals
    // stop and nothing is released, as when its process is killed.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let first = runtime.block_on(async {
        let redlock = client(&cluster).await;
        let leadership = election(&redlock, "killed").campaign().await.unwrap();
        let term = leadership.term();
        std::mem::forget(leadership);
        term
    });
    runtime.shutdown_background();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let redlock = client(&cluster).await;
        let started = std::time::Instant::now();
        let next = election(&redlock, "killed").campaign().await.unwrap();
        println!(
            "failover after the leader's death: {:?} (lease {LEASE:?})",
            started.elapsed()
        );
        assert!(next.term() > first, "{} after {first}", next.term());
        let mut next = next;
        assert!(next.resign().await.unwrap().frees_lock());
    });
}

/// Timings the core refuses (a renew deadline past the lease) fail the
/// campaign with a configuration error, before anything is sent, as a
/// lock's TTL fails its acquire; the builder chain itself never fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timings_refused_fail_the_campaign_as_a_config_error() {
    let cluster = RedisCluster::start(3);
    let redlock = client(&cluster).await;
    let election = redlock
        .election("bad-timing")
        .timing(
            Duration::from_secs(1),
            Duration::from_secs(2),
            Duration::from_millis(100),
        )
        .wait(Wait::No);
    let refused = election.campaign().await.expect_err("refused");
    assert!(refused.is_config(), "{refused}");
    assert!(
        cluster.nodes().iter().all(|node| node.keys("*").is_empty()),
        "nothing was sent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resign_frees_the_name_at_once_and_twice_changes_nothing() {
    let cluster = RedisCluster::start(3);
    let a = client(&cluster).await;
    let b = client(&cluster).await;
    let mut first = election(&a, "resign").campaign().await.unwrap();
    first.proclaim("a:1").await.unwrap();
    let busy = election(&b, "resign").wait(Wait::No).campaign().await;
    assert!(busy.is_err(), "one leader at a time");
    let report = first.resign().await.expect("leading");
    assert!(report.frees_lock());
    assert_eq!(first.lost().await, LeadershipLoss::Resigned);
    assert!(
        first.resign().await.is_none(),
        "resigning again does nothing"
    );
    // The old leader's value can no longer be proclaimed.
    let refused = first.proclaim("a:2").await.expect_err("deposed");
    assert!(
        matches!(refused, redlock_tokio::Error::Proclaim(_)) && refused.is_lock_lost(),
        "{refused:?}"
    );
    let shown = refused.to_string();
    assert!(
        shown.starts_with("leader value not written") && !shown.contains("extended"),
        "{shown}"
    );
    let second = election(&b, "resign")
        .wait(Wait::No)
        .campaign()
        .await
        .expect("free at once");
    assert!(second.term() > first.term());
    second.proclaim("b:1").await.unwrap();
    let read = election(&a, "resign").leader().await;
    let leader = read.leader().expect("a quorum names the leader");
    assert_eq!(leader.term, second.term());
    assert_eq!(leader.value.as_deref(), Some(&b"b:1"[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_renewals_fail_steps_down_and_campaigns_again() {
    let cluster = Arc::new(RedisCluster::start(3));
    let redlock = client(&cluster).await;
    let terms = Arc::new(Mutex::new(Vec::new()));
    let losses = Arc::new(Mutex::new(Vec::new()));
    let run = {
        let election = election(&redlock, "renewals").wait(Wait::Forever);
        let terms = Arc::clone(&terms);
        let losses = Arc::clone(&losses);
        tokio::spawn(async move {
            election
                .run(
                    move |leadership| {
                        terms.lock().unwrap().push(leadership.term());
                        async move { std::future::pending::<()>().await }
                    },
                    move |reason| losses.lock().unwrap().push(reason.clone()),
                )
                .await
        })
    };
    support::eventually("elected", Duration::from_secs(5), || {
        terms.lock().unwrap().len() == 1
    })
    .await;
    // A majority stops answering: renewals fail, the leader steps down at
    // its renew deadline.
    cluster.node(0).pause();
    cluster.node(1).pause();
    support::eventually("stepped down", Duration::from_secs(5), || {
        !losses.lock().unwrap().is_empty()
    })
    .await;
    cluster.node(0).resume();
    cluster.node(1).resume();
    support::eventually("elected again", Duration::from_secs(10), || {
        terms.lock().unwrap().len() >= 2
    })
    .await;
    let terms = terms.lock().unwrap().clone();
    let losses = losses.lock().unwrap().clone();
    println!("terms {terms:?}, losses {losses:?}");
    assert!(terms[1] > terms[0]);
    assert!(
        matches!(losses[0], LeadershipLoss::RenewDeadline(_)),
        "{losses:?}"
    );
    run.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_catches_up_after_every_server_restarted() {
    let options = NodeOptions {
        extra_args: ["--appendonly", "yes", "--appendfsync", "always"]
            .map(String::from)
            .to_vec(),
        ..NodeOptions::default()
    };
    let cluster = RedisCluster::start_with(3, &options);
    let (a, b) = (leased(&cluster).await, leased(&cluster).await);
    let mut observed = Box::pin(election(&b, "observed").observe());
    let mut first = election(&a, "observed").campaign().await.unwrap();
    first.proclaim("a").await.unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let leader = observed.next().await.unwrap();
            if leader.value.is_some() {
                return leader;
            }
        }
    })
    .await
    .expect("the observer sees the leader");
    assert_eq!(seen.term, first.term());
    first.resign().await;
    for node in cluster.nodes() {
        node.restart_keeping_data();
    }
    let second = election(&a, "observed").campaign().await.unwrap();
    second.proclaim("a2").await.unwrap();
    let caught_up = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let leader = observed.next().await.unwrap();
            assert!(leader.term >= seen.term, "terms only rise");
            if leader.term == second.term() && leader.value.is_some() {
                return leader;
            }
        }
    })
    .await
    .expect("the observer catches up with the new leader");
    assert_eq!(caught_up.value.as_deref(), Some(&b"a2"[..]));
    assert!(second.term() > first.term());
}

/// Every server restarted empty: the counters are gone, but the servers'
/// clocks floor the next term, so it is still above the last one, and the
/// observer reports the new leader at its next read. (Should a term still
/// go back, as it did before the clock floor, the observer follows another
/// id whatever its term: `LeaderWatch`'s unit test in redlock-core.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_follows_the_next_leader_after_every_server_restarted_empty() {
    let cluster = RedisCluster::start(3);
    let (a, b) = (leased(&cluster).await, leased(&cluster).await);
    // A few terms first, so that a counter alone would be at 4.
    for _ in 0..3 {
        let mut leadership = election(&a, "amnesia").campaign().await.unwrap();
        leadership.resign().await;
    }
    let first = election(&a, "amnesia").campaign().await.unwrap();
    let mut observed = Box::pin(election(&b, "amnesia").observe());
    let seen = tokio::time::timeout(Duration::from_secs(5), observed.next())
        .await
        .expect("the observer sees the leader")
        .unwrap();
    assert_eq!(
        (seen.term, seen.id.as_slice()),
        (first.term(), first.id().as_bytes())
    );
    for node in cluster.nodes() {
        node.restart();
    }
    // The first leader finds its name gone and steps down; another leads.
    drop(first);
    let second = election(&a, "amnesia").campaign().await.unwrap();
    assert!(
        second.term() > seen.term,
        "{} after {}",
        second.term(),
        seen.term
    );
    // A bound that only stops a broken observer (the old rule waited for
    // a higher term forever); how soon it follows is printed.
    let since = std::time::Instant::now();
    let followed = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let leader = observed.next().await.unwrap();
            if leader.id == second.id().as_bytes() {
                return leader;
            }
        }
    })
    .await
    .expect("the observer follows the new leader");
    println!("followed in {:?} (lease {LEASE:?})", since.elapsed());
    assert_eq!(followed.term, second.term());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_leadership_stops_renewing_and_frees_the_name() {
    let cluster = RedisCluster::start(3);
    let a = client(&cluster).await;
    let b = client(&cluster).await;
    let leadership = election(&a, "dropped").campaign().await.unwrap();
    let term = leadership.term();
    // A clone keeps it: dropping one handle changes nothing.
    drop(leadership.clone());
    assert!(leadership.loss().is_none());
    drop(leadership);
    a.shutdown().await;
    // Released, and no renewal sets the key again afterwards.
    tokio::time::sleep(RETRY * 2).await;
    support::assert_absent(&cluster, "dropped");
    let next = election(&b, "dropped").wait(Wait::No).campaign().await;
    assert!(next.expect("free at once").term() > term);
}

/// A leader deposed on a majority (another owner's value there) steps down
/// at its next renewal, and the value it still had on the third server is
/// released then, not left there to hold off the next leader for the rest
/// of its lease (a minute here: long past the bound this waits).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leader_releases_the_value_it_still_had() {
    let cluster = RedisCluster::start(3);
    let redlock = support::builder(&cluster)
        .ttl(Duration::from_secs(60))
        .build()
        .await
        .unwrap();
    let leadership = redlock
        .election("deposed")
        .timing(Duration::from_secs(60), RENEW, RETRY)
        .campaign()
        .await
        .unwrap();
    for node in &cluster.nodes()[..2] {
        node.set("deposed", "another");
    }
    let lost = tokio::time::timeout(Duration::from_secs(10), leadership.lost())
        .await
        .expect("deposed at its next renewal");
    assert!(matches!(lost, LeadershipLoss::Lock(_)), "{lost}");
    // The handle still lives: the client released it, not a drop.
    support::eventually("released on the third", Duration::from_secs(10), || {
        cluster.node(2).get("deposed").is_none()
    })
    .await;
    assert!(leadership.loss().is_some());
    assert_eq!(
        cluster.node(0).get("deposed").as_deref(),
        Some(&b"another"[..]),
        "another's value is left alone"
    );
}

/// An observer is an operation of its client: the client's shutdown ends
/// its stream (before, it polled on a timer of its own forever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_ends_when_its_client_shuts_down() {
    let cluster = RedisCluster::start(3);
    let redlock = leased(&cluster).await;
    let leadership = election(&redlock, "watched").campaign().await.unwrap();
    let mut observed = Box::pin(election(&redlock, "watched").observe());
    let seen = tokio::time::timeout(Duration::from_secs(10), observed.next())
        .await
        .expect("the observer sees the leader")
        .unwrap();
    assert_eq!(seen.term, leadership.term());
    drop(leadership);
    redlock.shutdown().await;
    let ended = tokio::time::timeout(Duration::from_secs(10), observed.next())
        .await
        .expect("the stream ends");
    assert!(ended.is_none(), "{ended:?}");
    support::assert_absent(&cluster, "watched");
}
