//! When a request may be forgotten unanswered (`Request::give_up_at`): a
//! vote at its deadline; a release, a withdraw or a leave once what it
//! undoes has surely expired on the node by itself, from that lock's own
//! TTL (the longest it ever asked for, an extension's included), never a
//! fixed patience. A lock with a TTL longer than the client's default is not
//! given up early, and a short one is not waited for long.

mod support;

use redlock_core::Machine;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::StdRng;
use redlock_core::{
    Acquisition, Attempts, Command, Config, Lock, Reply, Request, Response, Settings, Ttl,
};
use support::{MS, drain, expect_lock};

fn settings() -> Arc<Settings> {
    Arc::new(
        Config::new(["a", "b", "c"])
            .ttl(Duration::from_secs(10))
            .validate()
            .expect("valid settings"),
    )
}

/// A lock with `ttl`, granted by every node at `t0 + 1 ms`.
fn acquired(settings: &Arc<Settings>, ttl: Ttl, t0: Instant) -> Lock {
    let mut acquire = Acquisition::new(
        Arc::clone(settings),
        b"job",
        ttl,
        Attempts::Once,
        t0,
        StdRng::seed_from_u64(3),
    );
    for request in drain(&mut acquire) {
        assert_eq!(request.give_up_at, request.deadline, "a vote: {request:?}");
        acquire.handle_reply(Reply::to(&request, Ok(Response::Int(1))), t0 + MS);
    }
    expect_lock(&mut acquire)
}

/// One TTL and its drift past the deadline.
fn expired_by(settings: &Settings, request: &Request, ttl: Ttl) -> Instant {
    request.deadline + ttl.as_duration() + settings.drift(ttl)
}

#[test]
fn a_release_is_given_up_once_its_own_locks_keys_have_expired() {
    let settings = settings();
    let t0 = Instant::now();
    for seconds in [1, 10, 60] {
        let ttl = settings
            .ttl(Duration::from_secs(seconds))
            .expect("a valid TTL");
        let mut lock = acquired(&settings, ttl, t0);
        let mut release = lock.release(t0 + 2 * MS);
        let releases = drain(&mut release);
        assert_eq!(releases.len(), 3);
        for request in &releases {
            assert_eq!(request.command, Command::Release);
            assert_eq!(
                request.give_up_at,
                expired_by(&settings, request, ttl),
                "a lock of {seconds} s"
            );
        }
    }
}

#[test]
fn an_extension_to_a_longer_ttl_is_waited_out_even_when_it_failed() {
    let settings = settings();
    let t0 = Instant::now();
    let short = settings.ttl(Duration::from_secs(1)).expect("a valid TTL");
    let long = settings.ttl(Duration::from_secs(30)).expect("a valid TTL");
    let mut lock = acquired(&settings, short, t0);
    let mut extension = lock.extend(long, t0 + 10 * MS).expect("valid");
    let extends = drain(&mut extension);
    // One node extends, the others never answer: no quorum, the lock keeps
    // its TTL, but that node holds the key for the long one.
    extension.handle_reply(Reply::to(&extends[0], Ok(Response::Int(1))), t0 + 11 * MS);
    extension.handle_timeout(extends[0].deadline);
    assert!(
        extension
            .poll_event()
            .is_some_and(|outcome| outcome.is_err())
    );
    let mut release = lock.release(t0 + 200 * MS);
    for request in drain(&mut release) {
        assert_eq!(request.give_up_at, expired_by(&settings, &request, long));
    }
}

#[test]
fn a_failed_attempts_withdraws_are_given_up_at_its_ttl() {
    let settings = settings();
    let t0 = Instant::now();
    let ttl = settings.ttl(Duration::from_secs(45)).expect("a valid TTL");
    let mut acquire = Acquisition::new(
        Arc::clone(&settings),
        b"job",
        ttl,
        Attempts::Once,
        t0,
        StdRng::seed_from_u64(4),
    );
    let attempt = drain(&mut acquire);
    // One yes, two held by another: no quorum; the attempt withdraws.
    acquire.handle_reply(Reply::to(&attempt[0], Ok(Response::Int(1))), t0 + MS);
    acquire.handle_reply(Reply::to(&attempt[1], Ok(Response::Int(0))), t0 + MS);
    acquire.handle_reply(Reply::to(&attempt[2], Ok(Response::Int(0))), t0 + MS);
    let withdraws = drain(&mut acquire);
    assert!(!withdraws.is_empty(), "the attempt withdraws");
    for request in &withdraws {
        assert_eq!(request.command, Command::Withdraw);
        assert_eq!(request.give_up_at, expired_by(&settings, request, ttl));
    }
}
