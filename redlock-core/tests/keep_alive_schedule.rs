//! The keep-alive schedule on its own, in virtual time: when it extends,
//! how it retries, when it gives up. (`keep_alive.rs` runs it in the
//! simulation.)

mod support;

use redlock_core::Machine;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redlock_core::{
    Config, ExtendError, Extended, KeepAlive, KeepAliveEvent, KeepAliveSchedule, Lock, LossReason,
    Reply, Response, Ttl,
};
use support::MS;

/// A lock with this TTL on three nodes, acquired at `t0`.
fn lock(ttl: Duration, node_timeout: Duration, t0: Instant) -> Lock {
    let settings = Arc::new(
        Config::new(["a", "b", "c"])
            .ttl(ttl)
            .node_timeout(node_timeout)
            .validate()
            .unwrap(),
    );
    support::granted(&settings, 1, t0)
}

/// Runs one extension at `now` whose nodes answer `answer`.
fn extend(lock: &mut Lock, ttl: Ttl, now: Instant, answer: i64) -> Result<Extended, ExtendError> {
    let mut extension = lock.extend(ttl, now)?;
    while let Some(request) = extension.poll_request() {
        extension.handle_reply(Reply::to(&request, Ok(Response::Int(answer))), now);
    }
    if let Some(at) = extension.poll_timeout() {
        extension.handle_timeout(at);
    }
    let result = extension.poll_event().expect("decided");
    if let Ok(extended) = &result {
        lock.apply(extended);
    }
    result
}

/// Waits for the schedule's timer and expects an extension.
fn due(schedule: &mut KeepAliveSchedule) -> (Instant, Ttl) {
    let at = schedule.poll_timeout().expect("a timer");
    schedule.handle_timeout(at);
    match schedule.poll_event() {
        Some(KeepAliveEvent::Extend { ttl }) => (at, ttl),
        other => panic!("expected an extension, got {other:?}"),
    }
}

fn no_quorum(lock: &mut Lock, now: Instant) -> ExtendError {
    let mut extension = lock.extend(lock.ttl(), now).unwrap();
    let deadline = extension.poll_timeout().unwrap();
    extension.handle_timeout(deadline);
    extension.poll_event().unwrap().unwrap_err()
}

#[test]
fn extends_at_the_share_of_the_ttl_and_again_after_each_extension() {
    let t0 = Instant::now();
    let mut lock = lock(Duration::from_secs(10), 50 * MS, t0);
    let mut schedule = KeepAliveSchedule::new(&lock, KeepAlive::default());
    for round in 1..=3 {
        let (at, ttl) = due(&mut schedule);
        assert_eq!(lock.valid_until() - at, Duration::from_secs(5));
        assert_eq!(schedule.poll_timeout(), None, "no timer while extending");
        let extended = extend(&mut lock, ttl, at, 1).unwrap();
        schedule.handle_extended(&extended, at + MS);
        assert_eq!(schedule.extensions(), round);
        assert_eq!(schedule.valid_until(), lock.valid_until());
    }
    // Early timers do nothing.
    let at = schedule.poll_timeout().unwrap();
    schedule.handle_timeout(at - MS);
    assert_eq!(schedule.poll_event(), None);
}

#[test]
fn the_lead_is_at_least_two_node_timeouts_and_at_most_ninety_percent() {
    let t0 = Instant::now();
    // 5% of 1 s is 50 ms, less than two 100 ms node timeouts.
    let short = lock(Duration::from_secs(1), 100 * MS, t0);
    let options = KeepAlive::default().extend_when_left(0.0); // clamped to 0.05
    let schedule = KeepAliveSchedule::new(&short, options);
    assert_eq!(
        short.valid_until() - schedule.poll_timeout().unwrap(),
        200 * MS
    );

    // 95% of the TTL is more than 90% of validity (TTL - drift).
    let long = lock(Duration::from_secs(10), 50 * MS, t0);
    for share in [2.0, 0.95, f64::NAN] {
        let schedule = KeepAliveSchedule::new(&long, KeepAlive::default().extend_when_left(share));
        let lead = long.valid_until() - schedule.poll_timeout().unwrap();
        let span = Duration::from_secs(10) - long.settings().drift(long.ttl());
        let expected = if share.is_nan() {
            Duration::from_secs(5)
        } else {
            span.mul_f64(0.9)
        };
        assert_eq!(lead, expected, "share {share}");
    }
}

#[test]
fn no_quorum_is_retried_while_validity_is_left_then_lost_at_its_end() {
    let t0 = Instant::now();
    let mut lock = lock(Duration::from_secs(1), 100 * MS, t0);
    let mut schedule = KeepAliveSchedule::new(&lock, KeepAlive::default());
    let (at, _) = due(&mut schedule);
    let error = no_quorum(&mut lock, at);
    schedule.handle_failed(error, at + 100 * MS);
    // Retried one node timeout later.
    let (retry, _) = due(&mut schedule);
    assert_eq!(retry, at + 200 * MS);
    let error = no_quorum(&mut lock, retry);
    // Too close to the end for another round: lost when validity ends.
    let late = lock.valid_until() - 50 * MS;
    schedule.handle_failed(error.clone(), late);
    assert_eq!(schedule.poll_event(), None);
    assert_eq!(schedule.poll_timeout(), Some(lock.valid_until()));
    schedule.handle_timeout(lock.valid_until() - MS);
    assert_eq!(schedule.poll_event(), None);
    schedule.handle_timeout(lock.valid_until());
    assert_eq!(
        schedule.poll_event(),
        Some(KeepAliveEvent::Lost(LossReason::ExtendFailed(error)))
    );
    assert!(schedule.is_done());
    assert_eq!(schedule.poll_timeout(), None);
}

/// A retry that could only start as the validity ends is not made: there
/// is nothing left for it to keep. (Written for `make mutants`: a mutant
/// that retries at `retry_at <= valid_until` passes the other tests here.)
#[test]
fn no_retry_is_due_at_the_very_end_of_the_validity() {
    let t0 = Instant::now();
    let mut lock = lock(Duration::from_secs(1), 100 * MS, t0);
    let mut schedule = KeepAliveSchedule::new(&lock, KeepAlive::default());
    let (at, _) = due(&mut schedule);
    let error = no_quorum(&mut lock, at);
    // The retry pause is one node timeout: it would land exactly on the end.
    let failed = lock.valid_until() - 100 * MS;
    schedule.handle_failed(error.clone(), failed);
    assert_eq!(schedule.poll_timeout(), Some(lock.valid_until()));
    schedule.handle_timeout(lock.valid_until());
    assert_eq!(
        schedule.poll_event(),
        Some(KeepAliveEvent::Lost(LossReason::ExtendFailed(error))),
        "lost at the end of the validity, not extended then"
    );
    assert!(schedule.is_done());
}

#[test]
fn any_other_failure_is_a_loss_at_once() {
    let t0 = Instant::now();
    let mut lock = lock(Duration::from_secs(1), 100 * MS, t0);
    let mut schedule = KeepAliveSchedule::new(&lock, KeepAlive::default());
    let (at, ttl) = due(&mut schedule);
    // 0 from every node: another owner holds the key.
    let error = extend(&mut lock, ttl, at, 0).unwrap_err();
    assert!(matches!(error, ExtendError::Lost { .. }), "{error:?}");
    schedule.handle_failed(error.clone(), at);
    assert_eq!(
        schedule.poll_event(),
        Some(KeepAliveEvent::Lost(LossReason::ExtendFailed(error)))
    );
    assert!(schedule.is_done());

    // An extension started after the validity ended is refused by the
    // lock; fed back, it is a loss too.
    let mut lock = self::lock(Duration::from_secs(1), 100 * MS, t0);
    let mut schedule = KeepAliveSchedule::new(&lock, KeepAlive::default());
    let (_, ttl) = due(&mut schedule);
    let late = lock.valid_until() + MS;
    let error = extend(&mut lock, ttl, late, 1).unwrap_err();
    schedule.handle_failed(error, late);
    assert!(matches!(
        schedule.poll_event(),
        Some(KeepAliveEvent::Lost(LossReason::ExtendFailed(
            ExtendError::Expired { .. }
        )))
    ));
}

#[test]
fn the_extension_limit_ends_the_lock_with_its_validity() {
    let t0 = Instant::now();
    let mut lock = lock(Duration::from_secs(1), 50 * MS, t0);
    let options = KeepAlive::default().max_extensions(1);
    let mut schedule = KeepAliveSchedule::new(&lock, options);
    let (at, ttl) = due(&mut schedule);
    let extended = extend(&mut lock, ttl, at, 1).unwrap();
    schedule.handle_extended(&extended, at);
    assert_eq!(
        schedule.poll_event(),
        Some(KeepAliveEvent::LimitReached { extensions: 1 })
    );
    assert_eq!(schedule.poll_timeout(), Some(lock.valid_until()));
    schedule.handle_timeout(lock.valid_until());
    assert_eq!(
        schedule.poll_event(),
        Some(KeepAliveEvent::Lost(LossReason::ExtensionLimit {
            extensions: 1
        }))
    );

    // Extensions made before the schedule count; a limit of zero never
    // extends.
    let zero = KeepAlive::default().max_extensions(0);
    let mut schedule = KeepAliveSchedule::new(&lock, zero);
    assert_eq!(
        schedule.poll_event(),
        Some(KeepAliveEvent::LimitReached { extensions: 1 })
    );
    assert_eq!(schedule.poll_timeout(), Some(lock.valid_until()));
}

#[test]
fn results_out_of_turn_are_ignored() {
    let t0 = Instant::now();
    let mut lock = lock(Duration::from_secs(1), 50 * MS, t0);
    let mut schedule = KeepAliveSchedule::new(&lock, KeepAlive::default());
    let before = schedule.poll_timeout();
    let ttl = lock.ttl();
    let extended = extend(&mut lock, ttl, t0, 1).unwrap();
    schedule.handle_extended(&extended, t0);
    schedule.handle_failed(no_quorum(&mut lock, t0), t0);
    assert_eq!(schedule.poll_timeout(), before);
    assert_eq!(schedule.poll_event(), None);
}

/// The schedule is over only once the lock is lost: not while it waits for
/// the next extension, runs one, waits to retry one, or waits for the end of
/// a validity it can no longer extend. (Written for `make mutants`: the
/// other tests only asserted that a lost lock's schedule is done.)
#[test]
fn the_schedule_is_over_only_once_the_lock_is_lost() {
    let t0 = Instant::now();
    let mut lock = lock(Duration::from_secs(1), 100 * MS, t0);
    let mut schedule = KeepAliveSchedule::new(&lock, KeepAlive::default());
    assert!(!schedule.is_done(), "waiting for the first extension");
    let (at, _) = due(&mut schedule);
    assert!(!schedule.is_done(), "extending");
    schedule.handle_failed(no_quorum(&mut lock, at), at + 100 * MS);
    assert!(!schedule.is_done(), "waiting to retry");
    let (retry, _) = due(&mut schedule);
    schedule.handle_failed(no_quorum(&mut lock, retry), lock.valid_until() - 50 * MS);
    assert!(!schedule.is_done(), "waiting for the end of the validity");
    schedule.handle_timeout(lock.valid_until());
    assert!(matches!(
        schedule.poll_event(),
        Some(KeepAliveEvent::Lost(_))
    ));
    assert!(schedule.is_done(), "lost");
}
