//! A key of another type (a list, a hash, ...) at the lock's key: a permanent
//! error of its own, decided by the core from the nodes' `WRONGTYPE` replies,
//! never retried and never taken for nodes that are down.

mod sim;
mod support;

use redlock_core::Machine;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::StdRng;
use redlock_core::{
    AcquireError, AcquireEvent, Acquisition, Attempts, Command, NodeError, NodeErrorKind, Reply,
    Request, Response, Settings,
};
use support::{MS, drain_but_marks, released};

fn start(settings: &Arc<Settings>, t0: Instant) -> Acquisition<StdRng> {
    Acquisition::new(
        Arc::clone(settings),
        b"queue",
        settings.default_ttl(),
        Attempts::Retry,
        t0,
        StdRng::seed_from_u64(7),
    )
}

/// What a node answers when the script's `GET` meets a list (Redis 7).
fn wrong_type(request: &Request) -> Reply {
    let code = "WRONGTYPE";
    let error = NodeError::new(
        NodeErrorKind::from_error_code(code),
        "WRONGTYPE Operation against a key holding the wrong kind of value script: 1f2e, on @user_script:1.",
    );
    Reply::to(request, Err(error))
}

#[test]
fn error_codes_are_classified_exactly() {
    assert_eq!(
        NodeErrorKind::from_error_code("WRONGTYPE"),
        NodeErrorKind::WrongType
    );
    assert_eq!(
        NodeErrorKind::from_error_code("NOAUTH"),
        NodeErrorKind::Auth
    );
    assert_eq!(
        NodeErrorKind::from_error_code("WRONGPASS"),
        NodeErrorKind::Auth
    );
    // An ACL user without rights on a key or channel the request names.
    assert_eq!(
        NodeErrorKind::from_error_code("NOPERM"),
        NodeErrorKind::NoPermission
    );
    // A script the node does not know: the client sends it again in full.
    assert_eq!(
        NodeErrorKind::from_error_code("NOSCRIPT"),
        NodeErrorKind::NoScript
    );
    // Only the code counts, not words further on in the message.
    for code in [
        "ERR",
        "OOM",
        "LOADING",
        "READONLY",
        "NOSCRIPTX",
        "WRONGTYPEX",
        "",
    ] {
        assert_eq!(
            NodeErrorKind::from_error_code(code),
            NodeErrorKind::Server,
            "{code}"
        );
    }
}

#[test]
fn a_key_of_another_type_on_every_node_fails_at_once_without_retry() {
    let settings = sim::settings(3, Duration::from_secs(1), 20 * MS);
    let t0 = Instant::now();
    let mut acquire = start(&settings, t0);
    let requests = drain_but_marks(&mut acquire);
    // Two answers decide it: the third node cannot make a quorum alone.
    acquire.handle_reply(wrong_type(&requests[0]), t0 + MS);
    assert!(acquire.poll_event().is_none());
    acquire.handle_reply(wrong_type(&requests[1]), t0 + MS);
    let Some(AcquireEvent::Failed(error)) = acquire.poll_event() else {
        panic!("expected a final failure, not a retry");
    };
    let AcquireError::WrongType {
        keys,
        votes,
        attempts,
    } = &error
    else {
        panic!("expected WrongType, got {error:?}");
    };
    assert_eq!(keys.len(), 1);
    assert_eq!(keys[0].as_bytes(), b"queue");
    assert_eq!(*attempts, 1);
    assert_eq!(votes.failed(), 2);
    assert!(error.is_wrong_type());
    assert!(!error.is_held_by_other());
    let message = error.to_string();
    assert!(message.contains("the key queue"), "{message}");
    assert!(message.contains("another type"), "{message}");
    assert!(message.contains("sim-0, sim-1"), "{message}");
    // The usual clean-up on every node (the scripts write nothing to a key
    // of another type), and nothing after it.
    let releases = drain_but_marks(&mut acquire);
    assert_eq!(releases.len(), 3);
    assert!(releases.iter().all(|r| r.command == Command::Withdraw));
    assert!(acquire.is_done());
    assert_eq!(acquire.poll_timeout(), None);
    assert_eq!(acquire.attempts(), 1);
}

#[test]
fn a_key_of_another_type_on_a_minority_is_only_a_failed_vote() {
    let settings = sim::settings(5, Duration::from_secs(1), 20 * MS);
    let t0 = Instant::now();

    // Two of five: the other three still grant the lock.
    let mut acquire = start(&settings, t0);
    let requests = drain_but_marks(&mut acquire);
    acquire.handle_reply(wrong_type(&requests[0]), t0 + MS);
    acquire.handle_reply(wrong_type(&requests[1]), t0 + MS);
    for request in &requests[2..] {
        acquire.handle_reply(Reply::to(request, Ok(Response::Int(1))), t0 + MS);
    }
    assert!(matches!(
        acquire.poll_event(),
        Some(AcquireEvent::Acquired(_))
    ));

    // Two of five and one node down: no quorum this time, but the key of
    // another type alone does not rule one out, so the acquire retries.
    let mut acquire = start(&settings, t0);
    let requests = drain_but_marks(&mut acquire);
    acquire.handle_reply(wrong_type(&requests[0]), t0 + MS);
    acquire.handle_reply(wrong_type(&requests[1]), t0 + MS);
    acquire.handle_reply(
        Reply::to(
            &requests[2],
            Err(NodeError::new(NodeErrorKind::Connection, "refused")),
        ),
        t0 + MS,
    );
    let Some(AcquireEvent::AttemptFailed { error, .. }) = acquire.poll_event() else {
        panic!("expected a retry");
    };
    assert!(matches!(error, AcquireError::NoQuorum { .. }), "{error:?}");
    assert!(!acquire.is_done());
}

#[test]
fn a_release_notice_attempt_that_meets_another_type_ends_the_acquire() {
    let settings = sim::settings(3, Duration::from_secs(1), 20 * MS);
    let t0 = Instant::now();
    let mut acquire = start(&settings, t0);
    // First attempt: held by another owner, so the acquire waits.
    for request in drain_but_marks(&mut acquire) {
        acquire.handle_reply(
            Reply::to(&request, Ok(Response::Data(b"other".to_vec()))),
            t0 + MS,
        );
    }
    assert!(matches!(
        acquire.poll_event(),
        Some(AcquireEvent::AttemptFailed { .. })
    ));
    drain_but_marks(&mut acquire);
    // The holder released and someone put a list there: the extra attempt
    // ends the acquire instead of going back to waiting.
    released(&mut acquire, t0 + 2 * MS);
    let requests = drain_but_marks(&mut acquire);
    assert_eq!(requests.len(), 3);
    for request in &requests {
        acquire.handle_reply(wrong_type(request), t0 + 3 * MS);
    }
    assert!(matches!(
        acquire.poll_event(),
        Some(AcquireEvent::Failed(AcquireError::WrongType { .. }))
    ));
    assert!(acquire.is_done());
}

#[test]
fn a_multi_resource_lock_names_all_its_keys() {
    // The scripts do not tell which of the keys has another type: the
    // error names every key the lock covers.
    let settings = sim::settings(3, Duration::from_secs(1), 20 * MS);
    let t0 = Instant::now();
    let mut acquire = Acquisition::with_spec(
        Arc::clone(&settings),
        redlock_core::LockSpec::Multi(&[b"orders", b"invoices"]),
        settings.default_ttl(),
        Attempts::Retry,
        t0,
        StdRng::seed_from_u64(7),
    )
    .unwrap();
    for request in drain_but_marks(&mut acquire) {
        acquire.handle_reply(wrong_type(&request), t0 + MS);
    }
    let Some(AcquireEvent::Failed(AcquireError::WrongType { keys, .. })) = acquire.poll_event()
    else {
        panic!("expected a wrong-type failure");
    };
    let keys: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
    assert_eq!(keys, [b"invoices".as_slice(), b"orders"]);
}
