//! The blocking client over the kit's nodes: in real time (its runtime is
//! its own, on a thread of its own), with no server and no port.

use std::time::Duration;

use redlock_testkit::Quorum;
use redlock_tokio::Wait;

#[test]
fn the_blocking_client_locks_on_the_kits_nodes_and_leaves_nothing() {
    let quorum = Quorum::new(3);
    let redlock = quorum
        .client()
        .ttl(Duration::from_secs(10))
        .build_blocking()
        .expect("a client");
    let guard = redlock
        .lock("report")
        .wait(Wait::No)
        .acquire()
        .expect("free");
    assert!(
        quorum
            .nodes()
            .iter()
            .all(|node| node.get("report").is_some())
    );
    let refused = redlock.lock("report").wait(Wait::No).acquire().unwrap_err();
    assert!(refused.is_held_by_other(), "{refused}");
    guard.release().expect("released");
    assert!(
        quorum
            .nodes()
            .iter()
            .all(|node| node.get("report").is_none())
    );
    assert_eq!(quorum.history().holds().len(), 1);
}

#[test]
fn a_blocking_kept_alive_lock_is_lost_when_a_majority_pauses() {
    let quorum = Quorum::new(3);
    let redlock = quorum
        .client()
        .ttl(Duration::from_millis(300))
        .node_timeout(Duration::from_millis(50))
        .build_blocking()
        .expect("a client");
    let guard = redlock
        .lock("report")
        .keep_alive(redlock_tokio::KeepAlive::default())
        .acquire()
        .expect("free");
    quorum.node(0).pause();
    quorum.node(1).pause();
    let reason = guard.wait_lost().expect("a loss");
    println!("lost: {reason}");
    quorum.node(0).resume();
    quorum.node(1).resume();
    drop(guard);
    // The key goes from every node, released or expired (a busy machine
    // may take its time: real time here).
    let gone = || {
        quorum
            .nodes()
            .iter()
            .all(|node| node.get("report").is_none())
    };
    for _ in 0..500 {
        if gone() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(gone(), "a key left behind");
}
