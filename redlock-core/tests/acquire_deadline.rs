//! The overall acquire deadline is hard: a quorum counted at or after it is
//! no lock, and its keys are released. In virtual time, so "the replies came
//! in with the timer" is exact.

mod support;

use redlock_core::Machine;
use std::sync::Arc;
use std::time::Instant;

use rand::SeedableRng;
use rand::rngs::StdRng;
use redlock_core::{
    AcquireError, AcquireEvent, Acquisition, Attempts, Command, Config, Reply, Response,
    RetryConfig, Settings,
};
use support::{MS, drain_but_marks, yes};

/// Three nodes, a 10 s TTL, a 500 ms per-node timeout and a 100 ms deadline:
/// an attempt's round outlives the deadline. Retries 10..20 ms apart.
fn settings() -> Arc<Settings> {
    Arc::new(
        Config::new(["a", "b", "c"])
            .node_timeout(500 * MS)
            .acquire_deadline(100 * MS)
            .retry(
                RetryConfig::default()
                    .count(3)
                    .delay(10 * MS)
                    .jitter(10 * MS),
            )
            .validate()
            .unwrap(),
    )
}

fn start(settings: &Arc<Settings>, fenced: bool, t0: Instant) -> Acquisition<StdRng> {
    let rng = StdRng::seed_from_u64(11);
    let ttl = settings.default_ttl();
    if fenced {
        Acquisition::fenced(Arc::clone(settings), b"d", ttl, Attempts::Retry, t0, rng)
    } else {
        Acquisition::new(Arc::clone(settings), b"d", ttl, Attempts::Retry, t0, rng)
    }
}

#[test]
fn a_quorum_just_before_the_deadline_is_a_lock() {
    let settings = settings();
    let t0 = Instant::now();
    let mut acquire = start(&settings, false, t0);
    assert_eq!(acquire.poll_timeout(), Some(t0 + 100 * MS));
    let requests = drain_but_marks(&mut acquire);
    acquire.handle_reply(yes(&requests[0]), t0 + 99 * MS);
    acquire.handle_reply(yes(&requests[1]), t0 + 99 * MS);
    assert!(matches!(
        acquire.poll_event(),
        Some(AcquireEvent::Acquired(_))
    ));
}

#[test]
fn a_quorum_counted_after_the_deadline_is_no_lock_and_is_released() {
    let settings = settings();
    let t0 = Instant::now();
    for late in [100 * MS, 101 * MS, 400 * MS] {
        let mut acquire = start(&settings, false, t0);
        let requests = drain_but_marks(&mut acquire);
        acquire.handle_reply(yes(&requests[0]), t0 + 10 * MS);
        // The second yes completes the quorum, but it is handled at or after
        // the deadline, before (or without) the timer's `handle_timeout`.
        acquire.handle_reply(yes(&requests[1]), t0 + late);
        let event = acquire.poll_event();
        let Some(AcquireEvent::Failed(AcquireError::DeadlineExceeded { attempts, .. })) = event
        else {
            panic!("{late:?} after the start: expected the deadline, got {event:?}");
        };
        assert_eq!(attempts, 1);
        // Every node is asked to drop the attempt's value, the ones that said
        // yes included.
        let releases = drain_but_marks(&mut acquire);
        assert_eq!(releases.len(), 3, "{late:?}");
        assert!(
            releases
                .iter()
                .all(|r| r.command == Command::Withdraw && r.value == requests[0].value)
        );
        assert!(acquire.is_done());
        // The timer that fires next changes nothing.
        acquire.handle_timeout(t0 + late + MS);
        assert!(acquire.poll_event().is_none());
    }
}

#[test]
fn a_fenced_lock_whose_token_is_stored_after_the_deadline_is_no_lock() {
    let settings = settings();
    let t0 = Instant::now();
    let mut acquire = start(&settings, true, t0);
    let lock_round = drain_but_marks(&mut acquire);
    for request in &lock_round[..2] {
        let granted = Response::Array(vec![Response::Int(1), Response::Int(4)]);
        acquire.handle_reply(Reply::to(request, Ok(granted)), t0 + 10 * MS);
    }
    // The lock round was won in time; the token round ends too late.
    let fence_round = drain_but_marks(&mut acquire);
    assert!(
        fence_round
            .iter()
            .all(|r| matches!(r.command, Command::StoreToken { token: 5 }))
    );
    acquire.handle_reply(yes(&fence_round[0]), t0 + 100 * MS);
    acquire.handle_reply(yes(&fence_round[1]), t0 + 100 * MS);
    assert!(matches!(
        acquire.poll_event(),
        Some(AcquireEvent::Failed(AcquireError::DeadlineExceeded { .. }))
    ));
    let releases = drain_but_marks(&mut acquire);
    assert_eq!(releases.len(), 3);
    assert!(releases.iter().all(|r| r.command == Command::Withdraw));
}

#[test]
fn a_deadline_that_ends_a_retry_reports_the_last_failure() {
    let settings = settings();
    let t0 = Instant::now();
    let mut acquire = start(&settings, false, t0);
    let requests = drain_but_marks(&mut acquire);
    for request in &requests {
        acquire.handle_reply(
            Reply::to(request, Ok(Response::Data(b"other".to_vec()))),
            t0 + MS,
        );
    }
    let Some(AcquireEvent::AttemptFailed { retry_at, .. }) = acquire.poll_event() else {
        panic!("expected a retry");
    };
    drain_but_marks(&mut acquire);
    acquire.handle_timeout(retry_at);
    let second = drain_but_marks(&mut acquire);
    // The second attempt's quorum is handled after the deadline.
    acquire.handle_reply(yes(&second[0]), t0 + 150 * MS);
    acquire.handle_reply(yes(&second[1]), t0 + 150 * MS);
    let Some(AcquireEvent::Failed(error)) = acquire.poll_event() else {
        panic!("expected the deadline");
    };
    let AcquireError::DeadlineExceeded { attempts, last, .. } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(*attempts, 2);
    assert!(
        matches!(last.as_deref(), Some(AcquireError::Held { .. })),
        "{error}"
    );
    assert_eq!(drain_but_marks(&mut acquire).len(), 3);
}
