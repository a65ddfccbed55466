//! The adapter's error messages, read as a user reads them: one short line,
//! printed once along the chain, naming the class and the nodes; and the
//! predicates that tell the classes apart. No server: the errors come from a
//! core acquisition fed made-up replies.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::StdRng;
use redlock_tokio::core::{
    AcquireEvent, Acquisition, Attempts, Config, Key, Machine, NodeError, NodeErrorKind, Response,
    Settings,
};
use redlock_tokio::{AcquireError, ConfigError, Error, ExtendError, LossReason};

const MS: Duration = Duration::from_millis(1);

/// What `anyhow`'s `{:#}` prints: every error of the chain, joined.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Long node names, as in a real deployment.
fn settings(n: usize, ttl: Duration, node_timeout: Duration) -> Arc<Settings> {
    let nodes =
        (0..n).map(|i| format!("redis-lock-master-{i}.eu-west-1.internal.example.com:6379/0"));
    Arc::new(
        Config::new(nodes)
            .ttl(ttl)
            .node_timeout(node_timeout)
            .validate()
            .unwrap(),
    )
}

/// One attempt whose node `i` answers `reply(i)` at `t0 + after`.
fn attempt(
    settings: &Arc<Settings>,
    after: Duration,
    reply: impl Fn(usize) -> Result<Response, NodeError>,
) -> AcquireError {
    let t0 = Instant::now();
    let mut acquire = Acquisition::new(
        Arc::clone(settings),
        b"invoice-42",
        settings.default_ttl(),
        Attempts::Once,
        t0,
        StdRng::seed_from_u64(7),
    );
    let requests: Vec<_> = std::iter::from_fn(|| acquire.poll_request()).collect();
    for request in &requests {
        acquire.handle_reply(
            redlock_tokio::core::Reply::to(request, reply(request.node.0)),
            t0 + after,
        );
    }
    acquire.handle_timeout(t0 + Duration::from_secs(1));
    match acquire.poll_event() {
        Some(AcquireEvent::Failed(error)) => error,
        other => panic!("expected a failure, got {other:?}"),
    }
}

/// What a node that is down says, in the adapter's words.
fn down() -> NodeError {
    NodeError::new(
        NodeErrorKind::Connection,
        "not connected; last error: Connection refused (os error 111)",
    )
}

fn common_errors() -> Vec<Error> {
    let five = settings(5, Duration::from_secs(10), 50 * MS);
    let held = attempt(&five, MS, |i| {
        if i < 3 {
            Ok(Response::Data(b"0123456789abcdef0123456789abcdef".to_vec()))
        } else {
            Ok(Response::Int(1))
        }
    });
    let no_quorum = attempt(&five, MS, |i| {
        if i == 0 {
            Ok(Response::Int(1))
        } else {
            Err(down())
        }
    });
    // The longest per-node timeout a 100 ms TTL allows (1 ms of validity
    // left, `MIN_VALIDITY`); a reply counts until its timeout is handled.
    let slow = attempt(&settings(3, 100 * MS, 96 * MS), 97 * MS, |_| {
        Ok(Response::Int(1))
    });
    assert!(
        matches!(slow, AcquireError::ValidityExhausted { .. }),
        "{slow:?}"
    );
    let deadline = AcquireError::DeadlineExceeded {
        deadline: Duration::from_secs(2),
        attempts: 11,
        last: Some(Box::new(no_quorum.clone())),
    };
    let lost = ExtendError::Lost {
        votes: held.votes().unwrap().clone(),
    };
    vec![
        Error::Acquire(held),
        Error::Acquire(no_quorum.clone()),
        Error::Acquire(slow),
        Error::Acquire(deadline),
        Error::Extend(lost.clone()),
        Error::Extend(ExtendError::NoQuorum {
            votes: no_quorum.votes().unwrap().clone(),
        }),
        Error::LockLost {
            key: Key::from("invoice-42"),
            reason: LossReason::ExtendFailed(lost.clone()),
        },
        Error::Proclaim(lost),
        Error::Proclaim(ExtendError::NoQuorum {
            votes: no_quorum.votes().unwrap().clone(),
        }),
        Error::Config(ConfigError::NoNodes),
        Error::Config(ConfigError::DuplicateNode {
            node: "redis-lock-master-0.eu-west-1.internal.example.com:6379/0".into(),
        }),
        Error::Config(ConfigError::TtlBelowDrift {
            ttl: 2 * MS,
            drift: 2 * MS,
        }),
        Error::Auth {
            node: "redis-lock-master-0.eu-west-1.internal.example.com:6379/0".into(),
            error: NodeError::new(
                NodeErrorKind::Auth,
                "WRONGPASS invalid username-password pair or user is disabled.",
            ),
        },
    ]
}

#[test]
fn messages_are_one_short_line_printed_once() {
    for error in common_errors() {
        let text = error.to_string();
        // The longest names one node of 58 characters in full.
        assert!(text.len() <= 220, "{} chars: {text}", text.len());
        assert!(!text.contains('\n'), "{text}");
        // The core error is in the message, so it is not a source too:
        // a chain walk prints every fact once.
        assert!(std::error::Error::source(&error).is_none(), "{text}");
        assert_eq!(chain(&error), text);
    }
}

#[test]
fn messages_name_the_class_and_the_nodes_without_their_words() {
    let errors = common_errors();
    let held = errors[0].to_string();
    assert!(
        held.contains("held by another owner on 3 of 5 nodes"),
        "{held}"
    );
    assert!(held.contains("redis-lock-master-0."), "{held}");
    assert!(held.contains("more"), "{held}");
    let no_quorum = errors[1].to_string();
    assert!(
        no_quorum.contains("1 of 5 nodes granted, quorum 3, 1 not waited for; failed:"),
        "{no_quorum}"
    );
    assert!(no_quorum.contains("unreachable"), "{no_quorum}");
    // The node's own words stay in the votes.
    assert!(!no_quorum.contains("os error"), "{no_quorum}");
    let votes = errors[1].votes().unwrap().to_string();
    assert!(votes.contains("Connection refused"), "{votes}");
    let deadline = errors[3].to_string();
    assert!(deadline.contains("deadline"), "{deadline}");
    assert!(deadline.contains("no quorum"), "{deadline}");
}

#[test]
fn predicates_tell_the_classes_apart() {
    let errors = common_errors();
    let classes: Vec<[bool; 4]> = errors
        .iter()
        .map(|e| {
            [
                e.is_held_by_other(),
                e.is_unavailable(),
                e.is_config(),
                e.is_lock_lost(),
            ]
        })
        .collect();
    let (held, unavailable, config, lost) = (
        [true, false, false, false],
        [false, true, false, false],
        [false, false, true, false],
        [false, false, false, true],
    );
    assert_eq!(
        classes,
        [
            held,
            unavailable,
            unavailable,
            unavailable,
            lost,
            unavailable,
            lost,
            lost,
            unavailable,
            config,
            config,
            config,
            config
        ]
    );
}
