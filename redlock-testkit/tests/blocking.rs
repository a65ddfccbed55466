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
    // Granted at a quorum; the third node's write may still be on its way
    // (real time, a busy machine): wait for it.
    let on_every_node = |held: bool| {
        move |quorum: &Quorum| {
            quorum
                .nodes()
                .iter()
                .all(|node| node.get("report").is_some() == held)
        }
    };
    assert!(
        eventually(&quorum, on_every_node(true)),
        "the lock on every node"
    );
    let refused = redlock.lock("report").wait(Wait::No).acquire().unwrap_err();
    assert!(refused.is_held_by_other(), "{refused}");
    // Answered by every node, not only a quorum.
    guard.release_every_node().expect("released");
    assert!(on_every_node(false)(&quorum), "released on every node");
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
    let gone = |quorum: &Quorum| {
        quorum
            .nodes()
            .iter()
            .all(|node| node.get("report").is_none())
    };
    assert!(eventually(&quorum, gone), "a key left behind");
}

/// Whether `condition` holds within 5 s of real time, polled every 10 ms.
fn eventually(quorum: &Quorum, condition: impl Fn(&Quorum) -> bool) -> bool {
    for _ in 0..500 {
        if condition(quorum) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    condition(quorum)
}
