//! Which missing keys an extension sets again: only after a quorum of nodes
//! confirmed that they still hold our value (a minority restarted empty).
//! When our value is gone from more nodes than a quorum can spare (released
//! by its value, for example by an operator), the lock is lost, nothing is
//! set again and our value is released where it is left; and when too few
//! nodes confirm, nothing is set again either.

mod sim;
mod support;

use redlock_core::Machine;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::StdRng;
use redlock_core::{
    Acquisition, Attempts, Command, ExtendError, Lock, NodeError, NodeErrorKind, Reply, Request,
    Response, Settings,
};
use support::{MS, drain, expect_lock, yes};

const STILL_OURS: i64 = 1;
const MISSING: i64 = -1;
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
    for request in drain(&mut acquire) {
        acquire.handle_reply(yes(&request), t0 + MS);
    }
    expect_lock(&mut acquire)
}

/// Extends a freshly acquired lock on `n` nodes; `answers[i]` is node i's
/// reply (`None`: it never answers). Returns the outcome once decided, after
/// at most the per-node timeout, and the requests queued with it (restores
/// after a success, releases after a loss).
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
            let queued = drain(&mut ext);
            assert!(
                queued.iter().all(|r| r.value == *lock.value()),
                "only our value"
            );
            return (outcome, queued);
        }
    }
    ext.handle_timeout(now + 20 * MS);
    let outcome = ext.poll_event().expect("decided at the per-node timeout");
    (outcome, drain(&mut ext))
}

#[test]
fn a_minority_restarted_empty_is_restored_once_a_quorum_confirmed() {
    // One of three, the others still ours: extended, and node 1 alone is
    // sent a restore.
    let (outcome, queued) = extend(3, &[Some(STILL_OURS), Some(MISSING), Some(STILL_OURS)]);
    assert_eq!(outcome.unwrap().restored, 1);
    assert_eq!(queued.len(), 1);
    assert_eq!(queued[0].node.0, 1);
    assert!(matches!(queued[0].command, Command::Restore { .. }));
    // Two of five.
    let (outcome, queued) = extend(
        5,
        &[
            Some(MISSING),
            Some(STILL_OURS),
            Some(MISSING),
            Some(STILL_OURS),
            Some(STILL_OURS),
        ],
    );
    assert_eq!(outcome.unwrap().restored, 2);
    let restored: Vec<usize> = queued.iter().map(|r| r.node.0).collect();
    assert_eq!(restored, [0, 2]);
}

#[test]
fn a_silent_node_is_no_confirmation_and_nothing_is_set_again() {
    // The case an operator's release on a bare quorum looks like: it deleted
    // our value on nodes 0 and 1 while node 2 was out of its reach; node 0
    // is now silent. One missing node is within what a quorum can spare, but
    // only one node confirmed: our value may be on that one alone. Setting
    // node 1 again would bring the released lock back; a keep-alive instead
    // retries, and finds the truth when node 0 answers.
    let (outcome, queued) = extend(3, &[None, Some(MISSING), Some(STILL_OURS)]);
    assert!(
        matches!(outcome, Err(ExtendError::NoQuorum { .. })),
        "{outcome:?}"
    );
    assert!(queued.is_empty(), "nothing set again, nothing released");
    // The same round with node 0 answering: the lock is gone.
    let (outcome, queued) = extend(3, &[Some(MISSING), Some(MISSING), Some(STILL_OURS)]);
    assert!(
        matches!(outcome, Err(ExtendError::Gone { .. })),
        "{outcome:?}"
    );
    assert!(queued.iter().all(|r| r.command == Command::Release));
}

#[test]
fn a_value_released_on_a_quorum_is_lost_and_not_re_created() {
    // An operator's `release --value` on every node: the core calls the
    // lock gone at the second missing answer.
    for answers in [
        [Some(MISSING), Some(MISSING), Some(MISSING)],
        [Some(MISSING), Some(MISSING), None],
        [Some(STILL_OURS), Some(MISSING), Some(MISSING)],
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
        // As the script, never a plain `DELIFEQ`: waiters likely marked our
        // value, which `DELIFEQ` leaves, and the script would then follow.
        assert!(releases.iter().all(|r| !r.native), "{answers:?}");
    }
    // Three of five.
    let (outcome, releases) = extend(
        5,
        &[
            Some(MISSING),
            Some(STILL_OURS),
            Some(MISSING),
            Some(STILL_OURS),
            Some(MISSING),
        ],
    );
    assert!(
        matches!(outcome, Err(ExtendError::Gone { spare: 2, .. })),
        "{outcome:?}"
    );
    assert_eq!(releases.len(), 5);
    // One node: its only key missing means the lock had ended.
    let (outcome, releases) = extend(1, &[Some(MISSING)]);
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
    let (outcome, releases) = extend(3, &[Some(MISSING), Some(OTHER), Some(STILL_OURS)]);
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
    ext.handle_reply(
        Reply::to(&requests[1], Ok(Response::Int(MISSING))),
        now + MS,
    );
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
