//! The votes a decision carries tell the per-node story: what each node
//! answered, how many said yes, held the key for another owner or failed,
//! which round they belong to, and how long the round took to decide.
//! (Written against mutants of `Votes`' accessors that `make mutants` found
//! surviving: the errors' messages read them, but no test did.)

mod support;

use redlock_core::Machine;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::StdRng;
use redlock_core::{
    AcquireError, AcquireEvent, Acquisition, Attempts, Config, NodeError, NodeErrorKind, NodeId,
    NodeVote, Reply, Request, Response, Settings,
};
use support::{MS, drain};

fn settings() -> Arc<Settings> {
    Arc::new(
        Config::new(["a", "b", "c"])
            .ttl(Duration::from_secs(1))
            .node_timeout(20 * MS)
            .validate()
            .unwrap(),
    )
}

fn start(settings: &Arc<Settings>, t0: Instant) -> (Acquisition<StdRng>, Vec<Request>) {
    let mut acquire = Acquisition::new(
        Arc::clone(settings),
        b"story",
        settings.default_ttl(),
        Attempts::Once,
        t0,
        StdRng::seed_from_u64(11),
    );
    let requests = drain(&mut acquire);
    (acquire, requests)
}

#[test]
fn a_won_round_tells_each_nodes_answer_its_round_and_its_duration() {
    let settings = settings();
    let t0 = Instant::now();
    let (mut acquire, requests) = start(&settings, t0);
    acquire.handle_reply(Reply::to(&requests[0], Ok(Response::Int(1))), t0 + MS);
    acquire.handle_reply(
        Reply::to(&requests[1], Ok(Response::Data(b"other".to_vec()))),
        t0 + 2 * MS,
    );
    acquire.handle_reply(Reply::to(&requests[2], Ok(Response::Int(1))), t0 + 3 * MS);
    let Some(AcquireEvent::Acquired(lock)) = acquire.poll_event() else {
        panic!("two of three said yes: the lock is ours");
    };
    let votes = lock.votes();
    assert_eq!(votes.round(), requests[0].round);
    assert_eq!(votes.elapsed(), 3 * MS, "decided by the third answer");
    assert_eq!(votes.get(NodeId(0)), Some(&NodeVote::Granted));
    assert!(matches!(
        votes.get(NodeId(1)),
        Some(NodeVote::HeldByOther(_))
    ));
    assert_eq!(votes.get(NodeId(2)), Some(&NodeVote::Granted));
    assert_eq!(votes.get(NodeId(3)), None, "there is no fourth node");
    assert_eq!(
        (votes.granted(), votes.held_by_other(), votes.failed()),
        (2, 1, 0)
    );
}

#[test]
fn a_lost_round_counts_the_holders() {
    let settings = settings();
    let t0 = Instant::now();
    let (mut acquire, requests) = start(&settings, t0);
    for (at, request) in (1..).zip(&requests[..2]) {
        acquire.handle_reply(
            Reply::to(request, Ok(Response::Data(b"other".to_vec()))),
            t0 + at * MS,
        );
    }
    let Some(AcquireEvent::Failed(error)) = acquire.poll_event() else {
        panic!("two holders out of three: no quorum possible");
    };
    assert!(matches!(error, AcquireError::Held { .. }), "{error}");
    let votes = error.votes().expect("a lost round carries its votes");
    assert_eq!(votes.round(), requests[0].round);
    assert_eq!(votes.elapsed(), 2 * MS);
    assert_eq!(
        (votes.granted(), votes.held_by_other(), votes.failed()),
        (0, 2, 0)
    );
    assert_eq!(votes.get(NodeId(2)), Some(&NodeVote::Pending));
}

#[test]
fn a_round_lost_to_failures_counts_them_apart_from_holders() {
    let settings = settings();
    let t0 = Instant::now();
    let (mut acquire, requests) = start(&settings, t0);
    acquire.handle_reply(
        Reply::to(
            &requests[0],
            Err(NodeError::new(NodeErrorKind::Connection, "refused")),
        ),
        t0 + MS,
    );
    acquire.handle_timeout(t0 + 20 * MS);
    let Some(AcquireEvent::Failed(error)) = acquire.poll_event() else {
        panic!("nobody answered yes within the timeout");
    };
    assert!(matches!(error, AcquireError::NoQuorum { .. }), "{error}");
    let votes = error.votes().expect("a lost round carries its votes");
    assert_eq!(votes.elapsed(), 20 * MS, "decided at the per-node timeout");
    assert_eq!(
        (votes.granted(), votes.held_by_other(), votes.failed()),
        (0, 0, 3)
    );
}

#[test]
fn a_round_decided_without_a_node_says_it_had_not_answered() {
    // Two nodes fail at once: no quorum is possible, and the round ends
    // before the third, which is up, answers. It must not read as a refusal.
    let settings = settings();
    let t0 = Instant::now();
    let (mut acquire, requests) = start(&settings, t0);
    for request in &requests[..2] {
        acquire.handle_reply(
            Reply::to(
                request,
                Err(NodeError::new(NodeErrorKind::Connection, "refused")),
            ),
            t0 + MS,
        );
    }
    let Some(AcquireEvent::Failed(error)) = acquire.poll_event() else {
        panic!("two of three failed: no quorum");
    };
    let AcquireError::NoQuorum { votes, .. } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(
        (votes.granted(), votes.failed(), votes.pending()),
        (0, 2, 1)
    );
    let message = error.to_string();
    assert!(
        message.contains("0 of 3 nodes granted, quorum 2, 1 not waited for"),
        "{message}"
    );
}
