//! One acquisition's own wait limit ([`Attempts::Within`]): it replaces the
//! settings' acquire deadline for that acquisition, the retry count does not
//! bound it, and it is as hard as the deadline. Its own retry count
//! ([`Attempts::Retries`]) replaces the settings' count and deadline alike.
//! In virtual time, against nodes that all answer "held by another owner".

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::StdRng;
use redlock_core::{
    AcquireError, AcquireEvent, Acquisition, Attempts, Config, ConfigError, LockSpec, Machine,
    NodeId, Notice, Reply, Request, Response, RetryConfig, Settings,
};
use support::{MS, drain_but_marks, slow_retries};

/// Three nodes, retries 10..20 ms apart, `count` retries, and the given
/// client-wide deadline.
fn settings(count: u32, deadline: Option<Duration>) -> Arc<Settings> {
    let mut config = Config::new(["a", "b", "c"]).node_timeout(5 * MS).retry(
        RetryConfig::default()
            .count(count)
            .delay(10 * MS)
            .jitter(10 * MS),
    );
    // `None` (no deadline) has no setter: the field takes it as given.
    config.acquire_deadline = deadline;
    Arc::new(config.validate().unwrap())
}

fn start(settings: &Arc<Settings>, attempts: Attempts, t0: Instant) -> Acquisition<StdRng> {
    Acquisition::with_spec(
        Arc::clone(settings),
        LockSpec::Exclusive(b"w"),
        settings.default_ttl(),
        attempts,
        t0,
        StdRng::seed_from_u64(5),
    )
    .unwrap()
}

fn held(request: &Request) -> Reply {
    Reply::to(request, Ok(Response::Data(b"another owner".to_vec())))
}

/// Runs the acquisition against nodes that all answer "held" 1 ms after
/// each request, for at most `steps` attempts; returns the final event (if
/// any) and the virtual time it came at.
fn run_held(
    acquire: &mut Acquisition<StdRng>,
    t0: Instant,
    steps: u32,
) -> (Option<AcquireError>, Instant) {
    let mut now = t0;
    for _ in 0..steps {
        let requests = drain_but_marks(acquire);
        let reply_at = now + MS;
        let deadline = acquire.poll_timeout().expect("not done");
        if deadline <= reply_at {
            // The timer comes first (the deadline cuts the attempt short).
            now = deadline;
            acquire.handle_timeout(now);
        } else {
            now = reply_at;
            for request in requests.iter().filter(|r| r.command.ttl().is_some()) {
                acquire.handle_reply(held(request), now);
            }
        }
        while let Some(event) = acquire.poll_event() {
            match event {
                AcquireEvent::Failed(error) => return (Some(error), now),
                AcquireEvent::Acquired(_) => panic!("every node is held by another owner"),
                AcquireEvent::AttemptFailed { .. } => {}
            }
        }
        // Waiting: the retry starts at the timer (or the deadline ends it).
        while acquire.current_attempt().is_none() && !acquire.is_done() {
            now = acquire.poll_timeout().expect("waiting has a timer");
            acquire.handle_timeout(now);
            if let Some(AcquireEvent::Failed(error)) = acquire.poll_event() {
                return (Some(error), now);
            }
        }
    }
    (None, now)
}

#[test]
fn the_wait_limit_replaces_the_client_deadline_and_is_reported() {
    // A long client-wide deadline; this acquisition may wait 300 ms only.
    let settings = settings(1_000, Some(Duration::from_secs(60)));
    let t0 = Instant::now();
    let mut acquire = start(&settings, Attempts::Within(300 * MS), t0);
    assert_eq!(acquire.poll_timeout(), Some(t0 + 5 * MS));
    let (error, at) = run_held(&mut acquire, t0, 1_000);
    let Some(AcquireError::DeadlineExceeded {
        deadline,
        attempts,
        last,
    }) = error
    else {
        panic!("expected the deadline error, got {error:?}");
    };
    assert_eq!(deadline, 300 * MS, "the call's limit, not the client's");
    assert!(at <= t0 + 300 * MS, "gave up at {:?}", at - t0);
    assert!(attempts > 1);
    let last = last.expect("attempts finished before the limit");
    assert!(last.is_held_by_other(), "{last:?}");
}

#[test]
fn the_retry_count_does_not_bound_a_wait_limit() {
    // Two retries only: the plain acquisition gives up after three attempts.
    let settings = settings(2, None);
    let t0 = Instant::now();
    let (error, _) = run_held(&mut start(&settings, Attempts::Retry, t0), t0, 100);
    let error = error.expect("out of attempts");
    assert!(
        matches!(error, AcquireError::Held { attempts: 3, .. }),
        "{error:?}"
    );
    // With a 500 ms limit it keeps trying every 10..20 ms until then.
    let (error, at) = run_held(
        &mut start(&settings, Attempts::Within(500 * MS), t0),
        t0,
        1_000,
    );
    let Some(AcquireError::DeadlineExceeded {
        attempts, deadline, ..
    }) = error
    else {
        panic!("expected the deadline error, got {error:?}");
    };
    assert_eq!(deadline, 500 * MS);
    assert!(
        attempts > 20,
        "{attempts} attempts in 500 ms, 10..20 ms apart"
    );
    assert!(at <= t0 + 500 * MS);
}

#[test]
fn its_own_retry_count_makes_one_plus_that_many_attempts_without_a_deadline() {
    // Two retries and a 20 ms deadline client-wide: the plain acquisition
    // gives up at that deadline.
    let settings = settings(2, Some(20 * MS));
    let t0 = Instant::now();
    let (error, _) = run_held(&mut start(&settings, Attempts::Retry, t0), t0, 100);
    assert!(
        matches!(error, Some(AcquireError::DeadlineExceeded { .. })),
        "{error:?}"
    );
    // Its own count replaces both: fewer or more attempts than the
    // client's 1 + 2, and never cut short by the deadline (7 retries
    // 10..20 ms apart take 70 ms at least).
    for retries in [0, 1, 7] {
        let mut acquire = start(&settings, Attempts::Retries(retries), t0);
        // The first timer is the attempt's node timeout, not a deadline.
        assert_eq!(acquire.poll_timeout(), Some(t0 + 5 * MS));
        let (error, at) = run_held(&mut acquire, t0, 100);
        let error = error.expect("out of attempts");
        assert!(
            matches!(error, AcquireError::Held { attempts, .. } if attempts == 1 + retries),
            "{retries} retries: {error:?}"
        );
        assert_eq!(acquire.attempts(), 1 + retries);
        if retries == 7 {
            assert!(at > t0 + 70 * MS, "gave up at {:?}", at - t0);
        }
    }
}

#[test]
fn the_wait_limit_is_hard() {
    // The limit falls inside the first attempt's round: the quorum that
    // comes with it is no lock, and its keys are released.
    let settings = settings(10, None);
    let t0 = Instant::now();
    let mut acquire = start(&settings, Attempts::Within(3 * MS), t0);
    assert_eq!(acquire.poll_timeout(), Some(t0 + 3 * MS));
    let requests = drain_but_marks(&mut acquire);
    for request in &requests {
        acquire.handle_reply(Reply::to(request, Ok(Response::Int(1))), t0 + 3 * MS);
    }
    let Some(AcquireEvent::Failed(AcquireError::DeadlineExceeded {
        deadline,
        last: None,
        ..
    })) = acquire.poll_event()
    else {
        panic!("a quorum at the limit is no lock");
    };
    assert_eq!(deadline, 3 * MS);
    let releases = drain_but_marks(&mut acquire).len();
    assert_eq!(releases, 3, "the attempt's keys are released on every node");
}

#[test]
fn a_zero_wait_limit_is_a_config_error() {
    let settings = settings(10, None);
    let result = Acquisition::with_spec(
        Arc::clone(&settings),
        LockSpec::Read(b"w"),
        settings.default_ttl(),
        Attempts::Within(Duration::ZERO),
        Instant::now(),
        StdRng::seed_from_u64(1),
    );
    assert!(matches!(result, Err(ConfigError::ZeroDeadline)));
    // The infallible constructors give up at their first decision instead.
    let t0 = Instant::now();
    let mut acquire = Acquisition::new(
        Arc::clone(&settings),
        b"w",
        settings.default_ttl(),
        Attempts::Within(Duration::ZERO),
        t0,
        StdRng::seed_from_u64(1),
    );
    acquire.handle_timeout(t0);
    assert!(matches!(
        acquire.poll_event(),
        Some(AcquireEvent::Failed(AcquireError::DeadlineExceeded { .. }))
    ));
}

#[test]
fn a_limit_past_the_clock_means_no_limit() {
    let settings = settings(0, Some(100 * MS));
    let t0 = Instant::now();
    let mut acquire = start(&settings, Attempts::Within(Duration::MAX), t0);
    // No deadline of its own, and not the client's 100 ms either: it is
    // still retrying after 200 attempts (several seconds of virtual time).
    let (error, at) = run_held(&mut acquire, t0, 200);
    assert!(error.is_none(), "{error:?}");
    assert!(at > t0 + Duration::from_secs(1));
    assert!(acquire.attempts() >= 200);
}

/// Answers the attempt in flight with "held" on every node at `now`, and
/// takes the withdraws that follow.
fn refuse(acquire: &mut Acquisition<StdRng>, now: Instant) {
    let requests = drain_but_marks(acquire);
    for request in requests.iter().filter(|r| r.command.ttl().is_some()) {
        acquire.handle_reply(held(request), now);
    }
    // The failed attempt's withdraws.
    assert_eq!(drain_but_marks(acquire).len(), 3);
}

#[test]
fn a_release_before_the_limit_is_waited_for_and_taken() {
    // The holder releases at 200 ms; the next timed retry would be at 1 s.
    let settings = slow_retries();
    let t0 = Instant::now();
    let mut acquire = start(&settings, Attempts::Within(300 * MS), t0);
    refuse(&mut acquire, t0 + MS);
    assert!(matches!(
        acquire.poll_event(),
        Some(AcquireEvent::AttemptFailed { .. })
    ));
    assert!(acquire.current_attempt().is_none(), "waiting, not given up");
    assert!(!acquire.is_done());
    assert!(acquire.poll_listen().is_some(), "it listens for releases");
    // Nothing happens until the release: the timer is the limit's last
    // retry, well after 200 ms.
    assert_eq!(acquire.poll_timeout(), Some(t0 + 295 * MS));
    acquire.handle_timeout(t0 + 150 * MS);
    assert!(acquire.poll_event().is_none() && !acquire.is_done());
    // The release's notices from two of three nodes: an attempt at once,
    // no retry timer in between.
    let release = t0 + 200 * MS;
    acquire.handle_notice(Notice::Released(NodeId(0)), release);
    assert!(
        acquire.current_attempt().is_none(),
        "one node is no release"
    );
    acquire.handle_notice(Notice::Released(NodeId(2)), release);
    assert!(
        acquire.current_attempt().is_some(),
        "attempting at the notice"
    );
    let requests = drain_but_marks(&mut acquire);
    assert_eq!(requests.len(), 3);
    for request in &requests {
        acquire.handle_reply(Reply::to(request, Ok(Response::Int(1))), release + MS);
    }
    assert!(matches!(
        acquire.poll_event(),
        Some(AcquireEvent::Acquired(_))
    ));
}

#[test]
fn without_a_release_the_limit_is_waited_out_with_a_last_attempt() {
    let settings = slow_retries();
    let t0 = Instant::now();
    let mut acquire = start(&settings, Attempts::Within(300 * MS), t0);
    refuse(&mut acquire, t0 + MS);
    let Some(AcquireEvent::AttemptFailed { retry_at, .. }) = acquire.poll_event() else {
        panic!("the first attempt fails");
    };
    // The retry drawn (1 s) is past the limit: the last attempt starts one
    // node timeout (5 ms) before it, so that it can end by the limit.
    assert_eq!(retry_at, t0 + 295 * MS);
    acquire.handle_timeout(retry_at);
    assert!(acquire.current_attempt().is_some(), "the last attempt");
    refuse(&mut acquire, retry_at + MS);
    let Some(AcquireEvent::AttemptFailed { retry_at, .. }) = acquire.poll_event() else {
        panic!("the last attempt fails, and the wait goes on");
    };
    assert_eq!(retry_at, t0 + 300 * MS, "to the limit, for notices");
    assert!(!acquire.is_done());
    acquire.handle_timeout(t0 + 299 * MS);
    assert!(acquire.poll_event().is_none() && !acquire.is_done());
    acquire.handle_timeout(t0 + 300 * MS);
    let Some(AcquireEvent::Failed(AcquireError::DeadlineExceeded { attempts, last, .. })) =
        acquire.poll_event()
    else {
        panic!("gives up at the limit");
    };
    assert_eq!(attempts, 2);
    assert!(last.expect("the last attempt's error").is_held_by_other());
}

#[test]
fn a_fenced_waiters_last_attempt_starts_two_node_timeouts_before_the_limit() {
    // A fenced attempt takes two rounds (the lock, then the token), so
    // the last one starts in time for both to end by the limit.
    let settings = slow_retries();
    let t0 = Instant::now();
    let mut acquire = Acquisition::with_spec(
        Arc::clone(&settings),
        LockSpec::Fenced(b"w"),
        settings.default_ttl(),
        Attempts::Within(300 * MS),
        t0,
        StdRng::seed_from_u64(5),
    )
    .unwrap();
    refuse(&mut acquire, t0 + MS);
    let Some(AcquireEvent::AttemptFailed { retry_at, .. }) = acquire.poll_event() else {
        panic!("the first attempt fails");
    };
    assert_eq!(retry_at, t0 + 290 * MS);
}

#[test]
fn no_waiter_gives_up_before_its_limit() {
    // Many seeds and limits against nodes that stay held: the final event
    // comes exactly at the limit, never before.
    let settings = settings(1_000, None);
    for seed in 0..20 {
        for limit in [30 * MS, 113 * MS, 300 * MS] {
            let t0 = Instant::now();
            let mut acquire = Acquisition::with_spec(
                Arc::clone(&settings),
                LockSpec::Exclusive(b"w"),
                settings.default_ttl(),
                Attempts::Within(limit),
                t0,
                StdRng::seed_from_u64(seed),
            )
            .unwrap();
            let (error, at) = run_held(&mut acquire, t0, 10_000);
            assert!(
                matches!(error, Some(AcquireError::DeadlineExceeded { .. })),
                "{error:?}"
            );
            assert_eq!(at, t0 + limit, "seed {seed}: gave up at {:?}", at - t0);
        }
    }
}
