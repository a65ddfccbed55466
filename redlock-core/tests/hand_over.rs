//! The local hand-over: a client that releases a fair or an exclusive lock
//! tells its own waiters at once ([`Notice::HandedOver`]), once the release
//! is queued on every node, and a waiter told attempts then, without the
//! nodes' notices; an exclusive lock's release then says whether a waiter
//! of another client is marked, which decides whether the next hand-over
//! goes to the client's first waiter (`WaitQueue`).
//! In virtual time; asserts what is sent and in which order.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::StdRng;
use redlock_core::native::{Call, Native, NodeFacts, Server, Version};
use redlock_core::{
    AcquireEvent, Acquisition, Argument, Attempts, Command, HandOver, Hub, Lock, LockSpec,
    LockValue, Machine, Notice, Release, Reply, Request, Response, Settings, scripts,
};
use support::{MS, drain, drain_but_marks, expect_lock, three_nodes};

/// Three nodes, retries every 10 s: a waiter that attempts sooner was told.
fn settings(notices: bool) -> Arc<Settings> {
    settings_with(notices, Duration::from_secs(10))
}

/// Three nodes, a 10 ms per-node timeout, retries every `delay`.
fn settings_with(notices: bool, delay: Duration) -> Arc<Settings> {
    Arc::new(
        three_nodes(3, delay)
            .release_notices(notices)
            .validate()
            .unwrap(),
    )
}

fn acquisition(settings: &Arc<Settings>, spec: LockSpec<'_>, now: Instant) -> Acquisition<StdRng> {
    Acquisition::with_spec(
        Arc::clone(settings),
        spec,
        settings.default_ttl(),
        Attempts::Retry,
        now,
        StdRng::seed_from_u64(7),
    )
    .unwrap()
}

/// How many of `requests` are marks ([`Command::MarkWaiting`]).
fn marks(requests: &[Request]) -> usize {
    requests
        .iter()
        .filter(|r| matches!(r.command, Command::MarkWaiting { .. }))
        .count()
}

/// Every node turns `attempt` away at `at`: another value holds the key.
fn turn_away(acquire: &mut Acquisition<StdRng>, attempt: &[Request], at: Instant) {
    for request in attempt {
        acquire.handle_reply(
            Reply::to(request, Ok(Response::Data(b"other".to_vec()))),
            at,
        );
    }
}

/// A lock of every kind that takes one round (fenced locks take two).
const KINDS: [LockSpec<'static>; 6] = [
    LockSpec::Exclusive(b"job"),
    LockSpec::Fair(b"job"),
    LockSpec::Write(b"doc"),
    LockSpec::Read(b"doc"),
    LockSpec::Multi(&[b"a", b"b"]),
    LockSpec::Reentrant {
        resource: b"job",
        owner: "worker-7",
    },
];

/// A lock of `spec`, granted on every node at `now`.
fn held(settings: &Arc<Settings>, spec: LockSpec<'_>, now: Instant) -> Lock {
    let mut acquire = acquisition(settings, spec, now);
    for request in drain_but_marks(&mut acquire) {
        acquire.handle_reply(Reply::to(&request, Ok(Response::Int(1))), now);
    }
    expect_lock(&mut acquire)
}

/// An acquisition turned away on every node at `now`: it waits for its
/// retry, listening.
fn waiter(settings: &Arc<Settings>, now: Instant) -> Acquisition<StdRng> {
    let mut acquire = acquisition(settings, LockSpec::Exclusive(b"job"), now);
    let attempt = drain_but_marks(&mut acquire);
    turn_away(&mut acquire, &attempt, now);
    assert!(matches!(
        acquire.poll_event(),
        Some(AcquireEvent::AttemptFailed { .. })
    ));
    assert!(acquire.poll_listen().is_some());
    // The failed attempt's withdraws, and nothing else until told.
    assert!(
        drain_but_marks(&mut acquire)
            .iter()
            .all(|r| r.command == Command::Withdraw)
    );
    acquire
}

#[test]
fn a_fair_release_hands_over_once_it_is_queued_on_every_node() {
    let settings = settings(true);
    let t0 = Instant::now();
    let mut release = held(&settings, LockSpec::Fair(b"job"), t0).release(t0 + MS);
    let first = release
        .poll_request()
        .expect("a release for the first node");
    assert_eq!(first.command, Command::Release);
    assert_eq!(
        release.poll_hand_over(),
        None,
        "not before the release is queued on every node"
    );
    assert_eq!(drain_but_marks(&mut release).len(), 2);
    assert_eq!(
        release.poll_hand_over(),
        Some(HandOver::Queued {
            channels: vec![settings.release_channel(&first.keys[0])]
        })
    );
    assert_eq!(release.poll_hand_over(), None, "once");
    // Its answers tell nothing more: the masters' queues decide.
    for request in [first].iter().chain(&drain_but_marks(&mut release)) {
        release.handle_reply(Reply::to(request, Ok(Response::Int(1))), t0 + 2 * MS);
    }
    assert_eq!(release.poll_hand_over(), None);
}

/// An exclusive lock's release, of a client named `tag`, granted at `t0`
/// and released at `t0 + 1 ms`, planned by a hub where one of the client's
/// tasks waits for the lock (`Hub::plan_release`: the script on every
/// node); its requests.
fn exclusive_release(settings: &Arc<Settings>, t0: Instant) -> (Release, Vec<Request>) {
    let mut hub = Hub::new(3);
    hub.handle_join(
        vec![settings.release_channel(&settings.key(b"job"))],
        false,
        t0,
    );
    let release = held(settings, LockSpec::Exclusive(b"job"), t0)
        .release(t0 + MS)
        .every_node();
    let mut release = hub.plan_release(release);
    let requests = drain_but_marks(&mut release);
    (release, requests)
}

/// A release is planned by its client's hub (`Hub::plan_release`): where
/// some task of the client waits for the lock, it goes as the release
/// script on every node, which frees our value marked or not, and hands
/// over as soon as it is queued; nobody of the client waiting (or waiting
/// for another lock), it may go as one plain `DELIFEQ` per node (Valkey
/// 9), and hands over only once its nodes answered: where a waiter marked
/// our value, the script that deletes it follows the `DELIFEQ`'s answer,
/// behind an attempt told when the `DELIFEQ` was queued.
#[test]
fn a_release_hands_over_when_it_is_final_on_every_node() {
    let t0 = Instant::now();
    let valkey = NodeFacts::new(Server::Valkey, Version(9, 1, 2));
    let settings = Arc::new(
        settings(true)
            .as_ref()
            .clone()
            .with_client_tag(LockValue::from_string("client-1")),
    );
    let channel = settings.release_channel(&settings.key(b"job"));
    let queued = HandOver::Queued {
        channels: vec![channel.clone()],
    };
    for waits_for in [None, Some(b"other".as_slice()), Some(b"job".as_slice())] {
        let mut hub = Hub::new(3);
        if let Some(resource) = waits_for {
            let waited = settings.release_channel(&settings.key(resource));
            hub.handle_join(vec![waited], false, t0);
        }
        let release = held(&settings, LockSpec::Exclusive(b"job"), t0)
            .release(t0 + MS)
            .every_node();
        let mut release = hub.plan_release(release);
        let requests = drain_but_marks(&mut release);
        let planned = waits_for == Some(b"job".as_slice());
        for request in &requests {
            let expected = if planned {
                Call::Script(scripts::RELEASE_IF_WAITED)
            } else {
                Call::Native(Native::DelIfEq)
            };
            assert_eq!(request.call(&valkey), expected, "waits for {waits_for:?}");
        }
        if planned {
            assert_eq!(release.poll_hand_over(), Some(queued.clone()));
        } else {
            assert_eq!(
                release.poll_hand_over(),
                None,
                "not final before its answers"
            );
        }
        // Each node answers: the plain `DELIFEQ` deleted our value on the
        // first, and the script that followed it on the others.
        for (i, request) in requests.iter().enumerate() {
            let reply = match (planned, i) {
                (false, 0) => Reply {
                    native: Some(Native::DelIfEq),
                    ..Reply::to(request, Ok(Response::Int(1)))
                },
                _ => Reply::to(request, Ok(Response::Int(1))),
            };
            release.handle_reply(reply, t0 + 2 * MS);
            if i < 2 {
                assert_eq!(
                    release.poll_hand_over(),
                    None,
                    "answered by {} nodes",
                    i + 1
                );
            }
        }
        if !planned {
            assert_eq!(release.poll_hand_over(), Some(queued.clone()), "once final");
        }
        assert_eq!(
            release.poll_hand_over(),
            Some(HandOver::Answered {
                channels: vec![channel.clone()],
                others_waiting: false,
                unheard: true,
            })
        );
        assert_eq!(release.poll_hand_over(), None, "once");
    }
}

#[test]
fn an_exclusive_release_hands_over_and_then_says_whether_another_client_waits() {
    let t0 = Instant::now();
    let tag = LockValue::from_string("client-1");
    let settings = Arc::new(settings(true).as_ref().clone().with_client_tag(tag.clone()));
    let channel = settings.release_channel(&settings.key(b"job"));
    let answered = |others_waiting, unheard| HandOver::Answered {
        channels: vec![channel.clone()],
        others_waiting,
        unheard,
    };
    // What each node answered: 1 no other client's waiter marked (nothing
    // published), 3 one may be (published), 2 the notice refused, -1 not
    // held there.
    for (answers, others_waiting, unheard) in [
        ([1, 1, 1], false, true),
        ([1, 1, -1], false, true),
        ([1, 3, 1], true, true),
        ([1, 2, 1], true, true),
        ([3, 3, 3], true, false),
        ([-1, -1, -1], true, false),
    ] {
        let (mut release, requests) = exclusive_release(&settings, t0);
        // It names the client and reads both marks.
        for request in &requests {
            let args: Vec<_> = request.arguments().collect();
            assert_eq!(args.get(2), Some(&Argument::Bytes(tag.as_bytes())));
            assert_eq!(request.keys.len(), 3);
            assert_eq!(request.script(), scripts::RELEASE_IF_WAITED);
        }
        assert_eq!(
            release.poll_hand_over(),
            Some(HandOver::Queued {
                channels: vec![channel.clone()]
            })
        );
        for (request, answer) in requests.iter().zip(answers).take(2) {
            release.handle_reply(Reply::to(request, Ok(Response::Int(answer))), t0 + 2 * MS);
        }
        assert_eq!(
            release.poll_hand_over(),
            None,
            "not before every node answered"
        );
        release.handle_reply(
            Reply::to(&requests[2], Ok(Response::Int(answers[2]))),
            t0 + 3 * MS,
        );
        assert_eq!(
            release.poll_hand_over(),
            Some(answered(others_waiting, unheard)),
            "{answers:?}"
        );
        assert_eq!(release.poll_hand_over(), None, "once");
        assert!(release.is_done());
    }
    // A node that does not answer tells nothing: the others decide.
    let (mut release, requests) = exclusive_release(&settings, t0);
    release.poll_hand_over();
    for request in &requests[..2] {
        release.handle_reply(Reply::to(request, Ok(Response::Int(1))), t0 + 2 * MS);
    }
    release.handle_timeout(t0 + Duration::from_secs(1));
    assert_eq!(release.poll_hand_over(), Some(answered(false, true)));
    // Abandoned before its answers, it tells the worst: another client
    // may wait, and a node may have published nothing.
    let (mut release, requests) = exclusive_release(&settings, t0);
    release.poll_hand_over();
    release.handle_reply(Reply::to(&requests[0], Ok(Response::Int(3))), t0 + 2 * MS);
    release.abandon(t0 + 2 * MS);
    assert_eq!(release.poll_hand_over(), Some(answered(true, true)));
    assert_eq!(release.poll_event(), None, "no event follows");
    // Unattended (no driver to hand over), it names no client: it
    // publishes for every marked waiter, the client's own too.
    let mut release = held(&settings, LockSpec::Exclusive(b"job"), t0)
        .release(t0 + MS)
        .unattended();
    for request in drain_but_marks(&mut release) {
        assert_eq!(request.client, None);
        assert_eq!(request.arguments().count(), 2);
    }
    assert_eq!(release.poll_hand_over(), None);
}

#[test]
fn a_waiters_mark_names_its_client() {
    let t0 = Instant::now();
    let tag = LockValue::from_string("client-1");
    let tagged = Arc::new(settings(true).as_ref().clone().with_client_tag(tag.clone()));
    let mut acquire = waiter(&tagged, t0);
    acquire.handle_notice(Notice::Subscribed, t0 + MS);
    let marks: Vec<Request> = drain(&mut acquire)
        .into_iter()
        .filter(|r| matches!(r.command, Command::MarkWaiting { .. }))
        .collect();
    assert_eq!(marks.len(), 3);
    for mark in &marks {
        assert_eq!(mark.script(), scripts::MARK_WAITING);
        let key = tagged.key(b"job");
        assert_eq!(
            mark.keys.as_ref(),
            [
                key.clone(),
                tagged.waiters_key(&key),
                tagged.others_waiting_key(&key)
            ]
        );
        let args: Vec<_> = mark.arguments().collect();
        assert_eq!(args.get(2), Some(&Argument::Bytes(tag.as_bytes())));
    }
    // Without a tag the mark names no client: the script takes the
    // waiter's own value, which no release carries.
    let mut acquire = waiter(&settings(true), t0);
    acquire.handle_notice(Notice::Subscribed, t0 + MS);
    let mark = drain(&mut acquire)
        .into_iter()
        .find(|r| matches!(r.command, Command::MarkWaiting { .. }))
        .expect("a mark");
    assert_eq!(mark.arguments().count(), 2);
}

#[test]
fn only_fair_and_exclusive_releases_hand_over() {
    let t0 = Instant::now();
    let with_notices = settings(true);
    // Their first waiter told first would win before other clients'
    // waiters, who hear of the release from the nodes, and their release
    // cannot tell whether any waits.
    let others = KINDS
        .into_iter()
        .filter(|spec| !matches!(spec, LockSpec::Exclusive(_) | LockSpec::Fair(_)));
    for spec in others {
        let mut release = held(&with_notices, spec, t0).release(t0 + MS);
        drain_but_marks(&mut release);
        assert_eq!(release.poll_hand_over(), None, "{spec:?}");
    }
    // Without notices nobody of this client waits listening.
    let mut release = held(&settings(false), LockSpec::Fair(b"job"), t0).release(t0 + MS);
    drain_but_marks(&mut release);
    assert_eq!(release.poll_hand_over(), None);
}

#[test]
fn a_waiter_told_of_a_hand_over_attempts_at_once_without_the_nodes_notices() {
    let settings = settings(true);
    let t0 = Instant::now();
    let mut waiter = waiter(&settings, t0);
    // The holder's release is queued at t0 + 5 ms: the waiter attempts
    // then, 10 s before its retry, having heard from no node.
    waiter.handle_notice(Notice::HandedOver, t0 + 5 * MS);
    let attempt = drain_but_marks(&mut waiter);
    assert_eq!(attempt.len(), 3);
    assert!(
        attempt
            .iter()
            .all(|r| matches!(r.command, Command::Acquire { .. }))
    );
    for request in &attempt {
        waiter.handle_reply(Reply::to(request, Ok(Response::Int(1))), t0 + 6 * MS);
    }
    assert!(matches!(
        waiter.poll_event(),
        Some(AcquireEvent::Acquired(_))
    ));
}

#[test]
fn a_hand_over_from_before_an_attempt_was_seen_by_it() {
    let settings = settings(true);
    let t0 = Instant::now();
    let mut waiter = waiter(&settings, t0 + 5 * MS);
    // Queued before the attempt that failed at t0 + 5 ms: that attempt ran
    // after the release on every node, and was turned away all the same.
    waiter.handle_notice(Notice::HandedOver, t0 + 4 * MS);
    assert!(drain_but_marks(&mut waiter).is_empty());
}

#[test]
fn a_hand_over_during_an_attempt_counts_once_it_fails() {
    let settings = settings(true);
    let t0 = Instant::now();
    let mut acquire = acquisition(&settings, LockSpec::Exclusive(b"job"), t0);
    let attempt = drain_but_marks(&mut acquire);
    // The holder's release was queued after this attempt's requests: they
    // were turned away, but the next attempt comes right after the release.
    acquire.handle_notice(Notice::HandedOver, t0 + MS);
    assert!(
        drain_but_marks(&mut acquire).is_empty(),
        "not while the attempt is in flight"
    );
    turn_away(&mut acquire, &attempt, t0 + 2 * MS);
    assert!(matches!(
        acquire.poll_event(),
        Some(AcquireEvent::AttemptFailed { .. })
    ));
    let next = drain_but_marks(&mut acquire);
    assert!(
        next.iter()
            .any(|r| matches!(r.command, Command::Acquire { .. })),
        "{next:?}"
    );
}

/// A waiter queued behind its client's others marks when it queues, so the
/// attempt a hand-over starts sends one request per node. If that attempt
/// ends after the retry it stood in for, its failure marks again: the
/// earlier mark lives only until that retry's mark.
#[test]
fn a_queued_waiter_marks_when_it_queues_and_again_when_an_attempt_outlives_its_retry() {
    let settings = settings_with(true, 100 * MS);
    let t0 = Instant::now();
    let mut waiter = acquisition(&settings, LockSpec::Exclusive(b"job"), t0);
    waiter.queue_behind(t0, None);
    let queued = drain(&mut waiter);
    assert_eq!((queued.len(), marks(&queued)), (3, 3), "marks only");
    // Handed over at 95 ms, before its retry at 100 ms: no mark.
    waiter.handle_notice(Notice::HandedOver, t0 + 95 * MS);
    let attempt = drain(&mut waiter);
    assert_eq!((attempt.len(), marks(&attempt)), (3, 0));
    // Turned away at 101 ms, past the retry it stood in for: withdraws,
    // and a mark for the next retry.
    turn_away(&mut waiter, &attempt, t0 + 101 * MS);
    let after = drain(&mut waiter);
    assert_eq!(marks(&after), 3, "{after:?}");
    // Turned away before its retry, an unmarked attempt marks nothing.
    let mut waiter = acquisition(&settings, LockSpec::Exclusive(b"job"), t0);
    waiter.queue_behind(t0, None);
    drain(&mut waiter);
    waiter.handle_notice(Notice::HandedOver, t0 + 50 * MS);
    let attempt = drain(&mut waiter);
    turn_away(&mut waiter, &attempt, t0 + 51 * MS);
    let after = drain(&mut waiter);
    assert_eq!(marks(&after), 0, "{after:?}");
}

/// The mark an attempt that outlived its retry sends for the next one is
/// given one per-node timeout to arrive, as every request is.
#[test]
fn the_mark_for_the_next_retry_has_one_node_timeout_to_arrive() {
    let settings = settings_with(true, 100 * MS);
    let t0 = Instant::now();
    let mut waiter = acquisition(&settings, LockSpec::Exclusive(b"job"), t0);
    waiter.queue_behind(t0, None);
    drain(&mut waiter);
    waiter.handle_notice(Notice::HandedOver, t0 + 95 * MS);
    let attempt = drain(&mut waiter);
    let at = t0 + 101 * MS;
    turn_away(&mut waiter, &attempt, at);
    let marks: Vec<Request> = drain(&mut waiter)
        .into_iter()
        .filter(|r| matches!(r.command, Command::MarkWaiting { .. }))
        .collect();
    assert_eq!(marks.len(), 3);
    assert!(marks.iter().all(|mark| mark.deadline == at + 10 * MS));
}

/// A waiter that queues behind its client's others sends no mark while the
/// client's last mark lives until its retry's mark has reached the nodes
/// (retry + one per-node timeout), and marks as before when it does not.
#[test]
fn a_queued_waiter_marks_only_where_its_clients_mark_would_not_outlive_its_wait() {
    let settings = settings_with(true, 100 * MS);
    let t0 = Instant::now();
    let mut first = acquisition(&settings, LockSpec::Exclusive(b"job"), t0);
    first.queue_behind(t0, None);
    assert_eq!(marks(&drain(&mut first)), 3);
    let marked = first.marked_until().expect("it marked");
    // A second waiter 1 ms later: the mark lives past its retry.
    let mut second = acquisition(&settings, LockSpec::Exclusive(b"job"), t0 + MS);
    second.queue_behind(t0 + MS, Some(marked));
    assert_eq!(drain(&mut second).len(), 0, "no mark, no attempt");
    assert_eq!(
        second.marked_until(),
        Some(marked),
        "it relies on the client's"
    );
    // Asked when that mark would end before its retry's mark lands: it
    // marks, and its own mark is the later one.
    let late = marked - 100 * MS;
    let mut third = acquisition(&settings, LockSpec::Exclusive(b"job"), late);
    third.queue_behind(late, Some(marked));
    assert_eq!(marks(&drain(&mut third)), 3);
    assert!(third.marked_until() > Some(marked));
}

/// A waiter served any lock but a read lock ends its client's turn for the
/// lock (the next release, its own, is the next waiter's); a reader served
/// leaves it open, since the next may share.
#[test]
fn every_lock_but_a_read_lock_excludes_the_next_waiter() {
    let t0 = Instant::now();
    let settings = settings(true);
    for spec in KINDS {
        let reader = matches!(spec, LockSpec::Read(_));
        assert_eq!(
            held(&settings, spec, t0).excludes_next(),
            !reader,
            "{spec:?}"
        );
    }
}

/// Only an exclusive release that names the waiters' marks is sent again
/// without them after `NOPERM`: a multi-resource release refused so keeps
/// every key (sent again with its first alone, it would free one resource
/// of several), and the refusal is that node's answer.
#[test]
fn a_refused_release_of_several_keys_is_not_sent_again() {
    let t0 = Instant::now();
    let settings = settings(true);
    let mut release = held(&settings, LockSpec::Multi(&[b"a", b"b"]), t0).release(t0 + MS);
    let requests = drain_but_marks(&mut release);
    assert!(requests[0].keys.len() > 1);
    let noperm = redlock_core::NodeError::new(
        redlock_core::NodeErrorKind::NoPermission,
        "NOPERM this user has no permissions to access one of the keys used as arguments",
    );
    release.handle_reply(Reply::to(&requests[0], Err(noperm)), t0 + 2 * MS);
    assert_eq!(release.poll_request(), None);
}

/// A notice delivered late (a hub's replay to a waiter that became first,
/// or a hand-over told at its release's answer) carries the instant of its
/// event: that instant counts against the attempt's start, and the attempt
/// it starts starts at delivery. Started at the event's instant, the round
/// would be past its deadline before its first request left, every node
/// counted as timed out (the client sim's notices mode found a waiter that
/// lost its turn so, and nodes marked slow by it).
#[test]
fn a_late_delivery_starts_its_attempt_at_delivery() {
    let settings = settings(true);
    let t0 = Instant::now();
    let mut waiter = waiter(&settings, t0);
    let delivered = t0 + 250 * MS;
    waiter.handle_delivery(Notice::HandedOver, t0 + 5 * MS, delivered);
    let attempt = drain_but_marks(&mut waiter);
    assert_eq!(attempt.len(), 3);
    assert!(
        attempt.iter().all(|r| r.deadline > delivered),
        "the round's deadline follows its start: {:?}",
        attempt.iter().map(|r| r.deadline - t0).collect::<Vec<_>>()
    );
    // Older than the attempt that failed at t0: seen by it.
    let mut waiter2 = self::waiter(&settings, t0 + 5 * MS);
    waiter2.handle_delivery(Notice::HandedOver, t0 + 4 * MS, delivered);
    assert!(drain_but_marks(&mut waiter2).is_empty());
}

/// An acquisition that ends during an attempt (cancelled, or past its wait
/// limit) withdraws what the attempt may have taken, and hands that over to
/// its client's waiters once the withdraws are queued on every node, as a
/// release does: a waiter whose attempt met the withdrawn value saw it held
/// and would hear no notice (the client sim's notices mode found one left
/// waiting for its retry). Only where its client's waiters listen, and for
/// the kinds a release hands over.
#[test]
fn an_attempt_cut_short_hands_its_withdraws_over() {
    let t0 = Instant::now();
    for (notices, spec, hands_over) in [
        (true, LockSpec::Exclusive(b"job"), true),
        (true, LockSpec::Fair(b"job"), true),
        (false, LockSpec::Exclusive(b"job"), false),
        (true, LockSpec::Read(b"job"), false),
    ] {
        let mut acquire = acquisition(&settings(notices), spec, t0);
        let attempt = drain_but_marks(&mut acquire);
        assert!(!attempt.is_empty());
        acquire.abandon(t0 + MS);
        assert_eq!(
            acquire.poll_hand_over(),
            None,
            "not before the withdraws are drained"
        );
        let withdraws = drain(&mut acquire);
        assert!(
            withdraws.iter().any(|r| r.command == Command::Withdraw),
            "{spec:?}: {withdraws:?}"
        );
        let told = acquire.poll_hand_over();
        assert_eq!(
            told.is_some(),
            hands_over,
            "{spec:?} with notices {notices}: {told:?}"
        );
        if let Some(told) = told {
            assert!(matches!(told, HandOver::Queued { .. }));
            assert_eq!(told.channels().len(), 1);
            assert_eq!(acquire.poll_hand_over(), None, "once");
        }
    }
    // Between attempts nothing is withdrawn, and nothing handed over.
    let mut waiting = waiter(&settings(true), t0);
    waiting.abandon(t0 + MS);
    drain(&mut waiting);
    assert_eq!(waiting.poll_hand_over(), None);
}
