//! The core `Client`: one unit that runs every operation and keeps what no
//! operation owns (requests in flight, node health, what each node is owed,
//! release notices). In virtual time; asserts what it asks to send, in
//! which order, and what it reports.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::StdRng;
use redlock_core::{
    AcquireEvent, Acquisition, Attempts, Client, Command, HealthChange, NodeError, NodeErrorKind,
    NodeId, OpEvent, OpId, Operation, Output, Reply, Request, RequestId, Response, Settings,
};
use support::{MS, three_nodes};

/// Three nodes, a 1 s TTL, a 10 ms per-node timeout, retries every 10 s.
fn settings() -> Arc<Settings> {
    Arc::new(three_nodes(3, Duration::from_secs(10)).validate().unwrap())
}

fn acquire(settings: &Arc<Settings>, attempts: Attempts, now: Instant) -> Operation<StdRng> {
    Operation::Acquire(Box::new(Acquisition::new(
        Arc::clone(settings),
        b"report",
        settings.default_ttl(),
        attempts,
        now,
        StdRng::seed_from_u64(7),
    )))
}

/// What the client asked, split by kind.
#[derive(Default, Debug)]
struct Drained {
    sent: Vec<(RequestId, Request)>,
    forgotten: Vec<RequestId>,
    events: Vec<(OpId, OpEvent, bool)>,
    finished: Vec<Operation<StdRng>>,
    health: Vec<HealthChange>,
    notice_connects: Vec<NodeId>,
    subscribed: Vec<(NodeId, Vec<redlock_core::Key>)>,
    unsubscribed: Vec<(NodeId, Vec<redlock_core::Key>)>,
    connects: Vec<NodeId>,
}

fn drain(client: &mut Client<StdRng>) -> Drained {
    let mut drained = Drained::default();
    while let Some(output) = client.poll_output() {
        match output {
            Output::Transmit { id, request } => drained.sent.push((id, request)),
            Output::Forget(id) => drained.forgotten.push(id),
            Output::Event {
                op,
                event,
                finished,
            } => {
                drained.events.push((op, event, finished.is_some()));
                drained.finished.extend(finished);
            }
            Output::Health(change) => drained.health.push(change),
            Output::ConnectNotices(node) => drained.notice_connects.push(node),
            Output::Subscribe { node, channels } => drained.subscribed.push((node, channels)),
            Output::Unsubscribe { node, channels } => drained.unsubscribed.push((node, channels)),
            Output::Connect(node) => drained.connects.push(node),
            _ => {}
        }
    }
    drained
}

fn answer(
    client: &mut Client<StdRng>,
    sent: &[(RequestId, Request)],
    response: Response,
    now: Instant,
) {
    for (id, request) in sent {
        client.handle_reply(*id, Reply::to(request, Ok(response.clone())), now);
    }
}

/// Runs `test` with `bug` planted on this thread: it must fail.
#[cfg(feature = "planted-bugs")]
fn assert_catches(bug: redlock_core::planted::Bug, test: fn()) {
    redlock_core::planted::set(Some(bug));
    let caught = std::panic::catch_unwind(test);
    redlock_core::planted::set(None);
    assert!(caught.is_err(), "the planted bug {bug:?} went unnoticed");
}

fn broken(request: &Request) -> Reply {
    Reply::to(
        request,
        Err(NodeError::new(
            NodeErrorKind::Connection,
            "connection reset",
        )),
    )
}

/// Grants `client` a lock: every node says yes.
fn granted(
    client: &mut Client<StdRng>,
    settings: &Arc<Settings>,
    now: Instant,
) -> redlock_core::Lock {
    let op = client.start(acquire(settings, Attempts::Once, now), now);
    let out = drain(client);
    answer(client, &out.sent, Response::Int(1), now + MS);
    let out = drain(client);
    match out.events.into_iter().last() {
        Some((whose, OpEvent::Acquire(AcquireEvent::Acquired(lock)), true)) if whose == op => lock,
        other => panic!("not granted: {other:?}"),
    }
}

#[test]
fn an_operation_reports_its_final_event_with_its_machine_and_the_client_is_idle_after() {
    let settings = settings();
    let t0 = Instant::now();
    let mut client = Client::new(Arc::clone(&settings), StdRng::seed_from_u64(0));
    let op = client.start(acquire(&settings, Attempts::Once, t0), t0);
    let out = drain(&mut client);
    assert_eq!(out.sent.len(), 3, "one request per node, sent at start");
    assert!(!client.is_idle());
    answer(&mut client, &out.sent[..2], Response::Int(1), t0 + MS);
    let out = drain(&mut client);
    assert!(
        matches!(&out.events[..], [(whose, OpEvent::Acquire(AcquireEvent::Acquired(_)), true)] if *whose == op)
    );
    assert!(matches!(&out.finished[..], [Operation::Acquire(_)]));
    assert_eq!(client.running(), 0);
    assert!(
        !client.is_idle(),
        "the third node's answer is still awaited"
    );
    // Past its deadline the third request is forgotten: nobody waits for
    // a vote that no longer counts.
    client.handle_timeout(t0 + 10 * MS);
    let out = drain(&mut client);
    assert_eq!(out.forgotten.len(), 1);
    assert!(client.is_idle());
    assert_eq!(client.poll_timeout(), None);
}

#[test]
fn a_node_overdue_three_times_is_known_slow_skipped_and_trusted_at_its_next_answer() {
    let settings = settings();
    let mut now = Instant::now();
    let mut client = Client::new(Arc::clone(&settings), StdRng::seed_from_u64(0));
    let mut changes = Vec::new();
    for _ in 0..3 {
        changes.extend(granted_without(&mut client, &settings, NodeId(2), now));
        now += 20 * MS;
    }
    assert_eq!(
        changes,
        [HealthChange::Slow {
            node: NodeId(2),
            probe_every: settings.node_timeout() * 4
        }],
        "slow at the third miss"
    );
    let op = client.start(acquire(&settings, Attempts::Once, now), now);
    let out = drain(&mut client);
    let nodes: Vec<usize> = out.sent.iter().map(|(_, r)| r.node.0).collect();
    assert_eq!(nodes, [0, 1], "a known slow node is skipped, not sent");
    answer(&mut client, &out.sent, Response::Int(1), now + MS);
    let out = drain(&mut client);
    assert!(
        matches!(&out.events[..], [(whose, OpEvent::Acquire(AcquireEvent::Acquired(_)), true)] if *whose == op)
    );
    // One probe per four per-node timeouts: its answer trusts the node again.
    now += 40 * MS;
    client.start(acquire(&settings, Attempts::Once, now), now);
    let out = drain(&mut client);
    assert_eq!(out.sent.len(), 3, "the probe goes");
    answer(&mut client, &out.sent, Response::Int(1), now + MS);
    let out = drain(&mut client);
    assert!(
        matches!(
            &out.health[..],
            [HealthChange::Trusted {
                node: NodeId(2),
                ..
            }]
        ),
        "{out:?}"
    );
}

/// A grant where `silent` never answers, then its deadline: the health
/// changes that brings.
fn granted_without(
    client: &mut Client<StdRng>,
    settings: &Arc<Settings>,
    silent: NodeId,
    now: Instant,
) -> Vec<HealthChange> {
    client.start(acquire(settings, Attempts::Once, now), now);
    let out = drain(client);
    let answered: Vec<_> = out
        .sent
        .into_iter()
        .filter(|(_, r)| r.node != silent)
        .collect();
    answer(client, &answered, Response::Int(1), now + MS);
    let out = drain(client);
    assert!(matches!(
        out.events.last(),
        Some((_, OpEvent::Acquire(AcquireEvent::Acquired(_)), true))
    ));
    client.handle_timeout(now + 10 * MS);
    let out = drain(client);
    assert_eq!(out.forgotten.len(), 1);
    out.health
}

#[test]
fn a_cancelled_acquire_withdraws_its_attempt_on_every_node() {
    let settings = settings();
    let t0 = Instant::now();
    let mut client = Client::new(Arc::clone(&settings), StdRng::seed_from_u64(0));
    let op = client.start(acquire(&settings, Attempts::Once, t0), t0);
    let attempt = drain(&mut client);
    client.cancel(op, t0 + MS);
    let out = drain(&mut client);
    let withdraws: Vec<usize> = out
        .sent
        .iter()
        .filter(|(_, r)| r.command.must_arrive())
        .map(|(_, r)| r.node.0)
        .collect();
    assert_eq!(
        withdraws,
        [0, 1, 2],
        "the attempt may have set the key anywhere"
    );
    assert!(
        out.events.is_empty(),
        "a cancelled operation reports nothing"
    );
    // Its attempt's answers change nothing now.
    answer(&mut client, &attempt.sent, Response::Int(1), t0 + 2 * MS);
    assert!(drain(&mut client).events.is_empty());
}

#[cfg(feature = "planted-bugs")]
#[test]
fn the_cancel_test_catches_a_client_that_skips_the_withdraws() {
    assert_catches(
        redlock_core::planted::Bug::CancelSkipsWithdraws,
        a_cancelled_acquire_withdraws_its_attempt_on_every_node,
    );
}

#[test]
fn a_release_that_meets_a_broken_connection_is_sent_again_until_it_is_given_up() {
    let settings = settings();
    let t0 = Instant::now();
    let mut client = Client::new(Arc::clone(&settings), StdRng::seed_from_u64(0));
    let mut lock = granted(&mut client, &settings, t0);
    let t1 = t0 + 100 * MS;
    client.start(Operation::Release(Box::new(lock.release(t1))), t1);
    let out = drain(&mut client);
    assert_eq!(out.sent.len(), 3);
    let (to_node_0, rest) = out.sent.split_first().unwrap();
    answer(&mut client, rest, Response::Int(1), t1 + MS);
    client.handle_reply(to_node_0.0, broken(&to_node_0.1), t1 + MS);
    let out = drain(&mut client);
    assert!(out.sent.is_empty(), "not again at once");
    assert!(!client.is_idle(), "owed to node 0");
    // The node connects again: the release goes at once.
    client.handle_connected(NodeId(0), &[], t1 + 5 * MS);
    let out = drain(&mut client);
    assert_eq!(out.sent.len(), 1);
    assert_eq!(
        (out.sent[0].1.node, out.sent[0].1.command),
        (NodeId(0), Command::Release)
    );
    // Broken again: one per-node timeout later it goes again by itself.
    client.handle_reply(out.sent[0].0, broken(&out.sent[0].1), t1 + 6 * MS);
    let retry_at = client.poll_timeout().unwrap();
    assert_eq!(retry_at, t1 + 16 * MS);
    client.handle_timeout(retry_at);
    let out = drain(&mut client);
    assert_eq!(out.sent.len(), 1, "sent again on its own");
    // Once what it undoes has expired by itself (one TTL and its drift
    // past its deadline), it is given up and the client is idle.
    let give_up_at = out.sent[0].1.give_up_at;
    assert!(give_up_at > t1 + settings.default_ttl().as_duration());
    client.handle_reply(out.sent[0].0, broken(&out.sent[0].1), give_up_at - MS);
    assert!(!client.is_idle());
    client.handle_timeout(give_up_at);
    let _ = drain(&mut client);
    assert!(client.is_idle(), "given up");
}

#[test]
fn a_release_unanswered_is_waited_for_until_its_give_up_not_its_deadline() {
    let settings = settings();
    let t0 = Instant::now();
    let mut client = Client::new(Arc::clone(&settings), StdRng::seed_from_u64(0));
    let mut lock = granted(&mut client, &settings, t0);
    let t1 = t0 + 100 * MS;
    client.start(Operation::Release(Box::new(lock.release(t1))), t1);
    let out = drain(&mut client);
    let (silent, rest) = out.sent.split_first().unwrap();
    answer(&mut client, rest, Response::Int(1), t1 + MS);
    let out = drain(&mut client);
    assert!(
        matches!(&out.events[..], [(_, OpEvent::Release(_), true)]),
        "decided without node 0"
    );
    client.handle_timeout(silent.1.deadline);
    assert!(
        drain(&mut client).forgotten.is_empty(),
        "a release is not forgotten at its deadline"
    );
    client.handle_timeout(silent.1.give_up_at);
    assert_eq!(drain(&mut client).forgotten, [silent.0]);
    assert!(client.is_idle());
}

#[test]
fn close_ends_every_operation_and_withdraws_what_is_in_flight() {
    let settings = settings();
    let t0 = Instant::now();
    let mut client = Client::new(Arc::clone(&settings), StdRng::seed_from_u64(0));
    let first = client.start(acquire(&settings, Attempts::Once, t0), t0);
    let second = client.start(acquire(&settings, Attempts::Once, t0), t0);
    let attempts = drain(&mut client);
    assert_eq!(attempts.sent.len(), 6);
    client.close(t0 + MS);
    assert!(client.is_closed());
    assert_eq!(client.running(), 0);
    let out = drain(&mut client);
    let closed: Vec<OpId> = out
        .events
        .iter()
        .filter(|(_, event, last)| matches!(event, OpEvent::Closed) && *last)
        .map(|(op, _, _)| *op)
        .collect();
    assert_eq!(closed, [first, second], "each told, with its machine");
    assert_eq!(out.finished.len(), 2);
    assert_eq!(
        out.sent
            .iter()
            .filter(|(_, r)| r.command == Command::Withdraw)
            .count(),
        6
    );
    answer(&mut client, &attempts.sent, Response::Int(1), t0 + 2 * MS);
    answer(&mut client, &out.sent, Response::Int(1), t0 + 2 * MS);
    assert!(client.is_idle());
}

/// A keep-alive running when its client closes: its lock is released on
/// every node, behind its extension in flight, and it is told `Closed`.
/// A lock started after the close is told `Closed` at once and sends
/// nothing; a release still runs.
#[test]
fn close_releases_what_keep_alives_hold_and_refuses_new_locks() {
    let settings = settings();
    let t0 = Instant::now();
    let mut client = Client::new(Arc::clone(&settings), StdRng::seed_from_u64(0));
    let lock = granted(&mut client, &settings, t0);
    let kept = client.start(
        Operation::KeepAlive(Box::new(redlock_core::KeptLock::new(
            lock.clone(),
            redlock_core::KeepAlive::default(),
        ))),
        t0 + MS,
    );
    // Its first extension goes out when it is due.
    let due = client.poll_timeout().expect("the keep-alive's timer");
    client.handle_timeout(due);
    let extension = drain(&mut client);
    assert_eq!(extension.sent.len(), 3, "an extension per node");
    client.close(due + MS);
    let out = drain(&mut client);
    assert!(
        matches!(&out.events[..], [(op, OpEvent::Closed, true)] if *op == kept),
        "{:?}",
        out.events
    );
    let releases: Vec<usize> = out
        .sent
        .iter()
        .filter(|(_, request)| request.command.must_arrive())
        .map(|(_, request)| request.node.0)
        .collect();
    assert_eq!(releases, [0, 1, 2], "released on every node");
    let after = client.start(acquire(&settings, Attempts::Once, t0), due + MS);
    let refused = drain(&mut client);
    assert!(refused.sent.is_empty(), "a lock after close sends nothing");
    assert!(matches!(&refused.events[..], [(op, OpEvent::Closed, true)] if *op == after));
    let mut release = lock.clone();
    client.start(
        Operation::Release(Box::new(release.release(due + 2 * MS))),
        due + 2 * MS,
    );
    assert_eq!(drain(&mut client).sent.len(), 3, "a release still runs");
}

#[cfg(feature = "planted-bugs")]
#[test]
fn the_close_test_catches_a_close_that_keeps_held_locks() {
    assert_catches(
        redlock_core::planted::Bug::CloseKeepsHeldLocks,
        close_releases_what_keep_alives_hold_and_refuses_new_locks,
    );
}

#[test]
fn a_waiter_is_handed_the_lock_its_client_releases_without_waiting_for_its_retry() {
    let settings = Arc::new(
        three_nodes(3, Duration::from_secs(10))
            .release_notices(true)
            .validate()
            .unwrap(),
    );
    let t0 = Instant::now();
    let mut client = Client::new(Arc::clone(&settings), StdRng::seed_from_u64(0));
    let mut held = granted(&mut client, &settings, t0);
    // A second acquire of the same lock finds it held and waits.
    let t1 = t0 + 5 * MS;
    let waiter = client.start(acquire(&settings, Attempts::Retry, t1), t1);
    let out = drain(&mut client);
    let votes: Vec<_> = out
        .sent
        .into_iter()
        .filter(|(_, r)| matches!(r.command, Command::Acquire { .. }))
        .collect();
    assert_eq!(votes.len(), 3);
    let holder = Response::Data(held.value().as_bytes().to_vec());
    answer(&mut client, &votes, holder.clone(), t1 + MS);
    let out = drain(&mut client);
    assert_eq!(
        out.notice_connects.len(),
        3,
        "it listens for the release: {out:?}"
    );
    assert!(
        !out.sent
            .iter()
            .any(|(_, r)| matches!(r.command, Command::Acquire { .. })),
        "it sleeps out its retry (10 s)"
    );
    // Each node's pub/sub connection comes up and subscribes to the lock's
    // channel, one request per node.
    for node in 0..3 {
        client.handle_notices_connected(NodeId(node), t1 + MS);
    }
    let out = drain(&mut client);
    assert_eq!(out.subscribed.len(), 3, "{out:?}");
    assert!(
        out.subscribed
            .iter()
            .all(|(_, channels)| channels.len() == 1)
    );
    for node in 0..3 {
        client.handle_subscribed(NodeId(node), t1 + 2 * MS);
    }
    assert_eq!(client.notice_links_up(), 3);
    // A first subscription: a release before it went unheard, so the
    // waiter tries once more, and finds the lock held still.
    let again = acquires(drain(&mut client).sent);
    assert_eq!(again.len(), 3, "{again:?}");
    answer(&mut client, &again, holder.clone(), t1 + 3 * MS);
    drain(&mut client);
    // The client releases. Its first release of the lock cannot know yet
    // whether another client waits too, so its waiter is told once the
    // release's nodes answered that they deleted the key and published no
    // notice (only this client's waiter was marked): before any timer.
    let t2 = t1 + 20 * MS;
    client.start(Operation::Release(Box::new(held.release(t2))), t2);
    let out = drain(&mut client);
    assert!(
        out.sent.iter().all(|(_, r)| r.command == Command::Release),
        "{out:?}"
    );
    answer(&mut client, &out.sent, Response::Int(1), t2 + MS);
    let out = drain(&mut client);
    let attempt: Vec<_> = out
        .sent
        .iter()
        .filter(|(_, r)| r.command.name() == "acquire")
        .cloned()
        .collect();
    assert_eq!(attempt.len(), 3, "handed over: {out:?}");
    answer(&mut client, &attempt, Response::Int(1), t2 + 2 * MS);
    let out = drain(&mut client);
    assert!(
        out.events.iter().any(|(op, event, last)| *op == waiter
            && *last
            && matches!(event, OpEvent::Acquire(AcquireEvent::Acquired(_)))),
        "{out:?}"
    );
    assert_eq!(
        out.unsubscribed.len(),
        3,
        "nobody waits: unsubscribed: {out:?}"
    );
}

/// The vote `node` gave in `event`: a lock's, or a failed acquire's.
fn vote_of(event: &OpEvent, node: NodeId) -> redlock_core::NodeVote {
    match event {
        OpEvent::Acquire(AcquireEvent::Acquired(lock)) => lock.votes().get(node).cloned(),
        OpEvent::Acquire(AcquireEvent::Failed(redlock_core::AcquireError::NoQuorum {
            votes,
            ..
        })) => votes.get(node).cloned(),
        other => panic!("not an acquire's end: {other:?}"),
    }
    .expect("a vote per node")
}

fn restarted(vote: &redlock_core::NodeVote) -> bool {
    matches!(vote, redlock_core::NodeVote::Failed(error) if error.kind == NodeErrorKind::Restarted)
}

/// A server whose run id changed at a reconnect restarted under the
/// client: it may have lost a lock it granted and grant it again. Its
/// votes do not count until the longest TTL has passed (with the drift
/// allowance): neither an answer to a request sent before the client
/// knew, nor a request sent after (not sent at all); releases still go.
#[test]
fn a_restarted_server_does_not_vote_until_the_longest_ttl_has_passed() {
    let settings = settings();
    let t0 = Instant::now();
    let mut client = Client::new(Arc::clone(&settings), StdRng::seed_from_u64(0));
    for node in 0..3 {
        client.handle_connected(NodeId(node), &[format!("first{node}")], t0);
    }
    assert!(
        drain(&mut client).health.is_empty(),
        "first seen: no restart"
    );
    // An acquire is on its way when node 0 comes back as another server.
    let op = client.start(acquire(&settings, Attempts::Once, t0), t0);
    let attempt = drain(&mut client);
    assert_eq!(attempt.sent.len(), 3);
    client.handle_connected(NodeId(0), &["second0".to_owned()], t0 + MS);
    let out = drain(&mut client);
    let ttl = settings.default_ttl();
    let wait = ttl.as_duration() + settings.drift(ttl);
    assert_eq!(
        out.health,
        [HealthChange::Restarted {
            node: NodeId(0),
            wait
        }]
    );
    answer(&mut client, &attempt.sent, Response::Int(1), t0 + 2 * MS);
    let out = drain(&mut client);
    let (_, event, _) = out.events.iter().find(|(id, ..)| *id == op).unwrap();
    assert!(restarted(&vote_of(event, NodeId(0))), "{event:?}");
    let OpEvent::Acquire(AcquireEvent::Acquired(lock)) = event else {
        panic!("nodes 1 and 2 are a quorum: {event:?}");
    };
    // Its release still goes to node 0 (the value may be there).
    let mut lock = lock.clone();
    let t1 = t0 + 10 * MS;
    client.start(Operation::Release(Box::new(lock.release(t1))), t1);
    let out = drain(&mut client);
    assert!(out.sent.iter().any(|(_, r)| r.node == NodeId(0)));
    answer(&mut client, &out.sent, Response::Int(1), t1 + MS);
    drain(&mut client);

    // Node 1 restarts too: a new acquire is not sent to either, and one
    // node of three is no quorum.
    client.handle_connected(NodeId(1), &["second1".to_owned()], t1 + 2 * MS);
    let t2 = t1 + 3 * MS;
    let op = client.start(acquire(&settings, Attempts::Once, t2), t2);
    let out = drain(&mut client);
    let acquires = |out: &Drained| -> Vec<NodeId> {
        out.sent
            .iter()
            .filter(|(_, r)| matches!(r.command, Command::Acquire { .. }))
            .map(|(_, r)| r.node)
            .collect()
    };
    assert_eq!(
        acquires(&out),
        [NodeId(2)],
        "the restarted servers are not asked"
    );
    // Failed at once (two votes of three failed); its withdraws go to
    // every node, the restarted ones too.
    let event = out
        .events
        .iter()
        .find(|(id, ..)| *id == op)
        .map(|(_, e, _)| e)
        .unwrap_or_else(|| panic!("{out:?}"));
    assert!(restarted(&vote_of(event, NodeId(0))) && restarted(&vote_of(event, NodeId(1))));
    assert!(
        matches!(event, OpEvent::Acquire(AcquireEvent::Failed(_))),
        "{event:?}"
    );
    let withdrawn: Vec<NodeId> = out
        .sent
        .iter()
        .filter(|(_, r)| r.command.must_arrive())
        .map(|(_, r)| r.node)
        .collect();
    assert_eq!(withdrawn.len(), 3, "{withdrawn:?}");
    answer(&mut client, &out.sent, Response::Int(1), t2 + MS);
    drain(&mut client);
    // Node 0's wait is over one TTL (and its drift) after its restart was
    // seen: it votes again; node 1's, seen later, is not.
    let t3 = t0 + MS + wait;
    let op = client.start(acquire(&settings, Attempts::Once, t3), t3);
    let out = drain(&mut client);
    assert_eq!(acquires(&out), [NodeId(0), NodeId(2)]);
    answer(&mut client, &out.sent, Response::Int(1), t3 + MS);
    let out = drain(&mut client);
    assert!(
        out.events.iter().any(|(id, e, _)| *id == op
            && matches!(e, OpEvent::Acquire(AcquireEvent::Acquired(_)))),
        "{out:?}"
    );
}

#[cfg(feature = "planted-bugs")]
#[test]
fn the_restart_test_catches_a_restarted_server_that_votes_at_once() {
    assert_catches(
        redlock_core::planted::Bug::RestartedNodeVotes,
        a_restarted_server_does_not_vote_until_the_longest_ttl_has_passed,
    );
}

#[test]
fn a_broken_link_is_connected_again_at_once_then_with_a_growing_backoff() {
    let settings = settings();
    let t0 = Instant::now();
    let mut client = Client::new(Arc::clone(&settings), StdRng::seed_from_u64(0));
    assert_eq!(client.poll_timeout(), None, "nothing to do while connected");
    client.handle_disconnected(NodeId(1), t0);
    assert_eq!(drain(&mut client).connects, [NodeId(1)], "a break: at once");
    client.handle_disconnected(NodeId(1), t0);
    assert!(
        drain(&mut client).connects.is_empty(),
        "one attempt at a time"
    );
    // Each failure waits the backoff: 50 ms, then 100, 200, ... up to 2 s,
    // each less up to a quarter of jitter.
    let mut now = t0;
    let mut waits = Vec::new();
    for _ in 0..8 {
        client.handle_connect_failed(NodeId(1), now);
        let next = client.poll_timeout().expect("the next attempt is timed");
        client.handle_timeout(next - Duration::from_micros(1));
        assert!(
            drain(&mut client).connects.is_empty(),
            "not before its time"
        );
        client.handle_timeout(next);
        assert_eq!(drain(&mut client).connects, [NodeId(1)]);
        waits.push(next - now);
        now = next;
    }
    let full = [50, 100, 200, 400, 800, 1600, 2000, 2000];
    for (wait, full) in waits.iter().zip(full) {
        let full = Duration::from_millis(full);
        assert!(
            *wait <= full && *wait >= full * 3 / 4,
            "{waits:?} against {full:?}"
        );
    }
    // Connected: what it was owed goes, and the backoff starts over.
    client.handle_connected(NodeId(1), &[], now);
    assert_eq!(client.poll_timeout(), None);
    client.handle_disconnected(NodeId(1), now);
    assert_eq!(drain(&mut client).connects, [NodeId(1)]);
    client.handle_connect_failed(NodeId(1), now);
    let wait = client.poll_timeout().unwrap() - now;
    assert!(wait <= 50 * MS, "the backoff starts over: {wait:?}");
}

#[cfg(feature = "planted-bugs")]
#[test]
fn the_reconnection_test_catches_a_client_that_reconnects_without_backoff() {
    assert_catches(
        redlock_core::planted::Bug::ReconnectWithoutBackoff,
        a_broken_link_is_connected_again_at_once_then_with_a_growing_backoff,
    );
}

#[test]
fn a_closed_client_still_connects_for_what_it_owes() {
    let settings = settings();
    let t0 = Instant::now();
    let mut client = Client::new(Arc::clone(&settings), StdRng::seed_from_u64(0));
    let mut lock = granted(&mut client, &settings, t0);
    let t1 = t0 + 100 * MS;
    client.start(Operation::Release(Box::new(lock.release(t1))), t1);
    let release = drain(&mut client);
    client.close(t1);
    let on_0: Vec<_> = release
        .sent
        .iter()
        .filter(|(_, r)| r.node == NodeId(0))
        .collect();
    client.handle_reply(on_0[0].0, broken(&on_0[0].1), t1);
    client.handle_disconnected(NodeId(0), t1);
    assert_eq!(drain(&mut client).connects, [NodeId(0)]);
    client.handle_connected(NodeId(0), &[], t1 + MS);
    let resent = drain(&mut client);
    assert_eq!(
        resent.sent.len(),
        1,
        "the release owed goes on the new link"
    );
    assert_eq!(resent.sent[0].1.node, NodeId(0));
}

/// The acquire votes among `sent` (a waiter's retry marks the holder too).
fn acquires(sent: Vec<(RequestId, Request)>) -> Vec<(RequestId, Request)> {
    sent.into_iter()
        .filter(|(_, request)| matches!(request.command, Command::Acquire { .. }))
        .collect()
}

/// A waiter of this client on a lock another owner holds, with every
/// node's pub/sub link up and subscribed at `t0 + 2 ms`.
fn listening_waiter(client: &mut Client<StdRng>, settings: &Arc<Settings>, t0: Instant) -> OpId {
    let waiter = client.start(acquire(settings, Attempts::Retry, t0), t0);
    let votes = drain(client).sent;
    answer(
        client,
        &votes,
        Response::Data(b"another owner".to_vec()),
        t0,
    );
    assert_eq!(drain(client).notice_connects.len(), 3, "it listens");
    for node in 0..3 {
        client.handle_notices_connected(NodeId(node), t0 + MS);
    }
    assert_eq!(drain(client).subscribed.len(), 3);
    for node in 0..3 {
        client.handle_subscribed(NodeId(node), t0 + 2 * MS);
    }
    // A first subscription: the waiter tries once more (a release before
    // it went unheard), and finds the lock held still.
    let again = acquires(drain(client).sent);
    assert_eq!(again.len(), 3, "{again:?}");
    answer(
        client,
        &again,
        Response::Data(b"another owner".to_vec()),
        t0 + 3 * MS,
    );
    drain(client);
    waiter
}

#[test]
fn a_lost_notice_link_is_made_again_after_a_backoff_and_its_waiters_try_again() {
    let settings = settings();
    let t0 = Instant::now();
    let mut client = Client::new(Arc::clone(&settings), StdRng::seed_from_u64(0));
    let waiter = listening_waiter(&mut client, &settings, t0);
    assert_eq!(client.notice_links_up(), 3);

    // Node 1's pub/sub connection closes: made again after the backoff
    // (50 ms less jitter), not at once.
    let t1 = t0 + 100 * MS;
    // The waiter's marks went unanswered: forgotten by now.
    client.handle_timeout(t1);
    drain(&mut client);
    client.handle_notices_lost(NodeId(1), t1);
    assert_eq!(client.notice_links_up(), 2);
    assert!(drain(&mut client).notice_connects.is_empty(), "not at once");
    let at = client.poll_timeout().expect("the attempt is timed");
    assert!(at > t1 && at <= t1 + 50 * MS, "{:?}", at - t1);
    client.handle_timeout(at);
    assert_eq!(drain(&mut client).notice_connects, [NodeId(1)]);

    // Connected, but the subscription is refused (an ACL user without
    // SUBSCRIBE): a link that connects does not reset the backoff, only
    // one that subscribes does.
    let mut now = at;
    let mut waits = Vec::new();
    for _ in 0..3 {
        client.handle_notices_connected(NodeId(1), now);
        assert_eq!(drain(&mut client).subscribed.len(), 1);
        client.handle_notices_lost(NodeId(1), now);
        let next = client.poll_timeout().unwrap();
        waits.push(next - now);
        client.handle_timeout(next);
        assert_eq!(drain(&mut client).notice_connects, [NodeId(1)]);
        now = next;
    }
    for (wait, full) in waits.iter().zip([100, 200, 400]) {
        let full = Duration::from_millis(full);
        assert!(
            *wait <= full && *wait >= full * 3 / 4,
            "{waits:?}: growing while no subscription is confirmed"
        );
    }

    // Subscribed again on the new link: a release meanwhile went unheard
    // there, so the waiter tries again now, not at its retry (10 s).
    client.handle_notices_connected(NodeId(1), now);
    drain(&mut client);
    client.handle_subscribed(NodeId(1), now + MS);
    let out = drain(&mut client);
    let attempt = out
        .sent
        .iter()
        .filter(|(_, r)| matches!(r.command, Command::Acquire { .. }))
        .count();
    assert_eq!(attempt, 3, "it tries again: {out:?}");
    assert_eq!(client.notice_links_up(), 3);

    // Nobody waits any more: a lost link is not made again.
    client.cancel(waiter, now + 2 * MS);
    let out = drain(&mut client);
    assert_eq!(out.unsubscribed.len(), 3, "{out:?}");
    client.handle_notices_lost(NodeId(2), now + 3 * MS);
    client.handle_timeout(now + Duration::from_secs(5));
    assert!(drain(&mut client).notice_connects.is_empty());
}

#[cfg(feature = "planted-bugs")]
#[test]
fn the_notice_link_test_catches_a_client_that_reconnects_without_backoff() {
    assert_catches(
        redlock_core::planted::Bug::ReconnectWithoutBackoff,
        a_lost_notice_link_is_made_again_after_a_backoff_and_its_waiters_try_again,
    );
}

#[test]
fn a_link_that_never_came_up_subscribes_as_a_first_link_does() {
    let settings = settings();
    let t0 = Instant::now();
    let mut client = Client::new(Arc::clone(&settings), StdRng::seed_from_u64(0));
    let _waiter = client.start(acquire(&settings, Attempts::Retry, t0), t0);
    let votes = drain(&mut client).sent;
    answer(
        &mut client,
        &votes,
        Response::Data(b"another owner".to_vec()),
        t0,
    );
    assert_eq!(drain(&mut client).notice_connects.len(), 3);
    // Nodes 0 and 1 subscribe; node 2's first attempt fails.
    for node in 0..2 {
        client.handle_notices_connected(NodeId(node), t0 + MS);
    }
    client.handle_notices_lost(NodeId(2), t0 + MS);
    drain(&mut client);
    for node in 0..2 {
        client.handle_subscribed(NodeId(node), t0 + 2 * MS);
    }
    let again = acquires(drain(&mut client).sent);
    answer(
        &mut client,
        &again,
        Response::Data(b"another owner".to_vec()),
        t0 + 3 * MS,
    );
    drain(&mut client);
    // Node 2 comes up later and subscribes: no link of it was lost, so no
    // release went unheard there that the others did not tell: no attempt.
    let t1 = t0 + 100 * MS;
    client.handle_timeout(t1);
    assert_eq!(drain(&mut client).notice_connects, [NodeId(2)]);
    client.handle_notices_connected(NodeId(2), t1);
    assert_eq!(drain(&mut client).subscribed.len(), 1);
    client.handle_subscribed(NodeId(2), t1 + MS);
    let out = drain(&mut client);
    assert!(
        out.sent.is_empty() && out.events.is_empty(),
        "a first subscription of an active channel starts no attempt: {out:?}"
    );
    assert_eq!(client.notice_links_up(), 3);
}
