//! Each fault of a node, seen through the real client: one scenario each.

use std::time::Duration;

use redlock_testkit::{EventKind, FencedWrite, Hold, Quorum, overlaps, stale_writes};
use redlock_tokio::{Error, Wait};

async fn client(quorum: &Quorum) -> redlock_tokio::Redlock {
    quorum
        .client()
        .ttl(Duration::from_secs(10))
        .build()
        .await
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_lock_is_on_every_node_and_gone_after_its_release() {
    let quorum = Quorum::new(3);
    let redlock = client(&quorum).await;
    let guard = redlock.lock("job").await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    for node in quorum.nodes() {
        let key = node.get("job").expect("the lock key on every node");
        assert_eq!(key.value.as_deref(), Some(guard.value().as_bytes()));
        assert!(key.ttl.is_some_and(|ttl| ttl <= Duration::from_secs(9)));
    }
    guard.release().await;
    assert!(quorum.nodes().iter().all(|node| node.get("job").is_none()));
    let history = quorum.history();
    assert_eq!(history.grants().count(), 3);
    let released = history
        .events()
        .iter()
        .filter(|event| event.kind == EventKind::Released)
        .count();
    assert_eq!(released, 3);
    assert_eq!(history.holds().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_majority_killed_refuses_the_lock_and_a_restart_brings_it_back() {
    let quorum = Quorum::new(3);
    let redlock = client(&quorum).await;
    quorum.node(0).kill();
    quorum.node(1).kill();
    let refused = redlock.lock("job").wait(Wait::No).await.unwrap_err();
    assert!(refused.is_unavailable(), "{refused}");
    quorum.node(0).restart();
    quorum.node(1).restart();
    let guard = redlock
        .lock("job")
        .wait(Wait::AtMost(Duration::from_secs(5)))
        .await
        .unwrap();
    guard.release().await;
}

#[tokio::test(start_paused = true)]
async fn a_node_restarted_empty_lets_a_second_holder_in_and_the_checker_sees_it() {
    let quorum = Quorum::new(3);
    let first = client(&quorum).await;
    let second = client(&quorum).await;
    let _held = first.lock("job").await.unwrap();
    quorum.node(0).restart_empty();
    quorum.node(1).restart_empty();
    // The second client reconnects to the restarted nodes and takes the
    // lock the first still holds.
    let _also = second
        .lock("job")
        .wait(Wait::AtMost(Duration::from_secs(2)))
        .await
        .unwrap();
    let found = quorum.history().overlaps();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].first.key, b"job");
}

#[tokio::test(start_paused = true)]
async fn a_clock_stepped_ahead_expires_the_key_early() {
    let quorum = Quorum::new(3);
    let redlock = client(&quorum).await;
    let _guard = redlock.lock("job").await.unwrap();
    quorum.node(2).step_clock(Duration::from_secs(20));
    assert!(quorum.node(2).get("job").is_none());
    assert!(quorum.node(1).get("job").is_some());
}

#[tokio::test(start_paused = true)]
async fn garbage_or_lost_messages_on_a_minority_cost_nothing_on_a_majority_everything() {
    let quorum = Quorum::new(3);
    let redlock = client(&quorum).await;
    quorum.node(0).answer_garbage(true);
    quorum.node(1).drop_replies(true);
    let failed = redlock.lock("a").wait(Wait::No).await.unwrap_err();
    assert!(!failed.is_held_by_other(), "{failed}");
    quorum.node(1).drop_replies(false);
    quorum.node(1).drop_requests(true);
    assert!(redlock.lock("b").wait(Wait::No).await.is_err());
    quorum.node(1).drop_requests(false);
    quorum.node(0).answer_garbage(false);
    let guard = redlock.lock("c").wait(Wait::No).await.unwrap();
    guard.release().await;
}

#[tokio::test(start_paused = true)]
async fn a_node_that_refuses_auth_fails_the_build_and_later_is_one_vote_less() {
    let quorum = Quorum::new(3);
    quorum.node(2).refuse_auth(true);
    let refused = quorum.client().build().await.unwrap_err();
    assert!(matches!(refused, Error::Auth { .. }), "{refused}");
    quorum.node(2).refuse_auth(false);
    let redlock = client(&quorum).await;
    quorum.node(2).refuse_auth(true);
    let guard = redlock.lock("job").await.unwrap();
    assert!(quorum.node(2).get("job").is_none());
    guard.release().await;
}

#[tokio::test(start_paused = true)]
async fn a_slow_node_is_outvoted_and_a_scheduled_fault_fires_on_time() {
    let quorum = Quorum::new(3);
    let redlock = client(&quorum).await;
    quorum.node(0).latency(Duration::from_secs(1));
    let fired = quorum.at(Duration::from_secs(60), |q| q.node(1).pause());
    let guard = redlock.lock("job").await.unwrap();
    assert!(guard.validity() > Duration::from_secs(9));
    guard.release().await;
    fired.await.unwrap();
    assert!(quorum.elapsed() >= Duration::from_secs(60));
}

#[tokio::test(start_paused = true)]
async fn fencing_counters_are_visible_and_tokens_rise() {
    let quorum = Quorum::new(3);
    let redlock = client(&quorum).await;
    let first = redlock.lock("ledger").fencing().await.unwrap();
    let one = first.fencing_token().unwrap();
    first.release().await;
    let second = redlock.lock("ledger").fencing().await.unwrap();
    let two = second.fencing_token().unwrap();
    assert!(two > one);
    let counters: Vec<u64> = quorum
        .node(0)
        .keys()
        .iter()
        .filter(|key| key.ttl.is_none())
        .filter_map(|key| key.counter())
        .collect();
    assert_eq!(counters, [two]);
    second.release().await;
}

#[test]
fn the_checkers_find_overlaps_and_stale_writes() {
    let hold = |holder: &str, from: u64, until: u64| Hold {
        key: b"job".to_vec(),
        holder: holder.as_bytes().to_vec(),
        from: Duration::from_secs(from),
        until: Duration::from_secs(until),
        shared: false,
    };
    assert!(overlaps(&[hold("a", 0, 10), hold("b", 10, 20)]).is_empty());
    assert_eq!(overlaps(&[hold("a", 0, 10), hold("b", 9, 20)]).len(), 1);
    let write = |token| FencedWrite {
        resource: "ledger".to_owned(),
        token,
    };
    let stale = stale_writes(&[write(1), write(3), write(2), write(3)]);
    assert_eq!(stale, [write(2)]);
}

#[tokio::test(start_paused = true)]
async fn a_key_of_another_type_is_refused_as_a_real_server_refuses_it() {
    let quorum = Quorum::new(3);
    let redlock = client(&quorum).await;
    // Another program's hash at the lock's name on two nodes of three: no
    // quorum can be had, and the third node's grant is taken back.
    quorum.node(0).put_hash("job");
    quorum.node(1).put_hash("job");
    let refused = redlock.lock("job").wait(Wait::No).await.unwrap_err();
    let wrong = refused.as_acquire().is_some_and(|e| e.is_wrong_type());
    assert!(wrong, "{refused}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(quorum.node(2).get("job").is_none(), "nothing left held");
    for node in [quorum.node(0), quorum.node(1)] {
        let hash = node.get("job").expect("the hash stays");
        assert_eq!((hash.value, hash.ttl), (None, None));
    }
    // Every kind reads its key the same way.
    let fair = redlock.lock("job").fair().wait(Wait::No).await.unwrap_err();
    assert!(
        fair.as_acquire().is_some_and(|e| e.is_wrong_type()),
        "{fair}"
    );
    let read = redlock.lock("job").read().wait(Wait::No).await.unwrap_err();
    assert!(
        read.as_acquire().is_some_and(|e| e.is_wrong_type()),
        "{read}"
    );
}

#[tokio::test(start_paused = true)]
async fn readers_share_a_key_in_the_history_and_a_writer_after_them_does_not() {
    let quorum = Quorum::new(3);
    let redlock = client(&quorum).await;
    let first = redlock.lock("table").read().await.unwrap();
    let second = redlock.lock("table").read().await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    first.release().await;
    second.release().await;
    let writer = redlock.lock("table").write().await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    writer.release().await;
    // One owner's two reentrant holds are one holder's.
    let outer = redlock.lock("ledger").reentrant("job-1").await.unwrap();
    let inner = redlock.lock("ledger").reentrant("job-1").await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    inner.release().await;
    outer.release().await;

    let holds = quorum.history().holds();
    let on = |key: &str| -> Vec<&Hold> {
        holds
            .iter()
            .filter(|hold| hold.key == key.as_bytes())
            .collect()
    };
    let (readers, writers): (Vec<&Hold>, Vec<&Hold>) =
        on("table").into_iter().partition(|hold| hold.shared);
    assert_eq!((readers.len(), writers.len()), (2, 1));
    assert!(
        readers[1].from < readers[0].until,
        "the readers held at once"
    );
    let owners = on("ledger");
    assert_eq!(owners.len(), 1);
    assert_eq!(owners[0].holder, b"job-1");
    assert!(quorum.history().overlaps().is_empty());

    // A writer's hold inside the readers' is found.
    let mut crossed = holds.clone();
    let mut writer = readers[0].clone();
    (writer.holder, writer.shared) = (b"a writer".to_vec(), false);
    crossed.push(writer);
    assert_eq!(overlaps(&crossed).len(), 2);
}
