//! Which missing keys an extension may re-set: a minority the quorum can
//! spare (a master restarted empty), never a quorum (the lock was released
//! by its value, for example by an operator): then the lock is lost and the
//! re-set keys are released again.

mod sim;

use redlock_core::Machine;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::StdRng;
use redlock_core::{
    AcquireEvent, Acquisition, Attempts, Command, ExtendError, Extension, Lock, NodeError,
    NodeErrorKind, Reply, Request, Response, Settings,
};

const MS: Duration = Duration::from_millis(1);
const STILL_OURS: i64 = 1;
const RE_SET: i64 = 2;
const OTHER: i64 = 0;

fn acquired(settings: &Arc<Settings>, t0: Instant) -> Lock {
    let mut acquire = Acquisition::new(
        Arc::clone(settings),
        b"kept",
        settings.default_ttl(),
        Attempts::Once,
        t0,
        StdRng::seed_from_u64(9),
    );
    let requests: Vec<_> = std::iter::from_fn(|| acquire.poll_request()).collect();
    for request in &requests {
        acquire.handle_reply(Reply::to(request, Ok(Response::Int(1))), t0 + MS);
    }
    match acquire.poll_event() {
        Some(AcquireEvent::Acquired(lock)) => lock,
        other => panic!("expected the lock, got {other:?}"),
    }
}

fn drain(ext: &mut Extension) -> Vec<Request> {
    std::iter::from_fn(|| ext.poll_request()).collect()
}

/// Extends a freshly acquired lock on `n` nodes; `answers[i]` is node i's
/// reply (`None`: it never answers). Returns the outcome once decided, after
/// at most the per-node timeout, and the requests queued with it.
fn extend(
    n: usize,
    answers: &[Option<i64>],
) -> (Result<redlock_core::Extended, ExtendError>, Vec<Request>) {
    let settings = sim::settings(n, Duration::from_secs(1), 20 * MS);
    let t0 = Instant::now();
    let mut lock = acquired(&settings, t0);
    let now = t0 + 100 * MS;
    let mut ext = lock.extend(lock.ttl(), now).unwrap();
    let requests = drain(&mut ext);
    for (request, answer) in requests.iter().zip(answers) {
        if let Some(code) = answer {
            ext.handle_reply(Reply::to(request, Ok(Response::Int(*code))), now + MS);
        }
        if let Some(outcome) = ext.poll_event() {
            let releases = drain(&mut ext);
            assert!(
                releases.iter().all(|r| r.value == *lock.value()),
                "only our value"
            );
            return (outcome, releases);
        }
    }
    ext.handle_timeout(now + 20 * MS);
    let outcome = ext.poll_event().expect("decided at the per-node timeout");
    (outcome, drain(&mut ext))
}

#[test]
fn a_minority_restarted_empty_is_re_set_and_the_lock_kept() {
    // One of three, the others still ours.
    let (outcome, releases) = extend(3, &[Some(STILL_OURS), Some(RE_SET), Some(STILL_OURS)]);
    assert_eq!(outcome.unwrap().restored, 1);
    assert!(releases.is_empty());
    // One of three restarted empty and another down: our value may still be
    // on the silent node, so the lock never ended.
    let (outcome, releases) = extend(3, &[Some(STILL_OURS), Some(RE_SET), None]);
    assert_eq!(outcome.unwrap().restored, 1);
    assert!(releases.is_empty());
    // Two of five.
    let (outcome, _) = extend(
        5,
        &[
            Some(RE_SET),
            Some(STILL_OURS),
            Some(RE_SET),
            Some(STILL_OURS),
            Some(STILL_OURS),
        ],
    );
    assert_eq!(outcome.unwrap().restored, 2);
}

#[test]
fn a_value_released_on_a_quorum_is_lost_and_not_re_created() {
    // An operator's `release --value` on every node: each node re-set the
    // key, and the core calls the lock gone at the second answer.
    for answers in [
        [Some(RE_SET), Some(RE_SET), Some(RE_SET)],
        [Some(RE_SET), Some(RE_SET), None],
        [Some(STILL_OURS), Some(RE_SET), Some(RE_SET)],
    ] {
        let (outcome, releases) = extend(3, &answers);
        let Err(error @ ExtendError::Gone { spare: 1, .. }) = &outcome else {
            panic!("{answers:?}: expected Gone, got {outcome:?}");
        };
        assert!(error.is_lost());
        assert!(error.to_string().contains("sim-1 (missing)"), "{error}");
        // Our value is released on every node, after the extend there.
        assert_eq!(releases.len(), 3, "{answers:?}");
        assert!(releases.iter().all(|r| r.command == Command::Release));
    }
    // Three of five.
    let (outcome, releases) = extend(
        5,
        &[
            Some(RE_SET),
            Some(STILL_OURS),
            Some(RE_SET),
            Some(STILL_OURS),
            Some(RE_SET),
        ],
    );
    assert!(
        matches!(outcome, Err(ExtendError::Gone { spare: 2, .. })),
        "{outcome:?}"
    );
    assert_eq!(releases.len(), 5);
    // One node: its only key missing means the lock had ended.
    let (outcome, releases) = extend(1, &[Some(RE_SET)]);
    assert!(
        matches!(outcome, Err(ExtendError::Gone { spare: 0, .. })),
        "{outcome:?}"
    );
    assert_eq!(releases.len(), 1);
}

#[test]
fn missing_and_taken_nodes_add_up() {
    // Missing on one node, another owner on another: our value is on one of
    // three at most.
    let (outcome, releases) = extend(3, &[Some(RE_SET), Some(OTHER), Some(STILL_OURS)]);
    assert!(
        matches!(outcome, Err(ExtendError::Gone { .. })),
        "{outcome:?}"
    );
    assert_eq!(releases.len(), 3);
    // Held by others on a quorum: Lost, as before, and our value (wherever it
    // is left) released.
    let (outcome, releases) = extend(3, &[Some(OTHER), Some(OTHER), None]);
    assert!(
        matches!(outcome, Err(ExtendError::Lost { .. })),
        "{outcome:?}"
    );
    assert_eq!(releases.len(), 3);
}

#[test]
fn a_key_of_another_type_counts_as_gone() {
    let settings = sim::settings(3, Duration::from_secs(1), 20 * MS);
    let t0 = Instant::now();
    let mut lock = acquired(&settings, t0);
    let now = t0 + 100 * MS;
    let mut ext = lock.extend(lock.ttl(), now).unwrap();
    let requests = drain(&mut ext);
    let wrong = NodeError::new(NodeErrorKind::WrongType, "WRONGTYPE ...");
    ext.handle_reply(Reply::to(&requests[0], Err(wrong)), now + MS);
    ext.handle_reply(Reply::to(&requests[1], Ok(Response::Int(RE_SET))), now + MS);
    assert!(matches!(
        ext.poll_event(),
        Some(Err(ExtendError::Gone { .. }))
    ));
}

#[test]
fn too_few_answers_with_nothing_gone_is_no_quorum_and_releases_nothing() {
    let (outcome, releases) = extend(3, &[Some(STILL_OURS), None, None]);
    assert!(
        matches!(outcome, Err(ExtendError::NoQuorum { .. })),
        "{outcome:?}"
    );
    assert!(releases.is_empty());
}
