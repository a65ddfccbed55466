//! A node that stops answering is known slow after `SLOW_AFTER` overdue
//! requests in a row: new acquires skip it (but for one probe per
//! interval), what must arrive still goes, its first answer trusts it again,
//! and a lock whose acquire skipped it owes it no release.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::StdRng;
use redlock_core::{
    AcquireEvent, Acquisition, Attempts, Command, Config, HealthChange, Machine, NodeErrorKind,
    NodeHealth, NodeId, NodeVote, Reply, Request, Response, SLOW_AFTER, Settings,
};

const MS: Duration = Duration::from_millis(1);

fn settings() -> Arc<Settings> {
    Arc::new(
        Config::new(["a", "b", "c", "d", "e"])
            .validate()
            .expect("valid settings"),
    )
}

/// A single attempt at `job`, its lock values drawn from `seed`.
fn acquisition(settings: &Arc<Settings>, t0: Instant, seed: u64) -> Acquisition<StdRng> {
    Acquisition::new(
        Arc::clone(settings),
        b"job",
        settings.default_ttl(),
        Attempts::Once,
        t0,
        StdRng::seed_from_u64(seed),
    )
}

/// A single fenced attempt at `job`, its lock values drawn from `seed`.
fn fenced(settings: &Arc<Settings>, t0: Instant, seed: u64) -> Acquisition<StdRng> {
    Acquisition::fenced(
        Arc::clone(settings),
        b"job",
        settings.default_ttl(),
        Attempts::Once,
        t0,
        StdRng::seed_from_u64(seed),
    )
}

/// The nodes of the requests `acquire` queued, every one a withdraw.
fn withdrawn_from(acquire: &mut Acquisition<StdRng>) -> Vec<usize> {
    let withdraws: Vec<_> = std::iter::from_fn(|| acquire.poll_request()).collect();
    assert!(withdraws.iter().all(|r| r.command == Command::Withdraw));
    withdraws.iter().map(|r| r.node.0).collect()
}

/// One request of `command` to node 4, for `admit`.
fn request(settings: &Arc<Settings>, command: Command, t0: Instant) -> Request {
    let mut acquire = acquisition(settings, t0, 1);
    let request = std::iter::from_fn(|| acquire.poll_request())
        .find(|request| request.node == NodeId(4))
        .expect("a request to every node");
    Request { command, ..request }
}

fn slow(settings: &Arc<Settings>, t0: Instant) -> NodeHealth {
    let mut health = NodeHealth::for_node(settings, NodeId(4));
    for _ in 1..SLOW_AFTER {
        assert_eq!(health.handle_overdue(t0), None, "not yet");
    }
    assert_eq!(
        health.handle_overdue(t0),
        Some(HealthChange::Slow {
            node: NodeId(4),
            probe_every: settings.node_timeout() * 4
        })
    );
    health
}

#[test]
fn a_slow_node_of_a_client_is_probed_every_four_node_timeouts() {
    let settings = settings();
    let health = NodeHealth::for_node(&settings, NodeId(3));
    assert_eq!(health.node(), NodeId(3));
    assert_eq!(health.probe_every(), settings.node_timeout() * 4);
}

#[test]
fn an_answer_between_overdue_requests_starts_the_count_again() {
    let settings = settings();
    let t0 = Instant::now();
    let mut health = NodeHealth::for_node(&settings, NodeId(4));
    for _ in 0..10 {
        for _ in 1..SLOW_AFTER {
            assert_eq!(health.handle_overdue(t0), None);
        }
        assert_eq!(health.handle_answer(t0), None, "still trusted");
    }
    assert!(!health.is_slow());
}

#[test]
fn a_slow_node_is_skipped_but_probed_and_trusted_again_when_it_answers() {
    let settings = settings();
    let t0 = Instant::now();
    let mut health = slow(&settings, t0);
    let acquire = request(
        &settings,
        Command::Acquire {
            ttl: settings.default_ttl(),
        },
        t0,
    );
    let every = health.probe_every();
    assert!(!health.admit(&acquire, t0), "skipped at once");
    assert!(!health.admit(&acquire, t0 + every - MS), "until the probe");
    assert!(health.admit(&acquire, t0 + every), "one probe");
    assert!(!health.admit(&acquire, t0 + every), "only one");
    assert!(health.admit(&acquire, t0 + 2 * every), "the next probe");
    // Further overdue requests change nothing.
    assert_eq!(health.handle_overdue(t0 + 3 * every), None);
    assert!(health.is_slow());
    assert_eq!(
        health.handle_answer(t0 + 3 * every),
        Some(HealthChange::Trusted {
            node: NodeId(4),
            after: 3 * every
        })
    );
    assert!(
        health.admit(&acquire, t0 + 3 * every),
        "trusted: always sent"
    );
}

#[test]
fn what_must_arrive_and_what_only_reads_always_goes() {
    let settings = settings();
    let t0 = Instant::now();
    let mut health = slow(&settings, t0);
    for command in [
        Command::Release,
        Command::Withdraw,
        Command::Leave,
        Command::Inspect,
        Command::ReadLeader,
    ] {
        assert!(
            health.admit(&request(&settings, command, t0), t0),
            "{command:?}"
        );
    }
    let extend = Command::Extend {
        ttl: settings.default_ttl(),
    };
    assert!(!health.admit(&request(&settings, extend, t0), t0));
}

#[test]
fn a_lock_whose_acquire_skipped_a_node_owes_it_no_release() {
    let settings = settings();
    let t0 = Instant::now();
    let mut acquire = acquisition(&settings, t0, 5);
    let requests: Vec<_> = std::iter::from_fn(|| acquire.poll_request()).collect();
    // Node e is known slow: the driver answers for it. The others grant.
    acquire.handle_reply(Reply::skipped(&requests[4]), t0);
    for request in &requests[..4] {
        acquire.handle_reply(Reply::to(request, Ok(Response::Int(1))), t0 + MS);
    }
    let Some(AcquireEvent::Acquired(mut lock)) = acquire.poll_event() else {
        panic!("four of five granted");
    };
    assert_eq!(lock.untouched(), &[NodeId(4)]);
    let failure = lock.votes().get(NodeId(4)).cloned();
    assert!(
        matches!(failure, Some(NodeVote::Failed(ref e)) if e.kind == NodeErrorKind::Slow),
        "{failure:?}"
    );

    let mut release = lock.release(t0 + 2 * MS);
    let sent: Vec<_> = std::iter::from_fn(|| release.poll_request()).collect();
    assert_eq!(sent.len(), 4, "node e is not asked");
    assert!(sent.iter().all(|request| request.node != NodeId(4)));
    for request in &sent {
        release.handle_reply(Reply::to(request, Ok(Response::Int(1))), t0 + 3 * MS);
    }
    let report = release.poll_event().expect("decided");
    assert_eq!(report.votes().get(NodeId(4)), Some(&NodeVote::NotAsked));
    assert!(report.frees_lock(), "{report}");
    assert!(report.to_string().contains("e: not asked"), "{report}");
}

#[test]
fn a_failed_attempt_withdraws_nothing_from_a_node_it_skipped() {
    let settings = settings();
    let t0 = Instant::now();
    let mut acquire = acquisition(&settings, t0, 6);
    let requests: Vec<_> = std::iter::from_fn(|| acquire.poll_request()).collect();
    acquire.handle_reply(Reply::skipped(&requests[0]), t0);
    acquire.handle_reply(Reply::skipped(&requests[1]), t0);
    for request in &requests[2..] {
        acquire.handle_reply(
            Reply::to(request, Ok(Response::Data(b"other".to_vec()))),
            t0,
        );
    }
    assert_eq!(withdrawn_from(&mut acquire), [2, 3, 4]);
}

/// A fenced attempt whose token round skips a node (known slow since its
/// lock round) did set its value there: its failure withdraws it there too.
/// Found by the model check (`verify/`, fenced with one request skipped).
#[test]
fn a_failed_fenced_attempt_withdraws_where_only_its_token_was_skipped() {
    let settings = settings();
    let t0 = Instant::now();
    let mut acquire = fenced(&settings, t0, 7);
    let requests: Vec<_> = std::iter::from_fn(|| acquire.poll_request()).collect();
    // Nodes a, b, c set our value; d and e hold another one.
    for request in &requests[..3] {
        let set = Response::Array(vec![Response::Int(1), Response::Int(0)]);
        acquire.handle_reply(Reply::to(request, Ok(set)), t0);
    }
    for request in &requests[3..] {
        let other = Response::Data(b"other".to_vec());
        acquire.handle_reply(Reply::to(request, Ok(other)), t0);
    }
    let tokens: Vec<_> = std::iter::from_fn(|| acquire.poll_request()).collect();
    assert!(
        tokens
            .iter()
            .all(|r| matches!(r.command, Command::StoreToken { .. })),
        "{tokens:?}"
    );
    // Now a and b are known slow: their tokens are skipped, and c alone
    // stores it: no quorum.
    for request in &tokens {
        let reply = match request.node.0 {
            0 | 1 => Reply::skipped(request),
            2 => Reply::to(request, Ok(Response::Int(1))),
            _ => Reply::to(request, Ok(Response::Int(0))),
        };
        acquire.handle_reply(reply, t0 + MS);
    }
    assert!(
        matches!(acquire.poll_event(), Some(AcquireEvent::Failed(_))),
        "the token on one node of five"
    );
    assert_eq!(
        withdrawn_from(&mut acquire),
        [0, 1, 2, 3, 4],
        "a and b got our value"
    );
}

/// A node that does not answer within the round may have set our value:
/// the failed attempt withdraws it there too, unlike on a node it skipped.
#[test]
fn a_failed_attempt_withdraws_from_a_node_that_timed_out() {
    let settings = settings();
    let t0 = Instant::now();
    let mut acquire = acquisition(&settings, t0, 8);
    let requests: Vec<_> = std::iter::from_fn(|| acquire.poll_request()).collect();
    // a never answers, b and c set our value, d and e hold another one.
    for request in &requests[1..3] {
        acquire.handle_reply(Reply::to(request, Ok(Response::Int(1))), t0);
    }
    for request in &requests[3..] {
        let other = Response::Data(b"other".to_vec());
        acquire.handle_reply(Reply::to(request, Ok(other)), t0);
    }
    let deadline = acquire
        .poll_timeout()
        .expect("a has until the round's deadline");
    acquire.handle_timeout(deadline);
    assert!(matches!(
        acquire.poll_event(),
        Some(AcquireEvent::Failed(_))
    ));
    assert_eq!(
        withdrawn_from(&mut acquire),
        [0, 1, 2, 3, 4],
        "a may have set our value"
    );
}

/// A fenced attempt whose lock round skipped a node (known slow) and whose
/// token round then fails: nothing of ours reached that node, so nothing
/// is withdrawn there.
#[test]
fn a_failed_fenced_attempt_withdraws_nothing_where_its_lock_round_skipped() {
    let settings = settings();
    let t0 = Instant::now();
    let mut acquire = fenced(&settings, t0, 9);
    let requests: Vec<_> = std::iter::from_fn(|| acquire.poll_request()).collect();
    // e is known slow; a, b, c set our value; d holds another one.
    acquire.handle_reply(Reply::skipped(&requests[4]), t0);
    for request in &requests[..3] {
        let set = Response::Array(vec![Response::Int(1), Response::Int(0)]);
        acquire.handle_reply(Reply::to(request, Ok(set)), t0);
    }
    let other = Response::Data(b"other".to_vec());
    acquire.handle_reply(Reply::to(&requests[3], Ok(other)), t0);
    let tokens: Vec<_> = std::iter::from_fn(|| acquire.poll_request()).collect();
    assert!(
        tokens
            .iter()
            .all(|r| matches!(r.command, Command::StoreToken { .. })),
        "{tokens:?}"
    );
    // The token is refused everywhere: no quorum.
    for request in &tokens {
        acquire.handle_reply(Reply::to(request, Ok(Response::Int(0))), t0 + MS);
    }
    let deadline = acquire.poll_timeout();
    if !matches!(acquire.poll_event(), Some(AcquireEvent::Failed(_))) {
        acquire.handle_timeout(deadline.expect("undecided, it has a deadline"));
        assert!(matches!(
            acquire.poll_event(),
            Some(AcquireEvent::Failed(_))
        ));
    }
    assert_eq!(
        withdrawn_from(&mut acquire),
        [0, 1, 2, 3],
        "e never saw our value"
    );
}
