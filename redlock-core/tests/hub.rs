//! The notice hub: which channels are wanted, who hears a notice, what a
//! subscription and a hand-over mean, what is replayed, and how a new
//! acquisition is planned behind the client's waiters. In virtual time;
//! asserts who is told what, with which instant.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::StdRng;
use redlock_core::{
    Acquisition, Attempts, Command, Config, HandOver, Hub, Key, Machine, NodeId, Notice, WaiterId,
};

const MS: Duration = Duration::from_millis(1);

/// What the hub asks to deliver, drained.
fn told(hub: &mut Hub) -> Vec<(WaiterId, Notice, Instant)> {
    std::iter::from_fn(|| hub.poll_delivery())
        .map(|delivery| (delivery.waiter, delivery.notice, delivery.at))
        .collect()
}

/// Only who hears what.
fn heard(hub: &mut Hub) -> Vec<(WaiterId, Notice)> {
    told(hub)
        .into_iter()
        .map(|(waiter, notice, _)| (waiter, notice))
        .collect()
}

fn wanted(hub: &Hub) -> Vec<Key> {
    let mut keys: Vec<Key> = hub.wanted().cloned().collect();
    keys.sort();
    keys
}

#[test]
fn channels_are_wanted_while_someone_waits() {
    let now = Instant::now();
    let mut hub = Hub::new(3);
    let (a, b) = (Key::from("a\0released"), Key::from("b\0released"));
    assert!(!hub.is_waiting());
    let first = hub.handle_join(vec![a.clone()], false, now);
    assert!(hub.poll_wanted_changed());
    let second = hub.handle_join(vec![a.clone(), b.clone()], false, now);
    assert!(hub.poll_wanted_changed(), "b is new");
    assert_eq!(wanted(&hub), vec![a.clone(), b.clone()]);
    assert!(hub.is_waiting());
    hub.handle_leave(first, false, now);
    assert!(!hub.poll_wanted_changed(), "the second still waits on both");
    assert_eq!(wanted(&hub), vec![a, b]);
    hub.handle_leave(second, false, now);
    assert!(hub.poll_wanted_changed());
    assert!(wanted(&hub).is_empty());
    assert!(!hub.is_waiting());
    // Leaving twice changes nothing.
    hub.handle_leave(second, false, now);
    assert!(!hub.poll_wanted_changed());
}

#[test]
fn the_wanted_count_is_the_number_of_channels_someone_waits_on() {
    // The adapter's listeners connect only while it is not zero.
    let now = Instant::now();
    let mut hub = Hub::new(3);
    let (a, b) = (Key::from("a\0released"), Key::from("b\0released"));
    let count = |hub: &Hub| {
        assert_eq!(hub.wanted_len(), hub.wanted().count());
        hub.wanted_len()
    };
    assert_eq!(count(&hub), 0);
    let first = hub.handle_join(vec![a.clone()], false, now);
    assert_eq!(count(&hub), 1);
    let second = hub.handle_join(vec![a, b], false, now);
    assert_eq!(count(&hub), 2);
    hub.handle_leave(first, false, now);
    assert_eq!(count(&hub), 2, "the second still waits on both");
    hub.handle_leave(second, false, now);
    assert_eq!(count(&hub), 0);
}

#[test]
fn each_node_notice_reaches_the_first_waiter_of_its_channel() {
    let t0 = Instant::now();
    let mut hub = Hub::new(3);
    let (a, b) = (Key::from("a\0released"), Key::from("b\0released"));
    let one = hub.handle_join(vec![a.clone()], false, t0);
    let two = hub.handle_join(vec![a.clone(), b.clone()], false, t0);
    let other = hub.handle_join(vec![Key::from("c\0released")], false, t0);
    assert_eq!(told(&mut hub), vec![], "nothing heard yet to replay");
    let t1 = t0 + MS;
    hub.handle_notice(NodeId(2), a.as_bytes(), t1);
    hub.handle_notice(NodeId(0), b"unknown", t1);
    assert_eq!(
        told(&mut hub),
        vec![(one, Notice::Released(NodeId(2)), t1)],
        "first on a, with the instant it arrived"
    );
    // On b, the second is first.
    hub.handle_notice(NodeId(1), b.as_bytes(), t1);
    assert_eq!(heard(&mut hub), vec![(two, Notice::Released(NodeId(1)))]);
    // A node the client does not know: nothing.
    hub.handle_notice(NodeId(7), a.as_bytes(), t1);
    assert_eq!(told(&mut hub), vec![]);

    // A late waiter waits its turn: told nothing.
    let late = hub.handle_join(vec![a.clone()], false, t1);
    assert_eq!(told(&mut hub), vec![]);
    // The first leaves with the lock: the next release is the second's,
    // with nothing replayed. The client's own release is not told while
    // another client may wait: it hears the nodes, as others' waiters do.
    hub.handle_leave(one, true, t1);
    assert_eq!(told(&mut hub), vec![]);
    let queued = HandOver::Queued {
        channels: vec![a.clone()],
    };
    hub.handle_hand_over(&queued, t1);
    assert_eq!(told(&mut hub), vec![]);
    // Once a release found no other client's waiter, it is.
    let alone = HandOver::Answered {
        channels: vec![a.clone()],
        others_waiting: false,
        unheard: false,
    };
    hub.handle_hand_over(&alone, t1 + MS);
    assert_eq!(told(&mut hub), vec![]);
    let t2 = t1 + 2 * MS;
    hub.handle_hand_over(&queued, t2);
    assert_eq!(told(&mut hub), vec![(two, Notice::HandedOver, t2)]);
    let t3 = t2 + MS;
    hub.handle_notice(NodeId(0), a.as_bytes(), t3);
    assert_eq!(told(&mut hub), vec![(two, Notice::Released(NodeId(0)), t3)]);
    // The second leaves without it: the late waiter is first and told the
    // channel's recent events with their instants (they may be newer than
    // its attempt), the client's own last release too.
    hub.handle_leave(two, false, t3 + MS);
    assert_eq!(
        told(&mut hub),
        vec![
            (late, Notice::Released(NodeId(0)), t3),
            (late, Notice::Released(NodeId(2)), t1),
            (late, Notice::HandedOver, t2),
        ]
    );
    assert_eq!(told(&mut hub), vec![], "told once");
    // The other channel's waiter heard none of it, and hears its own.
    hub.handle_notice(NodeId(1), b"c\0released", t3);
    assert_eq!(heard(&mut hub), vec![(other, Notice::Released(NodeId(1)))]);
}

#[test]
fn a_hand_over_told_at_its_answer_carries_the_instant_it_was_queued() {
    let t0 = Instant::now();
    let mut hub = Hub::new(3);
    let a = Key::from("a\0released");
    let waiter = hub.handle_join(vec![a.clone()], false, t0);
    let queued = HandOver::Queued {
        channels: vec![a.clone()],
    };
    hub.handle_hand_over(&queued, t0 + MS);
    assert_eq!(told(&mut hub), vec![], "another client may wait");
    // A master published nothing: only this client's waiters were marked.
    let unheard = HandOver::Answered {
        channels: vec![a],
        others_waiting: false,
        unheard: true,
    };
    hub.handle_hand_over(&unheard, t0 + 5 * MS);
    assert_eq!(told(&mut hub), vec![(waiter, Notice::HandedOver, t0 + MS)]);
}

#[test]
fn a_hand_over_on_a_channel_nobody_waits_on_is_ignored() {
    let t0 = Instant::now();
    let mut hub = Hub::new(3);
    let queued = HandOver::Queued {
        channels: vec![Key::from("a\0released")],
    };
    hub.handle_hand_over(&queued, t0);
    assert_eq!(told(&mut hub), vec![]);
    assert!(!hub.is_waiting());
}

#[test]
fn waiters_the_masters_order_hear_every_notice() {
    let t0 = Instant::now();
    let mut hub = Hub::new(3);
    let a = Key::from("a\0released");
    let first = hub.handle_join(vec![a.clone()], true, t0);
    let second = hub.handle_join(vec![a.clone()], true, t0);
    hub.handle_notice(NodeId(1), a.as_bytes(), t0 + MS);
    assert_eq!(
        heard(&mut hub),
        vec![
            (first, Notice::Released(NodeId(1))),
            (second, Notice::Released(NodeId(1)))
        ]
    );
    // The client's own release too, at once: the masters decide whose turn.
    hub.handle_hand_over(&HandOver::Queued { channels: vec![a] }, t0 + 2 * MS);
    assert_eq!(
        heard(&mut hub),
        vec![(first, Notice::HandedOver), (second, Notice::HandedOver)]
    );
    // A third joins: told what it may have missed at once.
    let third = hub.handle_join(vec![Key::from("a\0released")], true, t0 + 3 * MS);
    assert_eq!(
        told(&mut hub),
        vec![
            (third, Notice::Released(NodeId(1)), t0 + MS),
            (third, Notice::HandedOver, t0 + 2 * MS)
        ]
    );
}

#[test]
fn subscriptions_are_events_the_first_time_and_after_a_lost_connection() {
    let t0 = Instant::now();
    let mut hub = Hub::new(5);
    let a = Key::from("a\0released");
    let waiter = hub.handle_join(vec![a.clone()], false, t0);
    let channels = std::slice::from_ref(&a);
    hub.handle_subscribed(channels, false, t0 + MS);
    assert_eq!(told(&mut hub), vec![(waiter, Notice::Subscribed, t0 + MS)]);
    // Another node confirming the same channel is no news.
    hub.handle_subscribed(channels, false, t0 + 2 * MS);
    assert_eq!(told(&mut hub), vec![]);
    // After a lost connection, releases may have been missed.
    hub.handle_subscribed(channels, true, t0 + 3 * MS);
    assert_eq!(
        told(&mut hub),
        vec![(waiter, Notice::Subscribed, t0 + 3 * MS)]
    );
    // A channel nobody waits on: nothing.
    hub.handle_subscribed(&[Key::from("b\0released")], true, t0);
    assert_eq!(told(&mut hub), vec![]);
    // A new first waiter is told the last subscription.
    let late = hub.handle_join(vec![a], false, t0 + 4 * MS);
    hub.handle_leave(waiter, false, t0 + 5 * MS);
    assert_eq!(
        told(&mut hub),
        vec![(late, Notice::Subscribed, t0 + 3 * MS)]
    );
}

#[test]
fn what_was_told_to_a_waiter_that_leaves_goes_nowhere() {
    let t0 = Instant::now();
    let mut hub = Hub::new(3);
    let a = Key::from("a\0released");
    let first = hub.handle_join(vec![a.clone()], false, t0);
    let second = hub.handle_join(vec![a.clone()], false, t0);
    hub.handle_notice(NodeId(0), a.as_bytes(), t0 + MS);
    // Not drained before it left: the next is told by the replay only.
    hub.handle_leave(first, false, t0 + 2 * MS);
    assert_eq!(
        told(&mut hub),
        vec![(second, Notice::Released(NodeId(0)), t0 + MS)]
    );
}

fn settings() -> Arc<redlock_core::Settings> {
    Arc::new(Config::new(["a", "b", "c"]).validate().unwrap())
}

fn acquire(settings: &Arc<redlock_core::Settings>, now: Instant, seed: u64) -> Acquisition<StdRng> {
    Acquisition::new(
        Arc::clone(settings),
        b"job",
        settings.default_ttl(),
        Attempts::Retry,
        now,
        StdRng::seed_from_u64(seed),
    )
}

fn sent(acquisition: &mut Acquisition<StdRng>) -> Vec<Command> {
    std::iter::from_fn(|| acquisition.poll_request())
        .map(|request| request.command)
        .collect()
}

fn attempts_at_once(acquisition: &mut Acquisition<StdRng>) -> bool {
    let attempt = sent(acquisition);
    attempt.len() == 3 && attempt.iter().all(|c| matches!(c, Command::Acquire { .. }))
}

/// A new acquire queues behind the client's waiters on any of its
/// channels, and marks only where the client's last mark would not
/// outlive its wait.
#[test]
fn acquisitions_are_planned_behind_waiters_and_share_the_clients_mark() {
    let settings = settings();
    let now = Instant::now();
    let mut hub = Hub::new(3);
    // Nobody waits anywhere, or nobody on its channel: it attempts at once.
    assert!(attempts_at_once(
        &mut hub.plan(acquire(&settings, now, 1), now)
    ));
    let _other = hub.handle_join(vec![Key::from("other\0released")], false, now);
    assert!(attempts_at_once(
        &mut hub.plan(acquire(&settings, now, 5), now)
    ));
    // Someone does: it waits, and marks.
    let _waiter = hub.handle_join(acquire(&settings, now, 2).channels(), false, now);
    let mut first = hub.plan(acquire(&settings, now, 3), now);
    let marks = sent(&mut first);
    assert_eq!(marks.len(), 3);
    assert!(
        marks
            .iter()
            .all(|c| matches!(c, Command::MarkWaiting { .. }))
    );
    assert!(first.poll_listen().is_some(), "it waits for a notice");
    // The next relies on that mark: nothing to send.
    let mut second = hub.plan(acquire(&settings, now, 4), now);
    assert_eq!(sent(&mut second), vec![]);
    assert_eq!(second.marked_until(), first.marked_until());
    assert!(second.marked_until().is_some());
}

/// Waiters the masters order do not hold a new acquisition back: it
/// takes its place in the masters' queues with its first attempt.
#[test]
fn waiters_the_masters_order_hold_no_new_acquisition_back() {
    let settings = settings();
    let now = Instant::now();
    let mut hub = Hub::new(3);
    let _fair = hub.handle_join(acquire(&settings, now, 2).channels(), true, now);
    assert!(attempts_at_once(
        &mut hub.plan(acquire(&settings, now, 3), now)
    ));
}

/// A waiter that queued without attempting saw nothing of the lock: a
/// release the waiter ahead was told before it came, and left unused, is
/// its own when it becomes first. (Found by the hub's model check: it
/// waited for its retry timer with the lock free.)
#[test]
fn a_queued_waiter_that_becomes_first_hears_a_release_from_before_it_queued() {
    let settings = settings();
    let t0 = Instant::now();
    let mut hub = Hub::new(3);
    let channels = acquire(&settings, t0, 2).channels();
    let ahead = hub.handle_join(channels.clone(), false, t0);
    let t1 = t0 + MS;
    for node in [0, 1] {
        hub.handle_notice(NodeId(node), channels[0].as_bytes(), t1);
    }
    assert_eq!(told(&mut hub).len(), 2, "told to the waiter ahead");
    let t2 = t1 + MS;
    let mut queued = hub.plan(acquire(&settings, t2, 3), t2);
    sent(&mut queued);
    let listen = queued.poll_listen().expect("it waits");
    let waiter = hub.handle_join(listen, false, t2);
    assert_eq!(told(&mut hub), vec![], "not first");
    // The waiter ahead leaves without attempting.
    hub.handle_leave(ahead, false, t2 + MS);
    let replayed = told(&mut hub);
    assert!(
        replayed
            .iter()
            .all(|(to, _, at)| *to == waiter && *at == t1)
    );
    for (_, notice, at) in replayed {
        queued.handle_notice(notice, at);
    }
    assert!(attempts_at_once(&mut queued), "it attempts at once");
}
