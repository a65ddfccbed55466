//! `KeptLock`: the keep-alive schedule and its extensions as one machine,
//! driven like every other. Time is passed in; no clock is read.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use redlock_core::{
    Command, Config, ExtendError, KeepAlive, KeptLock, KeptLockEvent, Lock, LossReason, Machine,
    NodeError, NodeErrorKind, Reply, Response,
};
use support::{drain, granted};

fn lock(nodes: usize, t0: Instant) -> Lock {
    let settings = Arc::new(
        Config::new((0..nodes).map(|n| format!("n{n}")))
            .validate()
            .unwrap(),
    );
    granted(&settings, 1, t0)
}

fn events(kept: &mut KeptLock) -> Vec<KeptLockEvent> {
    std::iter::from_fn(|| kept.poll_event()).collect()
}

/// Fires the machine's timer: the extension due then is queued.
fn fire(kept: &mut KeptLock) -> Instant {
    let at = kept.poll_timeout().expect("a timer while not lost");
    kept.handle_timeout(at);
    at
}

#[test]
fn extends_when_due_and_waits_again_after_each_extension() {
    let t0 = Instant::now();
    let lock = lock(3, t0);
    let first_end = lock.valid_until();
    let mut kept = KeptLock::new(lock, KeepAlive::default());
    assert!(drain(&mut kept).is_empty(), "nothing before it is due");
    assert!(events(&mut kept).is_empty());
    for round in 1..=3u64 {
        let due = fire(&mut kept);
        assert!(due < kept.lock().valid_until());
        let sent = drain(&mut kept);
        assert_eq!(sent.len(), 3);
        assert!(
            sent.iter()
                .all(|r| matches!(r.command, Command::Extend { .. }))
        );
        // While the extension runs, the timer is its deadline.
        assert!(kept.poll_timeout().unwrap() <= due + Duration::from_millis(50));
        let now = due + Duration::from_millis(1);
        for request in &sent[..2] {
            kept.handle_reply(Reply::to(request, Ok(Response::Int(1))), now);
        }
        match events(&mut kept).as_slice() {
            [KeptLockEvent::Extended(extended)] => {
                assert_eq!(extended.valid_until, kept.lock().valid_until());
            }
            other => panic!("expected one extension, got {other:?}"),
        }
        assert_eq!(kept.lock().extensions(), round);
        // The third node's late answer belongs to a round that ended.
        kept.handle_reply(Reply::to(&sent[2], Ok(Response::Int(1))), now);
        assert!(drain(&mut kept).is_empty() && events(&mut kept).is_empty());
        assert!(!kept.is_done());
    }
    assert!(kept.lock().valid_until() > first_end);
}

#[test]
fn a_missing_quorum_is_retried_then_lost_at_the_end_of_validity() {
    let t0 = Instant::now();
    let mut kept = KeptLock::new(lock(3, t0), KeepAlive::default());
    let end = kept.lock().valid_until();
    let mut retries = 0;
    // Every node stays silent: each round times out, the schedule retries
    // while validity is left, and the loss comes at its end, not sooner.
    while !kept.is_done() {
        assert!(retries < 10_000, "bounded");
        let at = fire(&mut kept);
        assert!(at <= end);
        let sent = drain(&mut kept);
        if !sent.is_empty() {
            retries += 1;
        }
        for event in events(&mut kept) {
            match event {
                KeptLockEvent::ExtendFailed(ExtendError::NoQuorum { .. }) => {}
                KeptLockEvent::ExtendFailed(ExtendError::Expired { .. }) => {}
                KeptLockEvent::Lost(LossReason::ExtendFailed(_)) => {
                    assert!(
                        at >= end - Duration::from_millis(50),
                        "lost early at {at:?}"
                    );
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    assert!(retries > 1, "retried");
    assert_eq!(kept.poll_timeout(), None);
}

#[test]
fn another_owner_is_a_loss_at_once() {
    let t0 = Instant::now();
    let mut kept = KeptLock::new(lock(3, t0), KeepAlive::default());
    let due = fire(&mut kept);
    let sent = drain(&mut kept);
    for request in &sent {
        kept.handle_reply(Reply::to(request, Ok(Response::Int(0))), due);
    }
    let events = events(&mut kept);
    assert!(matches!(
        events.last(),
        Some(KeptLockEvent::Lost(LossReason::ExtendFailed(
            ExtendError::Lost { .. }
        )))
    ));
    assert!(kept.is_done());
    assert!(
        kept.lock().valid_until() > due,
        "the loss comes before the validity ends"
    );
}

#[test]
fn the_limit_ends_the_lock_with_its_validity() {
    let t0 = Instant::now();
    let mut kept = KeptLock::new(lock(1, t0), KeepAlive::default().max_extensions(0));
    assert!(matches!(
        events(&mut kept).as_slice(),
        [KeptLockEvent::LimitReached { extensions: 0 }]
    ));
    assert_eq!(kept.poll_timeout(), Some(kept.lock().valid_until()));
    let end = fire(&mut kept);
    assert!(drain(&mut kept).is_empty(), "no extension past the limit");
    assert!(matches!(
        events(&mut kept).as_slice(),
        [KeptLockEvent::Lost(LossReason::ExtensionLimit {
            extensions: 0
        })]
    ));
    assert_eq!(end, kept.into_lock().valid_until());
}

#[test]
fn node_errors_count_like_silence() {
    let t0 = Instant::now();
    let mut kept = KeptLock::new(lock(3, t0), KeepAlive::default());
    let due = fire(&mut kept);
    let down = || Err(NodeError::new(NodeErrorKind::Connection, "refused"));
    for request in drain(&mut kept) {
        kept.handle_reply(Reply::to(&request, down()), due);
    }
    assert!(matches!(
        events(&mut kept).as_slice(),
        [KeptLockEvent::ExtendFailed(ExtendError::NoQuorum { .. })]
    ));
    // Retried later, with validity left.
    let retry = kept.poll_timeout().unwrap();
    assert!(retry > due && retry < kept.lock().valid_until());
    assert!(!kept.is_done());
}
