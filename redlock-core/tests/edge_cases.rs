//! Edges of the acquire, extend and release state machines, driven by hand in
//! virtual time.

mod sim;
mod support;

use redlock_core::Machine;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::StdRng;
use redlock_core::{
    AcquireError, AcquireEvent, Acquisition, Attempts, Command, ExtendError, Lock, NodeError,
    NodeErrorKind, NodeVote, Reply, Request, Response, RoundId, Settings,
};
use support::{MS, drain_but_marks, expect_lock, held, released, three_nodes, yes};

fn start(settings: &Arc<Settings>, attempts: Attempts, t0: Instant) -> Acquisition<StdRng> {
    Acquisition::new(
        Arc::clone(settings),
        b"edge",
        settings.default_ttl(),
        attempts,
        t0,
        StdRng::seed_from_u64(5),
    )
}

fn acquired(settings: &Arc<Settings>, t0: Instant) -> Lock {
    let mut acquire = start(settings, Attempts::Once, t0);
    for request in drain_but_marks(&mut acquire) {
        acquire.handle_reply(yes(&request), t0 + MS);
    }
    expect_lock(&mut acquire)
}

#[test]
fn validity_exactly_zero_is_not_a_lock() {
    // TTL 1000 ms, drift 10 + 2 ms: validity ends 988 ms after the start. Make
    // the node timeout as long as a TTL allows (it must leave 1 ms of
    // validity, `MIN_VALIDITY`): a reply is counted until its timeout is
    // handled, so the quorum can still arrive that late.
    let settings = Arc::new(
        redlock_core::Config::new(["a"])
            .ttl(Duration::from_secs(1))
            .node_timeout(Duration::from_millis(987))
            .validate()
            .unwrap(),
    );
    let t0 = Instant::now();
    for (at, expect_lock) in [(987, true), (988, false), (989, false)] {
        let mut acquire = start(&settings, Attempts::Once, t0);
        let request = drain_but_marks(&mut acquire).remove(0);
        acquire.handle_reply(yes(&request), t0 + at * MS);
        match acquire.poll_event() {
            Some(AcquireEvent::Acquired(lock)) => {
                assert!(
                    expect_lock,
                    "{at} ms: a lock with no validity was handed out"
                );
                assert_eq!(lock.validity(t0 + at * MS), MS);
                assert!(!lock.is_valid(t0 + 988 * MS));
            }
            Some(AcquireEvent::Failed(AcquireError::ValidityExhausted { .. })) => {
                assert!(!expect_lock, "{at} ms: the lock should still have 1 ms");
                // The node said yes: our key must be released there.
                let releases = drain_but_marks(&mut acquire);
                assert_eq!(releases.len(), 1);
                assert_eq!(releases[0].command, Command::Withdraw);
                assert_eq!(releases[0].value, request.value);
            }
            other => panic!("{at} ms: {other:?}"),
        }
    }
}

#[test]
fn replies_after_the_decision_are_ignored() {
    let settings = sim::settings(3, Duration::from_secs(1), 20 * MS);
    let t0 = Instant::now();
    let mut acquire = start(&settings, Attempts::Once, t0);
    let requests = drain_but_marks(&mut acquire);
    acquire.handle_reply(yes(&requests[0]), t0 + MS);
    acquire.handle_reply(yes(&requests[1]), t0 + MS);
    assert!(matches!(
        acquire.poll_event(),
        Some(AcquireEvent::Acquired(_))
    ));
    acquire.handle_reply(
        Reply::to(&requests[2], Ok(Response::Data(b"x".to_vec()))),
        t0 + 2 * MS,
    );
    acquire.handle_timeout(t0 + Duration::from_secs(5));
    assert!(acquire.poll_event().is_none());
    assert!(acquire.poll_request().is_none());
}

#[test]
fn replies_from_an_old_attempt_are_not_votes() {
    let settings = sim::settings(3, Duration::from_secs(1), 20 * MS);
    let t0 = Instant::now();
    let mut acquire = start(&settings, Attempts::Retry, t0);
    let first = drain_but_marks(&mut acquire);
    // Attempt 1: two nodes held by another owner -> fails, retry scheduled.
    for request in &first[..2] {
        acquire.handle_reply(
            Reply::to(request, Ok(Response::Data(b"other".to_vec()))),
            t0 + MS,
        );
    }
    let Some(AcquireEvent::AttemptFailed { retry_at, .. }) = acquire.poll_event() else {
        panic!("expected a retry");
    };
    let releases = drain_but_marks(&mut acquire);
    assert_eq!(
        releases.len(),
        3,
        "release on every node, also those that said no"
    );
    acquire.handle_timeout(retry_at);
    let second = drain_but_marks(&mut acquire);
    assert_eq!(second.len(), 3);
    assert_ne!(second[0].round, first[0].round);
    assert_ne!(
        second[0].value, first[0].value,
        "every attempt has a fresh value"
    );
    // Late yes votes from attempt 1 must not count for attempt 2.
    for request in &first {
        acquire.handle_reply(yes(request), retry_at + MS);
    }
    assert!(acquire.poll_event().is_none());
    // A made-up round id is ignored too.
    let forged = Reply {
        round: RoundId(0xdead),
        ..yes(&second[0])
    };
    acquire.handle_reply(forged, retry_at + MS);
    assert!(acquire.poll_event().is_none());
    acquire.handle_reply(yes(&second[0]), retry_at + MS);
    acquire.handle_reply(yes(&second[1]), retry_at + MS);
    assert!(matches!(
        acquire.poll_event(),
        Some(AcquireEvent::Acquired(_))
    ));
    assert_eq!(acquire.attempts(), 2);
}

#[test]
fn every_node_timing_out_is_no_quorum_within_one_timeout() {
    let settings = sim::settings(5, Duration::from_secs(10), 50 * MS);
    let t0 = Instant::now();
    let mut acquire = start(&settings, Attempts::Once, t0);
    let requests = drain_but_marks(&mut acquire);
    assert!(requests.iter().all(|r| r.deadline == t0 + 50 * MS));
    assert_eq!(acquire.poll_timeout(), Some(t0 + 50 * MS));
    acquire.handle_timeout(t0 + 49 * MS);
    assert!(acquire.poll_event().is_none(), "not before the timeout");
    acquire.handle_timeout(t0 + 50 * MS);
    let Some(AcquireEvent::Failed(error)) = acquire.poll_event() else {
        panic!("expected a failure");
    };
    let AcquireError::NoQuorum { votes, .. } = &error else {
        panic!("expected NoQuorum, got {error}");
    };
    assert_eq!(votes.failed(), 5);
    assert!(
        votes
            .failures()
            .all(|(_, e)| e.kind == NodeErrorKind::Timeout)
    );
    let message = error.to_string();
    assert!(
        message.contains("sim-0") && message.contains("timed out"),
        "{message}"
    );
    assert_eq!(
        drain_but_marks(&mut acquire).len(),
        5,
        "timed-out nodes are released too"
    );
    assert!(acquire.is_done());
}

#[test]
fn failures_and_holders_are_told_apart() {
    let settings = sim::settings(5, Duration::from_secs(1), 20 * MS);
    let t0 = Instant::now();
    let down =
        |r: &Request| Reply::to(r, Err(NodeError::new(NodeErrorKind::Connection, "refused")));
    let held = |r: &Request| Reply::to(r, Ok(Response::Data(b"other".to_vec())));
    // Three nodes down: no quorum whoever holds the lock.
    let mut acquire = start(&settings, Attempts::Once, t0);
    let requests = drain_but_marks(&mut acquire);
    for request in &requests[1..4] {
        acquire.handle_reply(down(request), t0);
    }
    let Some(AcquireEvent::Failed(error)) = acquire.poll_event() else {
        panic!()
    };
    assert!(matches!(error, AcquireError::NoQuorum { .. }), "{error}");
    assert!(!error.is_held_by_other());
    // Two down and one held: contention made the difference.
    let mut acquire = start(&settings, Attempts::Once, t0);
    let requests = drain_but_marks(&mut acquire);
    acquire.handle_reply(held(&requests[0]), t0);
    acquire.handle_reply(down(&requests[1]), t0);
    acquire.handle_reply(down(&requests[2]), t0);
    let Some(AcquireEvent::Failed(error)) = acquire.poll_event() else {
        panic!()
    };
    assert!(error.is_held_by_other(), "{error}");
}

#[test]
fn garbage_is_a_protocol_error_not_a_vote() {
    let settings = sim::settings(1, Duration::from_secs(1), 20 * MS);
    let t0 = Instant::now();
    for garbage in [
        Response::Int(7),
        Response::Nil,
        Response::Other("OK".into()),
        Response::Int(0),
    ] {
        let mut acquire = start(&settings, Attempts::Once, t0);
        let request = drain_but_marks(&mut acquire).remove(0);
        acquire.handle_reply(Reply::to(&request, Ok(garbage.clone())), t0 + MS);
        let Some(AcquireEvent::Failed(error)) = acquire.poll_event() else {
            panic!()
        };
        let vote = &error.votes().unwrap().votes()[0];
        assert!(
            matches!(vote, NodeVote::Failed(e) if e.kind == NodeErrorKind::Protocol),
            "{garbage:?} -> {vote:?}"
        );
    }
}

#[test]
fn single_node_cluster() {
    let settings = sim::settings(1, Duration::from_secs(1), 20 * MS);
    assert_eq!(settings.quorum(), 1);
    let t0 = Instant::now();
    let lock = acquired(&settings, t0);
    assert_eq!(lock.votes().granted(), 1);
    let mut acquire = start(&settings, Attempts::Once, t0);
    let request = drain_but_marks(&mut acquire).remove(0);
    acquire.handle_reply(
        Reply::to(&request, Ok(Response::Data(b"x".to_vec()))),
        t0 + MS,
    );
    assert!(matches!(
        acquire.poll_event(),
        Some(AcquireEvent::Failed(AcquireError::Held { .. }))
    ));
}

#[test]
fn retries_stop_at_the_count_and_the_deadline() {
    let base = redlock_core::Config::new(["a", "b", "c"])
        .ttl(Duration::from_secs(1))
        .node_timeout(10 * MS)
        .retry(
            redlock_core::RetryConfig::default()
                .count(2)
                .delay(100 * MS)
                .jitter(Duration::ZERO),
        );
    let t0 = Instant::now();
    let run = |settings: Arc<Settings>| {
        let mut acquire = start(&settings, Attempts::Retry, t0);
        let mut now = t0;
        loop {
            drain_but_marks(&mut acquire);
            match acquire.poll_event() {
                Some(AcquireEvent::Failed(error)) => return (error, now),
                Some(_) => {}
                None => {
                    now = acquire.poll_timeout().expect("a timer while not done");
                    acquire.handle_timeout(now);
                }
            }
        }
    };
    let (error, at) = run(Arc::new(base.clone().validate().unwrap()));
    assert!(
        matches!(error, AcquireError::NoQuorum { attempts: 3, .. }),
        "{error}"
    );
    assert_eq!(at, t0 + 3 * 10 * MS + 2 * 100 * MS);
    // With a 150 ms deadline, the second retry would start after it: it is
    // moved to start one node timeout before the deadline (140 ms), and
    // the acquisition gives up at the deadline, not before.
    let (error, at) = run(Arc::new(
        base.acquire_deadline(150 * MS).validate().unwrap(),
    ));
    let AcquireError::DeadlineExceeded { attempts, last, .. } = &error else {
        panic!("{error}")
    };
    assert_eq!(*attempts, 3);
    assert!(matches!(
        last.as_deref(),
        Some(AcquireError::NoQuorum { .. })
    ));
    assert_eq!(at, t0 + 150 * MS);
}

#[test]
fn abandon_releases_everywhere() {
    let settings = sim::settings(3, Duration::from_secs(1), 20 * MS);
    let t0 = Instant::now();
    let mut acquire = start(&settings, Attempts::Retry, t0);
    let requests = drain_but_marks(&mut acquire);
    acquire.handle_reply(yes(&requests[0]), t0 + MS);
    acquire.abandon(t0 + 2 * MS);
    let releases = drain_but_marks(&mut acquire);
    assert_eq!(releases.len(), 3);
    assert!(
        releases
            .iter()
            .all(|r| r.command == Command::Withdraw && r.value == requests[0].value)
    );
    assert!(acquire.is_done());
    assert!(acquire.poll_event().is_none());
}

#[test]
fn extend_counts_only_while_valid() {
    let settings = sim::settings(3, Duration::from_secs(1), 20 * MS);
    let t0 = Instant::now();
    let mut lock = acquired(&settings, t0);
    let ttl = lock.ttl();
    // Expired before starting: refused at once.
    let late = lock.valid_until() + MS;
    assert!(matches!(
        lock.extend(ttl, late),
        Err(ExtendError::Expired { .. })
    ));
    // Started in time, but the quorum arrives after the validity ended.
    let edge = lock.valid_until() - MS;
    let mut ext = lock.extend(ttl, edge).unwrap();
    let requests: Vec<_> = std::iter::from_fn(|| ext.poll_request()).collect();
    assert_eq!(ext.poll_timeout(), Some(lock.valid_until()));
    for request in &requests {
        ext.handle_reply(Reply::to(request, Ok(Response::Int(1))), edge + 2 * MS);
    }
    assert!(matches!(
        ext.poll_event(),
        Some(Err(ExtendError::Expired { .. }))
    ));
    // In time: succeeds once a quorum confirmed our value; the node where it
    // was missing is then restored; validity starts from the round.
    let now = t0 + 500 * MS;
    let mut ext = lock.extend(ttl, now).unwrap();
    let requests: Vec<_> = std::iter::from_fn(|| ext.poll_request()).collect();
    assert!(
        requests
            .iter()
            .all(|r| matches!(r.command, Command::Extend { .. }))
    );
    ext.handle_reply(Reply::to(&requests[0], Ok(Response::Int(1))), now + MS);
    ext.handle_reply(Reply::to(&requests[1], Ok(Response::Int(-1))), now + MS);
    // One confirmation is not a quorum: wait for the third node.
    assert!(ext.poll_event().is_none());
    assert!(ext.poll_request().is_none(), "nothing is restored yet");
    ext.handle_reply(Reply::to(&requests[2], Ok(Response::Int(1))), now + MS);
    let extended = ext.poll_event().unwrap().unwrap();
    assert_eq!(extended.restored, 1);
    assert_eq!(extended.valid_until, now + 988 * MS);
    let restores: Vec<_> = std::iter::from_fn(|| ext.poll_request()).collect();
    assert_eq!(restores.len(), 1);
    assert_eq!(restores[0].node, requests[1].node);
    assert_eq!(restores[0].command, Command::Restore { ttl });
    lock.apply(&extended);
    assert_eq!(lock.validity(now + MS), 987 * MS);
    assert_eq!(lock.extensions(), 1);
    // Lost to another owner on a quorum.
    let mut ext = lock.extend(ttl, now + 10 * MS).unwrap();
    let requests: Vec<_> = std::iter::from_fn(|| ext.poll_request()).collect();
    for request in &requests[..2] {
        ext.handle_reply(Reply::to(request, Ok(Response::Int(0))), now + 11 * MS);
    }
    assert!(matches!(
        ext.poll_event(),
        Some(Err(ExtendError::Lost { .. }))
    ));
}

#[test]
fn releasing_an_expired_lock_is_prompt_and_clear() {
    let settings = sim::settings(3, Duration::from_secs(1), 20 * MS);
    let t0 = Instant::now();
    let mut lock = acquired(&settings, t0);
    let later = t0 + Duration::from_secs(30);
    // Every node's story: the release waits for node 3.
    let mut release = lock.release(later).every_node();
    let requests: Vec<_> = std::iter::from_fn(|| release.poll_request()).collect();
    release.handle_reply(Reply::to(&requests[0], Ok(Response::Int(-1))), later);
    release.handle_reply(Reply::to(&requests[1], Ok(Response::Int(0))), later);
    // Node 3 is down and never answers: the report comes at one node timeout.
    assert_eq!(release.poll_timeout(), Some(later + 20 * MS));
    release.handle_timeout(later + 20 * MS);
    let report = release.poll_event().unwrap();
    assert_eq!(
        (report.released(), report.not_held(), report.failed()),
        (0, 2, 1)
    );
    assert!(!report.is_complete());
    assert!(report.to_string().contains("sim-2: timed out"), "{report}");
}

#[test]
fn messages_never_show_lock_values() {
    // Whoever knows a lock's value can release it: keep values out of logs.
    let settings = sim::settings(1, Duration::from_secs(1), 20 * MS);
    let t0 = Instant::now();
    let mut acquire = start(&settings, Attempts::Once, t0);
    let request = drain_but_marks(&mut acquire).remove(0);
    let secret = b"s3cr3t-holder-value".to_vec();
    acquire.handle_reply(Reply::to(&request, Ok(Response::Data(secret.clone()))), t0);
    let Some(AcquireEvent::Failed(error)) = acquire.poll_event() else {
        panic!()
    };
    assert_eq!(
        error.votes().unwrap().votes()[0],
        NodeVote::HeldByOther(Some(secret))
    );
    for text in [error.to_string(), format!("{error:?}")] {
        assert!(!text.contains("s3cr3t"), "{text}");
    }
    let ours = request.value.as_str();
    assert!(!format!("{:?}", request.value).contains(ours));
    assert!(!format!("{request:?}").contains(ours));
}

#[test]
fn a_release_notice_brings_the_next_round_forward() {
    let base = redlock_core::Config::new(["a", "b", "c"])
        .ttl(Duration::from_secs(1))
        .node_timeout(10 * MS)
        .retry(
            redlock_core::RetryConfig::default()
                .count(1)
                .delay(100 * MS)
                .jitter(Duration::ZERO),
        );
    let settings = Arc::new(base.validate().unwrap());
    let t0 = Instant::now();
    let held = |r: &Request| Reply::to(r, Ok(Response::Data(b"other".to_vec())));
    let mut acquire = start(&settings, Attempts::Retry, t0);
    for request in drain_but_marks(&mut acquire) {
        acquire.handle_reply(held(&request), t0 + MS);
    }
    let Some(AcquireEvent::AttemptFailed { retry_at, .. }) = acquire.poll_event() else {
        panic!()
    };
    assert_eq!(retry_at, t0 + 101 * MS);
    drain_but_marks(&mut acquire); // the failed attempt's releases
    // A notice 20 ms later: an extra attempt starts at once...
    let notice = t0 + 21 * MS;
    released(&mut acquire, notice);
    let extra = drain_but_marks(&mut acquire);
    assert_eq!(extra.len(), 3);
    assert!(
        extra
            .iter()
            .all(|r| matches!(r.command, Command::Acquire { .. }))
    );
    // ...and when someone else wins the race, it goes back to the scheduled
    // retry, which still counts as the one retry allowed.
    for request in &extra {
        acquire.handle_reply(held(request), notice + MS);
    }
    let Some(AcquireEvent::AttemptFailed {
        retry_at: again, ..
    }) = acquire.poll_event()
    else {
        panic!("an extra attempt does not use up the retries")
    };
    assert_eq!(again, retry_at);
    drain_but_marks(&mut acquire);
    acquire.handle_timeout(retry_at);
    let last = drain_but_marks(&mut acquire);
    for request in &last[..2] {
        acquire.handle_reply(yes(request), retry_at + MS);
    }
    let Some(AcquireEvent::Acquired(_)) = acquire.poll_event() else {
        panic!()
    };
    assert_eq!(acquire.attempts(), 3);
    // Notices while an attempt is in flight or after the end change nothing.
    released(&mut acquire, retry_at + 2 * MS);
    assert!(acquire.poll_request().is_none());
}

#[test]
fn notices_never_extend_the_retry_count() {
    // Retry count 1: two counted attempts. Each wait, a notice arrives just
    // before the scheduled retry and its extra attempt fails just after it:
    // the extra attempt takes the retry's place and uses it up.
    let settings = Arc::new(
        redlock_core::Config::new(["a", "b", "c"])
            .ttl(Duration::from_secs(1))
            .node_timeout(10 * MS)
            .retry(
                redlock_core::RetryConfig::default()
                    .count(1)
                    .delay(100 * MS)
                    .jitter(Duration::ZERO),
            )
            .validate()
            .unwrap(),
    );
    let t0 = Instant::now();
    let mut acquire = start(&settings, Attempts::Retry, t0);
    let held = |r: &Request| Reply::to(r, Ok(Response::Data(b"other".to_vec())));
    let mut now = t0;
    for _ in 0..10 {
        let requests: Vec<Request> = drain_but_marks(&mut acquire)
            .into_iter()
            .filter(|r| r.command != Command::Withdraw)
            .collect();
        for request in &requests {
            acquire.handle_reply(held(request), now + MS);
        }
        now += MS;
        match acquire.poll_event() {
            Some(AcquireEvent::AttemptFailed { retry_at, .. }) => {
                drain_but_marks(&mut acquire);
                now = retry_at - MS;
                released(&mut acquire, now);
                now += 2 * MS;
            }
            Some(AcquireEvent::Failed(error)) => {
                assert_eq!(error.attempts(), 2);
                return;
            }
            other => panic!("{other:?}"),
        }
    }
    panic!("notices kept the acquisition retrying past its count");
}

/// Three or five nodes that all answer "held", a retry in 100 ms: the
/// acquisition waits, listening on the lock's channel.
fn waiting(nodes: usize, t0: Instant) -> Acquisition<StdRng> {
    waiting_with(nodes, true, t0)
}

/// As [`waiting`], with release notices on or off.
fn waiting_with(nodes: usize, notices: bool, t0: Instant) -> Acquisition<StdRng> {
    let settings = Arc::new(
        redlock_core::Config::new((0..nodes).map(|i| format!("n{i}")))
            .ttl(Duration::from_secs(1))
            .node_timeout(10 * MS)
            .retry(
                redlock_core::RetryConfig::default()
                    .count(3)
                    .delay(100 * MS)
                    .jitter(Duration::ZERO),
            )
            .release_notices(notices)
            .validate()
            .unwrap(),
    );
    let mut acquire = start(&settings, Attempts::Retry, t0);
    assert_eq!(acquire.poll_listen(), None, "no listening before a wait");
    for request in drain_but_marks(&mut acquire) {
        acquire.handle_reply(held(&request), t0 + MS);
    }
    assert!(matches!(
        acquire.poll_event(),
        Some(AcquireEvent::AttemptFailed { .. })
    ));
    let channels = notices.then(|| vec![settings.release_channel(acquire.key())]);
    assert_eq!(acquire.poll_listen(), channels);
    assert_eq!(acquire.poll_listen(), None, "asked once at most");
    drain_but_marks(&mut acquire);
    acquire
}

fn heard(acquire: &mut Acquisition<StdRng>, node: usize, now: Instant) -> usize {
    acquire.handle_notice(
        redlock_core::Notice::Released(redlock_core::NodeId(node)),
        now,
    );
    drain_but_marks(acquire).len()
}

#[test]
fn a_release_counts_once_heard_from_more_nodes_than_a_failed_attempt_frees() {
    // N - quorum + 1 nodes: 2 of 3, 3 of 5. A failed attempt's clean-up
    // frees at most N - quorum nodes while another client holds a quorum.
    for (nodes, needed) in [(3, 2), (5, 3)] {
        let t0 = Instant::now();
        let mut acquire = waiting(nodes, t0);
        let now = t0 + 20 * MS;
        for node in 0..needed - 1 {
            assert_eq!(heard(&mut acquire, node, now), 0, "{nodes} nodes");
            // The same node again is no news.
            assert_eq!(heard(&mut acquire, node, now), 0, "{nodes} nodes");
        }
        assert_eq!(heard(&mut acquire, needed - 1, now), nodes, "{nodes} nodes");
    }
}

#[test]
fn notices_seen_by_an_attempt_do_not_count_and_those_during_it_count_after_it() {
    let t0 = Instant::now();
    let mut acquire = waiting(3, t0);
    // A subscription confirmed during the wait: releases before it were not
    // heard, so try again.
    acquire.handle_notice(redlock_core::Notice::Subscribed, t0 + 10 * MS);
    let second = drain_but_marks(&mut acquire);
    assert_eq!(second.len(), 3);
    // Notices from before this attempt started were seen by it.
    assert_eq!(heard(&mut acquire, 0, t0 + 5 * MS), 0);
    assert_eq!(heard(&mut acquire, 1, t0 + 5 * MS), 0);
    // Two nodes announce a release while the attempt is in flight: nothing
    // to send yet...
    assert_eq!(heard(&mut acquire, 0, t0 + 11 * MS), 0);
    assert_eq!(heard(&mut acquire, 1, t0 + 11 * MS), 0);
    // ...but when the attempt fails (it checked those nodes just before
    // the release), the next starts at once, after the withdraws.
    for request in &second {
        acquire.handle_reply(
            Reply::to(request, Ok(Response::Data(b"other".to_vec()))),
            t0 + 12 * MS,
        );
    }
    let Some(AcquireEvent::AttemptFailed { .. }) = acquire.poll_event() else {
        panic!()
    };
    let commands: Vec<Command> = drain_but_marks(&mut acquire)
        .iter()
        .map(|r| r.command)
        .collect();
    assert_eq!(commands.len(), 6);
    assert!(commands[..3].iter().all(|c| *c == Command::Withdraw));
    assert!(
        commands[3..]
            .iter()
            .all(|c| matches!(c, Command::Acquire { .. }))
    );
}

#[test]
fn an_acquisition_without_notices_never_asks_to_listen() {
    // `waiting_with` checks `poll_listen` before and after the first wait.
    waiting_with(3, false, Instant::now());
}

/// Settings for the notice tests below: three nodes, notices on, retries
/// after exactly 100 ms.
fn notice_settings(count: u32) -> Arc<Settings> {
    Arc::new(three_nodes(count, 100 * MS).validate().unwrap())
}

#[test]
fn an_extra_attempt_failing_as_its_retry_falls_due_uses_that_retry_up() {
    // Retry count 1. A notice brings an extra attempt forward; it fails at
    // the very instant the scheduled retry was due. It took that retry's
    // place: no attempt is left, and no retry is scheduled for that instant.
    let settings = notice_settings(1);
    let t0 = Instant::now();
    let mut acquire = start(&settings, Attempts::Retry, t0);
    for request in drain_but_marks(&mut acquire) {
        acquire.handle_reply(held(&request), t0 + MS);
    }
    let Some(AcquireEvent::AttemptFailed { retry_at, .. }) = acquire.poll_event() else {
        panic!("expected a retry");
    };
    drain_but_marks(&mut acquire);
    released(&mut acquire, retry_at - MS);
    let extra: Vec<Request> = drain_but_marks(&mut acquire)
        .into_iter()
        .filter(|r| r.command != Command::Withdraw)
        .collect();
    assert_eq!(extra.len(), 3, "the notice started an extra attempt");
    for request in &extra {
        acquire.handle_reply(held(request), retry_at);
    }
    match acquire.poll_event() {
        Some(AcquireEvent::Failed(error)) => assert_eq!(error.attempts(), 2, "{error}"),
        other => panic!("expected the end of the retries, got {other:?}"),
    }
    assert!(acquire.is_done());
}

#[test]
fn a_notice_at_the_instant_an_attempt_starts_counts_once_it_fails() {
    // Only notices from before an attempt started were surely seen by it;
    // one handled at the same instant may come from a release after the
    // attempt's check on that node, so it counts.
    let t0 = Instant::now();
    let mut acquire = waiting(3, t0);
    let started = t0 + 10 * MS;
    acquire.handle_notice(redlock_core::Notice::Subscribed, started);
    let second = drain_but_marks(&mut acquire);
    assert_eq!(second.len(), 3);
    assert_eq!(heard(&mut acquire, 0, started), 0);
    assert_eq!(heard(&mut acquire, 1, started), 0);
    for request in &second {
        acquire.handle_reply(held(request), started + MS);
    }
    let Some(AcquireEvent::AttemptFailed { .. }) = acquire.poll_event() else {
        panic!("expected a retry");
    };
    let commands: Vec<Command> = drain_but_marks(&mut acquire)
        .iter()
        .map(|r| r.command)
        .collect();
    assert_eq!(
        commands.len(),
        6,
        "withdraws, then the next attempt at once"
    );
    assert!(
        commands[3..]
            .iter()
            .all(|c| matches!(c, Command::Acquire { .. }))
    );
}

#[test]
fn only_a_lock_held_by_another_client_makes_an_acquisition_listen() {
    // Nodes that fail publish nothing: an attempt that lacked answers does
    // not subscribe; the next one, which finds the lock held, does.
    let settings = notice_settings(3);
    let t0 = Instant::now();
    let mut acquire = start(&settings, Attempts::Retry, t0);
    drain_but_marks(&mut acquire);
    acquire.handle_timeout(t0 + 10 * MS);
    let Some(AcquireEvent::AttemptFailed { error, retry_at }) = acquire.poll_event() else {
        panic!("expected a retry");
    };
    assert!(matches!(error, AcquireError::NoQuorum { .. }), "{error}");
    assert_eq!(acquire.poll_listen(), None, "no notices to wait for");

    drain_but_marks(&mut acquire);
    acquire.handle_timeout(retry_at);
    for request in drain_but_marks(&mut acquire) {
        acquire.handle_reply(held(&request), retry_at + MS);
    }
    assert!(matches!(
        acquire.poll_event(),
        Some(AcquireEvent::AttemptFailed { .. })
    ));
    assert_eq!(
        acquire.poll_listen(),
        Some(vec![settings.release_channel(acquire.key())])
    );
}

#[test]
fn a_multi_resource_acquisition_listens_for_every_resource() {
    // Any of the resources may be the one whose release frees the lock.
    let settings = notice_settings(3);
    let t0 = Instant::now();
    let mut acquire = Acquisition::with_spec(
        Arc::clone(&settings),
        redlock_core::LockSpec::Multi(&[b"b", b"a"]),
        settings.default_ttl(),
        Attempts::Retry,
        t0,
        StdRng::seed_from_u64(5),
    )
    .unwrap();
    for request in drain_but_marks(&mut acquire) {
        acquire.handle_reply(held(&request), t0 + MS);
    }
    assert!(matches!(
        acquire.poll_event(),
        Some(AcquireEvent::AttemptFailed { .. })
    ));
    let channels = [b"a", b"b"].map(|r| settings.release_channel(&settings.key(r)));
    assert_eq!(acquire.poll_listen(), Some(channels.to_vec()));
}

#[test]
fn notices_from_before_an_attempt_do_not_wake_it_after_it_fails() {
    // Kills a mutant found surviving by `make mutants` (handle_notice's
    // `||` as `&&`): the releases they announce were seen by the attempt.
    let t0 = Instant::now();
    let mut acquire = waiting(3, t0);
    acquire.handle_notice(redlock_core::Notice::Subscribed, t0 + 10 * MS);
    let second = drain_but_marks(&mut acquire);
    assert_eq!(heard(&mut acquire, 0, t0 + 5 * MS), 0);
    assert_eq!(heard(&mut acquire, 1, t0 + 5 * MS), 0);
    for request in &second {
        acquire.handle_reply(held(request), t0 + 12 * MS);
    }
    let Some(AcquireEvent::AttemptFailed { .. }) = acquire.poll_event() else {
        panic!("expected a retry");
    };
    let commands: Vec<Command> = drain_but_marks(&mut acquire)
        .iter()
        .map(|r| r.command)
        .collect();
    assert_eq!(commands, [Command::Withdraw; 3], "no attempt at once");
}

#[test]
fn an_early_timer_during_a_retry_wait_starts_nothing() {
    // Kills a mutant found surviving by `make mutants` (the wait's
    // `now >= until` as `true`): the next attempt starts at its time.
    let t0 = Instant::now();
    let mut acquire = waiting(3, t0);
    let retry_at = acquire.poll_timeout().expect("waiting for the retry");
    acquire.handle_timeout(retry_at - MS);
    assert!(acquire.poll_request().is_none(), "started before its time");
    assert_eq!(acquire.current_attempt(), None);
    acquire.handle_timeout(retry_at);
    assert_eq!(drain_but_marks(&mut acquire).len(), 3);
}
