//! First come, first served among one client's waiters: the queue's rule
//! (who is told a notice) and an acquisition that queues behind others
//! instead of attempting. In virtual time; asserts who is served.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::StdRng;
use redlock_core::{
    AcquireEvent, Acquisition, Attempts, HandOver, Key, Machine, NodeId, Notice, Reply, Response,
    Settings, WaitQueue, WaiterId, Wake,
};
use support::{MS, drain_but_marks, slow_retries};

fn tell(waiter: u64, notice: Notice) -> Wake {
    Wake::Tell {
        waiter: WaiterId(waiter),
        notice,
    }
}

fn wakes(queue: &mut WaitQueue) -> Vec<Wake> {
    std::iter::from_fn(|| queue.poll_wake()).collect()
}

#[test]
fn a_notice_goes_to_the_first_waiter_only() {
    let mut queue = WaitQueue::new();
    assert!(queue.may_attempt_now());
    for id in 1..=3 {
        queue.handle_join(WaiterId(id));
    }
    assert!(!queue.may_attempt_now());
    assert_eq!(
        wakes(&mut queue),
        vec![Wake::Replay {
            waiter: WaiterId(1)
        }]
    );
    let released = Notice::Released(NodeId(1));
    queue.handle_notice(released);
    queue.handle_notice(Notice::Subscribed);
    assert_eq!(
        wakes(&mut queue),
        vec![tell(1, released), tell(1, Notice::Subscribed)]
    );
}

#[test]
fn the_first_keeps_its_turn_until_it_leaves() {
    let mut queue = WaitQueue::new();
    for id in 1..=3 {
        queue.handle_join(WaiterId(id));
    }
    wakes(&mut queue);
    // Its attempt failed (a client elsewhere took the lock): still first.
    queue.handle_notice(Notice::Released(NodeId(0)));
    queue.handle_notice(Notice::Released(NodeId(0)));
    assert!(
        wakes(&mut queue)
            .iter()
            .all(|w| *w == tell(1, Notice::Released(NodeId(0))))
    );
    // Served: the next release is the second's, with nothing replayed.
    queue.handle_leave(WaiterId(1), true);
    assert_eq!(wakes(&mut queue), vec![]);
    assert_eq!(queue.first(), Some(WaiterId(2)));
    // Its own release, told by the client, goes to nobody of this order:
    // the second hears the nodes' notices, as other clients' waiters do.
    queue.handle_notice(Notice::HandedOver);
    assert_eq!(wakes(&mut queue), vec![]);
    queue.handle_notice(Notice::Released(NodeId(2)));
    assert_eq!(
        wakes(&mut queue),
        vec![tell(2, Notice::Released(NodeId(2)))]
    );
    // Gone without the lock: the third is first and told what it missed.
    queue.handle_leave(WaiterId(2), false);
    assert_eq!(
        wakes(&mut queue),
        vec![Wake::Replay {
            waiter: WaiterId(3)
        }],
        "the notice for the one that left goes nowhere; the next is told"
    );
    // A waiter that leaves from the middle changes nobody's turn.
    queue.handle_join(WaiterId(4));
    queue.handle_join(WaiterId(5));
    queue.handle_leave(WaiterId(4), false);
    assert_eq!(wakes(&mut queue), vec![]);
    queue.handle_leave(WaiterId(3), false);
    assert_eq!(
        wakes(&mut queue),
        vec![Wake::Replay {
            waiter: WaiterId(5)
        }]
    );
    queue.handle_leave(WaiterId(5), false);
    assert!(queue.is_empty() && queue.may_attempt_now());
}

#[test]
fn joining_twice_changes_nothing() {
    let mut queue = WaitQueue::new();
    queue.handle_join(WaiterId(1));
    queue.handle_join(WaiterId(2));
    queue.handle_join_by_masters(WaiterId(3));
    // Again, in either order.
    queue.handle_join(WaiterId(1));
    queue.handle_join_by_masters(WaiterId(1));
    queue.handle_join_by_masters(WaiterId(3));
    queue.handle_join(WaiterId(3));
    assert_eq!(queue.len(), 3);
    assert_eq!(
        wakes(&mut queue),
        vec![
            Wake::Replay {
                waiter: WaiterId(1)
            },
            Wake::Replay {
                waiter: WaiterId(3)
            },
        ],
        "each told once"
    );
    let notice = Notice::Released(NodeId(0));
    queue.handle_notice(notice);
    assert_eq!(wakes(&mut queue), vec![tell(1, notice), tell(3, notice)]);
    // One leave each empties it.
    queue.handle_leave(WaiterId(1), true);
    assert_eq!(queue.first(), Some(WaiterId(2)));
    queue.handle_leave(WaiterId(2), true);
    queue.handle_leave(WaiterId(3), true);
    assert!(queue.is_empty());
}

#[test]
fn what_was_due_to_a_waiter_that_leaves_goes_nowhere_and_the_others_keep_theirs() {
    let mut queue = WaitQueue::new();
    queue.handle_join_by_masters(WaiterId(1));
    queue.handle_join_by_masters(WaiterId(2));
    let notice = Notice::Released(NodeId(1));
    queue.handle_notice(notice);
    // Not drained before the first left.
    queue.handle_leave(WaiterId(1), false);
    assert_eq!(
        wakes(&mut queue),
        vec![
            Wake::Replay {
                waiter: WaiterId(2)
            },
            tell(2, notice),
        ]
    );
}

/// Fair locks: the masters' queues say whose turn it is, and it may be any
/// of the client's waiters, so each is told every notice; they neither
/// hold back nor wait behind the client's own order.
#[test]
fn waiters_ordered_by_the_masters_are_told_every_notice() {
    let mut queue = WaitQueue::new();
    queue.handle_join_by_masters(WaiterId(1));
    queue.handle_join_by_masters(WaiterId(2));
    assert!(queue.may_attempt_now(), "they hold no one back");
    assert_eq!(
        wakes(&mut queue),
        vec![
            Wake::Replay {
                waiter: WaiterId(1)
            },
            Wake::Replay {
                waiter: WaiterId(2)
            },
        ]
    );
    queue.handle_join(WaiterId(3));
    let notice = Notice::Released(NodeId(0));
    queue.handle_notice(notice);
    assert_eq!(
        wakes(&mut queue),
        vec![
            Wake::Replay {
                waiter: WaiterId(3)
            },
            tell(3, notice),
            tell(1, notice),
            tell(2, notice),
        ]
    );
    queue.handle_leave(WaiterId(1), true);
    queue.handle_notice(Notice::HandedOver);
    queue.handle_notice(notice);
    assert_eq!(
        wakes(&mut queue),
        vec![
            tell(2, Notice::HandedOver),
            tell(3, notice),
            tell(2, notice),
        ]
    );
    assert_eq!(queue.len(), 2);
}

/// The client's own release, queued on every node.
fn queued() -> HandOver {
    HandOver::Queued {
        channels: vec![Key::from("job\0released")],
    }
}

/// The client's own release, answered.
fn answered(others_waiting: bool, unheard: bool) -> HandOver {
    HandOver::Answered {
        channels: vec![Key::from("job\0released")],
        others_waiting,
        unheard,
    }
}

#[test]
fn the_clients_own_release_goes_to_its_first_waiter_once_and_only_while_no_other_client_waits() {
    let mut queue = WaitQueue::new();
    for id in 1..=2 {
        queue.handle_join(WaiterId(id));
    }
    wakes(&mut queue);
    let handed_over = vec![tell(1, Notice::HandedOver)];
    // Before any release answered, the client does not know who else
    // waits: the first hears the nodes.
    queue.handle_hand_over(&queued());
    assert_eq!(wakes(&mut queue), vec![]);
    // The nodes published (another client's waiter is marked): nothing
    // more to tell.
    queue.handle_hand_over(&answered(true, false));
    assert_eq!(wakes(&mut queue), vec![]);
    // Some node published nothing (only this client's waiters are marked
    // there): the first hears of it from its client, at the answer.
    queue.handle_hand_over(&queued());
    queue.handle_hand_over(&answered(true, true));
    assert_eq!(wakes(&mut queue), handed_over);
    // Another client still waits: the next is not handed over when queued.
    queue.handle_hand_over(&queued());
    assert_eq!(wakes(&mut queue), vec![]);
    queue.handle_hand_over(&answered(false, true));
    assert_eq!(wakes(&mut queue), handed_over);
    // Nobody else waits: handed over when queued, and not told twice.
    queue.handle_hand_over(&queued());
    assert_eq!(wakes(&mut queue), handed_over);
    queue.handle_hand_over(&answered(false, true));
    assert_eq!(wakes(&mut queue), vec![]);
    // The first got the lock; the second's turn: its release is the
    // second's, at once.
    queue.handle_leave(WaiterId(1), true);
    queue.handle_hand_over(&queued());
    assert_eq!(wakes(&mut queue), vec![tell(2, Notice::HandedOver)]);
    // Then another client's waiter shows up: the hand-over stops.
    queue.handle_hand_over(&answered(true, false));
    queue.handle_hand_over(&queued());
    assert_eq!(wakes(&mut queue), vec![]);
}

fn acquisition(settings: &Arc<Settings>, attempts: Attempts, t0: Instant) -> Acquisition<StdRng> {
    Acquisition::new(
        Arc::clone(settings),
        b"q",
        settings.default_ttl(),
        attempts,
        t0,
        StdRng::seed_from_u64(3),
    )
}

#[test]
fn a_queued_acquisition_waits_for_its_turn_then_attempts_at_once() {
    let settings = slow_retries();
    let t0 = Instant::now();
    let mut acquire = acquisition(&settings, Attempts::Retry, t0);
    acquire.queue_behind(t0, None);
    assert!(drain_but_marks(&mut acquire).is_empty(), "nothing sent");
    assert_eq!(acquire.attempts(), 0);
    assert!(acquire.current_attempt().is_none());
    assert_eq!(acquire.poll_listen(), Some(acquire.channels()));
    assert_eq!(acquire.poll_timeout(), Some(t0 + Duration::from_secs(1)));
    // Its turn: the release of the one before it, from two of three nodes.
    let turn = t0 + 40 * MS;
    acquire.handle_notice(Notice::Released(NodeId(0)), turn);
    acquire.handle_notice(Notice::Released(NodeId(1)), turn);
    assert_eq!(acquire.attempts(), 1, "the first attempt, at the notice");
    let sent = drain_but_marks(&mut acquire);
    assert_eq!(sent.len(), 3);
    acquire.handle_reply(Reply::to(&sent[0], Ok(Response::Int(1))), turn + MS);
    acquire.handle_reply(Reply::to(&sent[1], Ok(Response::Int(1))), turn + MS);
    assert!(matches!(
        acquire.poll_event(),
        Some(AcquireEvent::Acquired(_))
    ));
}

#[test]
fn a_queued_acquisition_still_retries_on_its_timer() {
    // No notice ever comes (a pub/sub connection down): the timer is the
    // backstop, and the attempt it starts is the first, not a retry.
    let settings = slow_retries();
    let t0 = Instant::now();
    let mut acquire = acquisition(&settings, Attempts::Retry, t0);
    acquire.queue_behind(t0, None);
    let at = acquire.poll_timeout().unwrap();
    acquire.handle_timeout(at);
    assert_eq!(acquire.attempts(), 1);
    assert_eq!(drain_but_marks(&mut acquire).len(), 3);
}

#[test]
fn try_lock_never_queues() {
    let settings = slow_retries();
    let t0 = Instant::now();
    let mut acquire = acquisition(&settings, Attempts::Once, t0);
    acquire.queue_behind(t0, None);
    assert_eq!(
        drain_but_marks(&mut acquire).len(),
        3,
        "its one attempt goes out"
    );
    // Nor does an acquisition whose requests were taken already.
    let mut acquire = acquisition(&settings, Attempts::Retry, t0);
    let sent = drain_but_marks(&mut acquire);
    acquire.queue_behind(t0, None);
    assert_eq!(acquire.current_attempt(), Some(sent[0].round));
}

#[test]
fn notices_routed_by_the_queue_serve_waiters_in_order() {
    // Four acquisitions of one client on a lock held elsewhere; the first
    // attempted and failed, the others queued behind it. Each release (the
    // holder's, announced by the nodes, then each waiter's own, handed over
    // and echoed by the nodes) is routed by the queue; the waiters are
    // served in the order they came.
    let settings = slow_retries();
    let t0 = Instant::now();
    let mut queue = WaitQueue::new();
    let mut waiters: Vec<Acquisition<StdRng>> = Vec::new();
    let mut first = acquisition(&settings, Attempts::Retry, t0);
    let sent = drain_but_marks(&mut first);
    for request in &sent {
        let held = Reply::to(request, Ok(Response::Data(b"elsewhere".to_vec())));
        first.handle_reply(held, t0 + MS);
    }
    drain_but_marks(&mut first);
    waiters.push(first);
    queue.handle_join(WaiterId(0));
    for id in 1..4 {
        assert!(!queue.may_attempt_now());
        let mut next = acquisition(&settings, Attempts::Retry, t0 + 2 * MS);
        next.queue_behind(t0 + 2 * MS, None);
        waiters.push(next);
        queue.handle_join(WaiterId(id));
    }
    let mut now = t0 + 10 * MS;
    let mut served = Vec::new();
    for round in 0..4 {
        now += 10 * MS;
        if round > 0 {
            queue.handle_notice(Notice::HandedOver);
        }
        // Every node announces the release.
        for node in 0..3 {
            queue.handle_notice(Notice::Released(NodeId(node)));
        }
        while let Some(wake) = queue.poll_wake() {
            if let Wake::Tell { waiter, notice } = wake {
                waiters[waiter.0 as usize].handle_notice(notice, now);
            }
        }
        // Whoever attempts gets the lock (it is free).
        for (id, waiter) in waiters.iter_mut().enumerate() {
            let sent = drain_but_marks(waiter);
            if sent.is_empty() {
                continue;
            }
            for request in &sent {
                waiter.handle_reply(Reply::to(request, Ok(Response::Int(1))), now + MS);
            }
            let events: Vec<AcquireEvent> = std::iter::from_fn(|| waiter.poll_event()).collect();
            if matches!(events.last(), Some(AcquireEvent::Acquired(_))) {
                served.push(id);
                queue.handle_leave(WaiterId(id as u64), true);
            }
        }
    }
    assert_eq!(served, vec![0, 1, 2, 3]);
}

#[test]
fn a_reentrant_lock_never_queues() {
    // Its owner may hold it already: taking it again must not wait behind
    // other waiters for a release that its owner would have to make.
    let settings = slow_retries();
    let t0 = Instant::now();
    let mut acquire = Acquisition::with_spec(
        Arc::clone(&settings),
        redlock_core::LockSpec::Reentrant {
            resource: b"q",
            owner: "job-7",
        },
        settings.default_ttl(),
        Attempts::Retry,
        t0,
        StdRng::seed_from_u64(4),
    )
    .unwrap();
    acquire.queue_behind(t0, None);
    assert_eq!(
        drain_but_marks(&mut acquire).len(),
        3,
        "it attempts at once"
    );
}
