//! One per-node timeout for every release: a lock's own release, a release
//! of a value known from elsewhere, and the clean-up of a failed attempt
//! wait for a slow node alike, whatever the lock's TTL.

use redlock_core::Machine;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::StdRng;
use redlock_core::{
    AcquireEvent, Acquisition, Attempts, Command, Config, LockValue, Release, Reply, Request,
    Response, RoundId, Settings,
};

const MS: Duration = Duration::from_millis(1);

/// Derived timeouts: 50 ms for the default 10 s TTL, 10 ms for a 300 ms one.
fn settings() -> Arc<Settings> {
    Arc::new(
        Config::new(["a", "b", "c"])
            .validate()
            .expect("valid settings"),
    )
}

#[test]
fn a_short_lived_lock_and_its_value_are_released_with_the_same_timeout() {
    let settings = settings();
    let short = settings.ttl(300 * MS).unwrap();
    assert_eq!(settings.node_timeout_for(short), 10 * MS);
    assert_eq!(settings.release_timeout(), 50 * MS);
    assert_eq!(settings.release_timeout(), settings.node_timeout());

    let t0 = Instant::now();
    let mut acquire = Acquisition::new(
        Arc::clone(&settings),
        b"short",
        short,
        Attempts::Once,
        t0,
        StdRng::seed_from_u64(3),
    );
    let requests: Vec<_> = std::iter::from_fn(|| acquire.poll_request()).collect();
    // The acquire itself uses the TTL's own, shorter timeout.
    assert!(requests.iter().all(|r| r.deadline == t0 + 10 * MS));
    for request in &requests {
        acquire.handle_reply(Reply::to(request, Ok(Response::Int(1))), t0 + MS);
    }
    let Some(AcquireEvent::Acquired(mut lock)) = acquire.poll_event() else {
        panic!("expected the lock");
    };

    let t1 = t0 + 2 * MS;
    let mut by_guard = lock.release(t1).every_node();
    let mut by_value = Release::new(
        &settings,
        lock.key().clone(),
        lock.value().clone(),
        RoundId(1),
        t1,
    )
    .every_node();
    assert_eq!(by_guard.poll_timeout(), Some(t1 + 50 * MS));
    assert_eq!(by_value.poll_timeout(), by_guard.poll_timeout());
    let guard_requests: Vec<_> = std::iter::from_fn(|| by_guard.poll_request()).collect();
    let value_requests: Vec<_> = std::iter::from_fn(|| by_value.poll_request()).collect();
    assert!(
        guard_requests
            .iter()
            .chain(&value_requests)
            .all(|r| r.deadline == t1 + 50 * MS)
    );
    // A node that never answers is timed out with the same words in both.
    for (release, requests) in [
        (&mut by_guard, &guard_requests),
        (&mut by_value, &value_requests),
    ] {
        release.handle_reply(Reply::to(&requests[0], Ok(Response::Int(1))), t1 + MS);
        release.handle_reply(Reply::to(&requests[1], Ok(Response::Int(1))), t1 + MS);
        release.handle_timeout(t1 + 10 * MS);
        assert!(release.poll_event().is_none(), "not cut short at 10 ms");
        release.handle_timeout(t1 + 50 * MS);
        let report = release.poll_event().expect("a report at 50 ms");
        assert!(
            report.to_string().contains("no answer within 50 ms"),
            "{report}"
        );
    }
}

#[test]
fn a_failed_attempt_is_withdrawn_with_the_release_timeout() {
    let settings = settings();
    let short = settings.ttl(300 * MS).unwrap();
    let t0 = Instant::now();
    let mut acquire = Acquisition::new(
        Arc::clone(&settings),
        b"short",
        short,
        Attempts::Once,
        t0,
        StdRng::seed_from_u64(4),
    );
    let requests: Vec<_> = std::iter::from_fn(|| acquire.poll_request()).collect();
    for request in &requests[..2] {
        let held = Response::Data(b"other".to_vec());
        acquire.handle_reply(Reply::to(request, Ok(held)), t0 + MS);
    }
    assert!(matches!(
        acquire.poll_event(),
        Some(AcquireEvent::Failed(_))
    ));
    let withdraws: Vec<_> = std::iter::from_fn(|| acquire.poll_request()).collect();
    assert_eq!(withdraws.len(), 3);
    assert!(
        withdraws
            .iter()
            .all(|r| r.command == Command::Withdraw && r.deadline == t0 + MS + 50 * MS)
    );
}

#[test]
fn a_refused_notice_answered_twice_counts_once() {
    let settings = settings();
    let t0 = Instant::now();
    let mut release = Release::new(
        &settings,
        settings.key(b"twice"),
        LockValue::from_string("0123456789abcdef0123"),
        RoundId(7),
        t0,
    )
    .every_node();
    let requests: Vec<Request> = std::iter::from_fn(|| release.poll_request()).collect();
    // Node 0 answers 2 (released, notice refused), and the same answer is
    // delivered again; the other nodes answer 1.
    let refused = Reply::to(&requests[0], Ok(Response::Int(2)));
    release.handle_reply(refused.clone(), t0);
    release.handle_reply(refused, t0);
    for request in &requests[1..] {
        release.handle_reply(Reply::to(request, Ok(Response::Int(1))), t0);
    }
    let report = release.poll_event().expect("every node answered");
    assert_eq!(report.notices_refused(), 1);
    assert_eq!(report.released(), requests.len());
}
