//! The test kit answers as real servers do: the same scenarios (acquire and
//! contention, a late release after expiry, a key of another type, a
//! leader's failover with its terms, loss under pause, restart empty, a
//! semaphore's limit) run against real servers (redis-server, or
//! Valkey under `make nextest-valkey`) and against `redlock_testkit`'s
//! quorum in virtual time, and the outcomes a user sees (granted or the
//! typed error, loss reasons, keys left on each node) must be the same.
//! A divergence planted in the kit's nodes (a release that ignores the
//! value) must make them differ.

mod support;

use std::time::Duration;

use redlock_testkit::Quorum;
use redlock_tests::{RedisCluster, ServerKind};
use redlock_tokio::{Error, KeepAlive, Redlock, Wait};

const TTL: Duration = Duration::from_secs(2);

/// Where a scenario runs.
enum Env {
    Real(RedisCluster),
    Kit(Quorum),
}

impl Env {
    async fn client(&self) -> Redlock {
        let builder = match self {
            Env::Real(cluster) => support::builder(cluster),
            Env::Kit(quorum) => quorum.client().node_timeout(support::NODE_TIMEOUT),
        };
        builder.ttl(TTL).build().await.expect("a client")
    }

    /// What each node holds at `key` now.
    fn values(&self, key: &str) -> Vec<Option<Vec<u8>>> {
        (0..3).map(|i| self.value(i, key)).collect()
    }

    /// What node `i` holds at `key` now (a string key's).
    fn value(&self, i: usize, key: &str) -> Option<Vec<u8>> {
        match self {
            Env::Real(cluster) => cluster.nodes()[i].get(key),
            Env::Kit(quorum) => quorum.node(i).get(key).and_then(|entry| entry.value),
        }
    }

    fn pause(&self, i: usize) {
        match self {
            Env::Real(cluster) => cluster.nodes()[i].pause(),
            Env::Kit(quorum) => quorum.node(i).pause(),
        }
    }

    fn resume(&self, i: usize) {
        match self {
            Env::Real(cluster) => cluster.nodes()[i].resume(),
            Env::Kit(quorum) => quorum.node(i).resume(),
        }
    }

    /// Another program's hash at `key` on node `i`.
    fn put_hash(&self, i: usize, key: &str) {
        match self {
            Env::Real(cluster) => {
                cluster.nodes()[i].command(["HSET", key, "field", "value"]);
            }
            Env::Kit(quorum) => quorum.node(i).put_hash(key),
        }
    }

    fn restart_empty(&self, i: usize) {
        match self {
            Env::Real(cluster) => cluster.nodes()[i].restart(),
            Env::Kit(quorum) => quorum.node(i).restart_empty(),
        }
    }
}

/// An outcome as a user tells it apart.
fn outcome<T>(result: &Result<T, Error>) -> String {
    match result {
        Ok(_) => "granted".to_owned(),
        Err(error) if error.is_held_by_other() => "held by another".to_owned(),
        Err(error) if error.is_unavailable() => "unavailable".to_owned(),
        Err(error) if error.is_lock_lost() => "lost".to_owned(),
        Err(error) if error.as_acquire().is_some_and(|e| e.is_wrong_type()) => {
            "a key of another type".to_owned()
        }
        Err(error) => format!("other error: {error}"),
    }
}

/// How many nodes hold `value` at `key`, once the writes a lock did not
/// wait for have landed: a lock is granted at a quorum, and its write to
/// the last node may still be on its way (a busy machine). Waits until
/// every node holds it, for at most 5 s (only a node that never got the
/// write waits that long), then counts.
async fn holding(env: &Env, key: &str, value: &[u8]) -> usize {
    let count = || {
        env.values(key)
            .iter()
            .filter(|held| held.as_deref() == Some(value))
            .count()
    };
    for _ in 0..500 {
        if count() == env.values(key).len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    count()
}

/// What node `i` holds at `key` once it is gone (a withdraw on its way
/// has landed, or the key expired), waiting for at most 5 s.
async fn gone(env: &Env, i: usize, key: &str) -> Option<Vec<u8>> {
    for _ in 0..500 {
        if env.value(i, key).is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    env.value(i, key)
}

async fn scenarios(env: &Env) -> Vec<String> {
    let mut seen = Vec::new();
    let a = env.client().await;
    let b = env.client().await;

    // Acquire and contention.
    let first = a.lock("diff-job").wait(Wait::No).await;
    seen.push(format!("a: {}", outcome(&first)));
    let first = first.expect("a free lock");
    // Counted before b tries: granted at a quorum, a's write to the third
    // node may still be on its way, and b's attempt (another connection)
    // could take that node first on a busy machine.
    seen.push(format!(
        "nodes holding a: {}",
        holding(env, "diff-job", first.value().as_bytes()).await
    ));
    let refused = b.lock("diff-job").wait(Wait::No).await;
    seen.push(format!("b while a holds: {}", outcome(&refused)));
    let report = first.release().every_node().await;
    seen.push(format!("a's release: {} released", report.released()));
    seen.push(format!("left: {:?}", env.values("diff-job")));

    // A release after expiry must not delete the next holder's lock.
    let late = a.lock("diff-late").wait(Wait::No).await.expect("free");
    tokio::time::sleep(TTL + Duration::from_millis(500)).await;
    let next = b.lock("diff-late").wait(Wait::No).await;
    seen.push(format!("b after a expired: {}", outcome(&next)));
    let next = next.expect("expired, free");
    let report = late.release().every_node().await;
    seen.push(format!(
        "a's late release: {} released, {} not held",
        report.released(),
        report.not_held()
    ));
    seen.push(format!(
        "nodes still holding b: {}",
        holding(env, "diff-late", next.value().as_bytes()).await
    ));
    next.release().every_node().await;

    // Another program's data at a lock's name on a majority: refused as
    // a key of another type, and the third node's grant taken back.
    env.put_hash(0, "diff-typed");
    env.put_hash(1, "diff-typed");
    let typed = a.lock("diff-typed").wait(Wait::No).await;
    seen.push(format!("a on a hash: {}", outcome(&typed)));
    seen.push(format!(
        "left on the third node: {:?}",
        gone(env, 2, "diff-typed").await
    ));

    // A leader's failover: the leader cut off from a majority past its
    // lease steps down; once its lease has run out everywhere, the next
    // leader is elected under a higher term, and the deposed one can no
    // longer proclaim.
    let old = a
        .election("diff-leader")
        .wait(Wait::No)
        .campaign()
        .await
        .expect("a free name");
    old.proclaim("a").await.expect("the leader proclaims");
    let refused = b.election("diff-leader").wait(Wait::No).campaign().await;
    seen.push(format!("b while a leads: {}", outcome(&refused)));
    env.pause(0);
    env.pause(1);
    seen.push(format!("a steps down: {}", old.lost().await));
    env.resume(0);
    env.resume(1);
    // Until the old leader's lease has run out on every node (renewals
    // queued on the paused nodes ran when they resumed).
    for node in 0..3 {
        gone(env, node, "diff-leader").await;
    }
    let new = b.election("diff-leader").wait(Wait::No).campaign().await;
    seen.push(format!("b after a's lease: {}", outcome(&new)));
    let mut new = new.expect("a free name");
    // Terms come from the nodes' clocks (the kit's start at zero): their
    // order is what a resource sees.
    seen.push(format!("b's term above a's: {}", new.term() > old.term()));
    let deposed = old.proclaim("a again").await;
    seen.push(format!("a's proclaim once deposed: {}", outcome(&deposed)));
    new.proclaim("b").await.expect("the new leader proclaims");
    let leader = a.election("diff-leader").leader().await.leader();
    seen.push(format!(
        "leader read: {:?}",
        leader.map(|l| (l.id == new.id().as_bytes(), l.term == new.term(), l.value))
    ));
    new.resign().await;

    // Loss under pause: a kept-alive lock on a majority paused.
    let kept = a
        .lock("diff-kept")
        .keep_alive(KeepAlive::default())
        .wait(Wait::No)
        .await
        .expect("free");
    env.pause(0);
    env.pause(1);
    let reason = kept.lost().await;
    // The class of the loss, without the nodes' addresses.
    let reason = reason.to_string();
    let class = reason.split(':').next().unwrap_or_default();
    seen.push(format!("kept lock lost: {class}"));
    env.resume(0);
    env.resume(1);
    drop(kept);
    tokio::time::sleep(TTL).await;
    seen.push(format!("left: {:?}", env.values("diff-kept")));

    // A majority restarted empty forgets a lock another client then takes.
    let held = a.lock("diff-restart").wait(Wait::No).await.expect("free");
    env.restart_empty(0);
    env.restart_empty(1);
    let taken = b
        .lock("diff-restart")
        // The restarted servers' votes count again one TTL after the
        // client saw them back: far more than that, so that a busy machine
        // changes nothing.
        .wait(Wait::AtMost(Duration::from_secs(20)))
        .await;
    seen.push(format!("b after a restart empty: {}", outcome(&taken)));
    drop((held, taken));

    // A semaphore's limit, by a client that connects after the restarts.
    let c = env.client().await;
    let mut permits = Vec::new();
    for _ in 0..3 {
        let permit = c.lock("diff-pool").permits(2).wait(Wait::No).await;
        seen.push(format!("permit: {}", outcome(&permit)));
        permits.push(permit);
    }
    drop(permits);

    a.shutdown().await;
    b.shutdown().await;
    c.shutdown().await;
    seen
}

fn on_real_servers() -> Vec<String> {
    let cluster = RedisCluster::start(3);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(scenarios(&Env::Real(cluster)))
}

fn on_the_kit(divergent: bool) -> Vec<String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a runtime");
    redlock_testkit::plant_release_ignoring_value(divergent);
    // Nodes that answer as the real servers of this run do.
    let valkey = redlock_tests::server().kind() == ServerKind::Valkey;
    let seen = runtime.block_on(async {
        let quorum = Quorum::builder().nodes(3).valkey(valkey).build();
        scenarios(&Env::Kit(quorum)).await
    });
    redlock_testkit::plant_release_ignoring_value(false);
    seen
}

#[test]
fn the_kit_answers_as_real_servers_do() {
    let real = on_real_servers();
    let kit = on_the_kit(false);
    for line in &real {
        println!("real: {line}");
    }
    assert_eq!(kit, real);
}

#[test]
fn a_release_that_ignores_the_value_is_found() {
    let real = on_real_servers();
    let kit = on_the_kit(true);
    let differences: Vec<String> = real
        .iter()
        .zip(&kit)
        .filter(|(real, kit)| real != kit)
        .map(|(real, kit)| format!("real: {real} / kit: {kit}"))
        .collect();
    for difference in &differences {
        println!("{difference}");
    }
    assert!(
        !differences.is_empty(),
        "the planted divergence went unnoticed"
    );
}
