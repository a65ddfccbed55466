//! The core `Client`: one unit that runs every operation and keeps what no
//! operation owns (requests in flight, node health, what each node is owed,
//! release notices). In virtual time; asserts what it asks to send, in
//! which order, and what it reports.

mod support;

#[path = "../../redlock-testkit/src/model.rs"]
#[allow(dead_code, unreachable_pub)]
mod redis;

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::StdRng;
use redlock_core::native::{Native, NodeFacts, Server, Version};
use redlock_core::{
    AcquireEvent, Acquisition, Attempts, Client, Command, Connected, Form, HealthChange, LockKind,
    NodeError, NodeErrorKind, NodeId, OpEvent, OpId, Operation, Output, Reply, Request, RequestId,
    Response, Settings,
};
use support::{MS, three_nodes};

/// Three nodes, a 1 s TTL, a 10 ms per-node timeout, retries every 10 s.
fn settings() -> Arc<Settings> {
    Arc::new(three_nodes(3, Duration::from_secs(10)).validate().unwrap())
}

/// A client of `settings`, its generator seeded with 0.
fn new_client(settings: &Arc<Settings>) -> Client<StdRng> {
    Client::new(Arc::clone(settings), StdRng::seed_from_u64(0))
}

/// [`settings`] with release notices on.
fn notices_settings() -> Arc<Settings> {
    Arc::new(
        three_nodes(3, Duration::from_secs(10))
            .release_notices(true)
            .validate()
            .unwrap(),
    )
}

fn acquire(settings: &Arc<Settings>, attempts: Attempts, now: Instant) -> Operation<StdRng> {
    Operation::from(Acquisition::new(
        Arc::clone(settings),
        b"report",
        settings.default_ttl(),
        attempts,
        now,
        StdRng::seed_from_u64(7),
    ))
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

/// What a connection found: a server of these run ids and facts.
fn found(run_ids: &[String], facts: NodeFacts) -> Connected {
    Connected {
        run_ids: run_ids.to_vec(),
        facts,
        ..Connected::default()
    }
}

/// The reply to `request`: the node failed it with `kind`.
fn failed(request: &Request, kind: NodeErrorKind, detail: &str) -> Reply {
    Reply::to(request, Err(NodeError::new(kind, detail)))
}

fn broken(request: &Request) -> Reply {
    failed(request, NodeErrorKind::Connection, "connection reset")
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
    let mut client = new_client(&settings);
    let op = client.start(acquire(&settings, Attempts::Once, t0), t0);
    let out = drain(&mut client);
    assert_eq!(out.sent.len(), 3, "one request per node, sent at start");
    assert!(!client.is_idle());
    answer(&mut client, &out.sent[..2], Response::Int(1), t0 + MS);
    let out = drain(&mut client);
    assert!(
        matches!(&out.events[..], [(whose, OpEvent::Acquire(AcquireEvent::Acquired(_)), true)] if *whose == op)
    );
    assert!(matches!(&out.finished[..], [op] if op.attempts().is_some()));
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
    let mut client = new_client(&settings);
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
    let mut client = new_client(&settings);
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

/// A client whose granted lock's release went out at `t1` (100 ms in),
/// every node but node 0 having answered: the client, the release to node
/// 0 still in flight, and `t1`.
fn releasing_but_node_0(
    settings: &Arc<Settings>,
    t0: Instant,
) -> (Client<StdRng>, (RequestId, Request), Instant) {
    let mut client = new_client(settings);
    let mut lock = granted(&mut client, settings, t0);
    let t1 = t0 + 100 * MS;
    client.start(Operation::release(&mut lock, t1), t1);
    let mut sent = drain(&mut client).sent;
    assert_eq!(sent.len(), 3);
    let to_node_0 = sent.remove(0);
    answer(&mut client, &sent, Response::Int(1), t1 + MS);
    (client, to_node_0, t1)
}

#[test]
fn a_release_that_meets_a_broken_connection_is_sent_again_until_it_is_given_up() {
    let settings = settings();
    let (mut client, to_node_0, t1) = releasing_but_node_0(&settings, Instant::now());
    client.handle_reply(to_node_0.0, broken(&to_node_0.1), t1 + MS);
    let out = drain(&mut client);
    assert!(out.sent.is_empty(), "not again at once");
    assert!(!client.is_idle(), "owed to node 0");
    // The node connects again: the release goes at once.
    client.handle_connected(NodeId(0), &found(&[], NodeFacts::default()), t1 + 5 * MS);
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
    let (mut client, silent, _) = releasing_but_node_0(&settings, Instant::now());
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
    let mut client = new_client(&settings);
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
    let mut client = new_client(&settings);
    let lock = granted(&mut client, &settings, t0);
    let kept = client.start(
        Operation::from(redlock_core::KeptLock::new(
            lock.clone(),
            redlock_core::KeepAlive::default(),
        )),
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
    client.start(Operation::release(&mut release, due + 2 * MS), due + 2 * MS);
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
    let settings = notices_settings();
    let t0 = Instant::now();
    let mut client = new_client(&settings);
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
    client.start(Operation::release(&mut held, t2), t2);
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
    let mut client = new_client(&settings);
    for node in 0..3 {
        client.handle_connected(
            NodeId(node),
            &found(&[format!("first{node}")], NodeFacts::default()),
            t0,
        );
    }
    assert!(
        drain(&mut client).health.is_empty(),
        "first seen: no restart"
    );
    // An acquire is on its way when node 0 comes back as another server.
    let op = client.start(acquire(&settings, Attempts::Once, t0), t0);
    let attempt = drain(&mut client);
    assert_eq!(attempt.sent.len(), 3);
    client.handle_connected(
        NodeId(0),
        &found(&["second0".to_owned()], NodeFacts::default()),
        t0 + MS,
    );
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
    client.start(Operation::release(&mut lock, t1), t1);
    let out = drain(&mut client);
    assert!(out.sent.iter().any(|(_, r)| r.node == NodeId(0)));
    answer(&mut client, &out.sent, Response::Int(1), t1 + MS);
    drain(&mut client);

    // Node 1 restarts too: a new acquire is not sent to either, and one
    // node of three is no quorum.
    client.handle_connected(
        NodeId(1),
        &found(&["second1".to_owned()], NodeFacts::default()),
        t1 + 2 * MS,
    );
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

/// A connection again to the same server (the same run id), or to one
/// that gives no run id (an ACL user without `INFO`), is no restart; a
/// read answered across a restart counts all the same: it is no vote.
#[test]
fn only_a_run_id_gone_is_a_restart_and_reads_count_across_one() {
    let settings = settings();
    let t0 = Instant::now();
    let mut client = new_client(&settings);
    for node in 0..3 {
        client.handle_connected(
            NodeId(node),
            &found(&[format!("first{node}")], NodeFacts::default()),
            t0,
        );
    }
    client.handle_connected(
        NodeId(0),
        &found(&["first0".to_owned()], NodeFacts::default()),
        t0 + MS,
    );
    client.handle_connected(NodeId(1), &found(&[], NodeFacts::default()), t0 + MS);
    assert!(drain(&mut client).health.is_empty(), "no restart");
    let op = client.start(acquire(&settings, Attempts::Once, t0 + MS), t0 + MS);
    let attempt = drain(&mut client);
    assert_eq!(attempt.sent.len(), 3, "every node asked");
    answer(&mut client, &attempt.sent, Response::Int(1), t0 + 2 * MS);
    let out = drain(&mut client);
    let (_, event, _) = out.events.iter().find(|(id, ..)| *id == op).unwrap();
    for node in 0..3 {
        assert!(!restarted(&vote_of(event, NodeId(node))), "{event:?}");
    }
    // A read of every node is on its way when node 2 restarts.
    let t1 = t0 + 10 * MS;
    let read = redlock_core::Inspection::new(&settings, b"report", redlock_core::RoundId(9), t1);
    let op = client.start(Operation::from(read), t1);
    let reads = drain(&mut client).sent;
    assert_eq!(reads.len(), 3);
    client.handle_connected(
        NodeId(2),
        &found(&["second2".to_owned()], NodeFacts::default()),
        t1 + MS,
    );
    assert_eq!(drain(&mut client).health.len(), 1, "node 2 restarted");
    let held = Response::Array(vec![
        Response::Data(b"v".to_vec()),
        Response::Int(900),
        Response::Nil,
    ]);
    answer(&mut client, &reads, held, t1 + 2 * MS);
    let out = drain(&mut client);
    let report = out
        .events
        .into_iter()
        .find_map(|(id, event, _)| match event {
            OpEvent::Inspect(report) if id == op => Some(report),
            _ => None,
        })
        .expect("the read ends");
    assert!(
        report.reads.iter().all(Result::is_ok),
        "a read is no vote: {report:?}"
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
    let mut client = new_client(&settings);
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
    client.handle_connected(NodeId(1), &found(&[], NodeFacts::default()), now);
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
    let mut client = new_client(&settings);
    let mut lock = granted(&mut client, &settings, t0);
    let t1 = t0 + 100 * MS;
    client.start(Operation::release(&mut lock, t1), t1);
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
    client.handle_connected(NodeId(0), &found(&[], NodeFacts::default()), t1 + MS);
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
    let mut client = new_client(&settings);
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
    let mut client = new_client(&settings);
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

/// The commands of `sent`, in order.
fn commands(sent: &[(RequestId, Request)]) -> Vec<Command> {
    sent.iter().map(|(_, request)| request.command).collect()
}

#[test]
fn running_counts_the_operations_until_their_final_event() {
    let settings = settings();
    let t0 = Instant::now();
    let mut client = new_client(&settings);
    assert_eq!(client.running(), 0);
    client.start(acquire(&settings, Attempts::Once, t0), t0);
    client.start(acquire(&settings, Attempts::Once, t0), t0);
    assert_eq!(client.running(), 2);
    assert!(!client.is_closed(), "closed only by `close`");
}

#[test]
fn an_acquire_of_a_lock_the_clients_waiter_waits_for_queues_behind_it() {
    let settings = notices_settings();
    let t0 = Instant::now();
    let mut client = new_client(&settings);
    listening_waiter(&mut client, &settings, t0);
    let t1 = t0 + 10 * MS;
    client.start(acquire(&settings, Attempts::Retry, t1), t1);
    let out = drain(&mut client);
    assert!(
        acquires(out.sent).is_empty(),
        "first come, first served: it waits behind the client's waiter"
    );
    assert_eq!(client.running(), 2);
}

#[test]
fn a_release_of_a_lock_the_clients_waiter_waits_for_is_the_script_on_every_node() {
    let settings = notices_settings();
    let t0 = Instant::now();
    // Nobody waiting: a plain release, which may go native where a node can.
    let mut client = new_client(&settings);
    let mut alone = granted(&mut client, &settings, t0);
    client.start(Operation::release(&mut alone, t0 + MS), t0 + MS);
    let out = drain(&mut client);
    assert_eq!(out.sent.len(), 3);
    assert!(out.sent.iter().all(|(_, r)| r.native), "{out:?}");
    // The client's own waiter waits for its lock: the release is the
    // script everywhere, so that it hands over once queued.
    let mut client = new_client(&settings);
    let mut held = granted(&mut client, &settings, t0);
    let t1 = t0 + 5 * MS;
    client.start(acquire(&settings, Attempts::Retry, t1), t1);
    let votes = acquires(drain(&mut client).sent);
    let holder = Response::Data(held.value().as_bytes().to_vec());
    answer(&mut client, &votes, holder, t1 + MS);
    drain(&mut client);
    let t2 = t1 + 20 * MS;
    client.start(Operation::release(&mut held, t2), t2);
    let out = drain(&mut client);
    let releases: Vec<_> = out
        .sent
        .iter()
        .filter(|(_, r)| r.command == Command::Release)
        .collect();
    assert_eq!(releases.len(), 3, "{out:?}");
    assert!(releases.iter().all(|(_, r)| !r.native), "{out:?}");
}

#[test]
fn an_evicted_operation_is_given_back_and_another_client_undoes_it() {
    let settings = settings();
    let t0 = Instant::now();
    let mut client = new_client(&settings);
    let op = client.start(acquire(&settings, Attempts::Once, t0), t0);
    let attempt = drain(&mut client);
    assert_eq!(attempt.sent.len(), 3);
    let evicted = client.evict(op, t0 + MS).expect("it ran");
    assert!(evicted.attempts().is_some());
    assert_eq!(client.running(), 0);
    assert!(client.evict(op, t0 + MS).is_none(), "evicted once");
    // Its answers reach nobody.
    answer(&mut client, &attempt.sent, Response::Int(1), t0 + 2 * MS);
    assert!(drain(&mut client).events.is_empty());
    // The client it is handed to abandons it: its attempt is withdrawn on
    // every node it may hold.
    let mut other = Client::new(Arc::clone(&settings), StdRng::seed_from_u64(1));
    other.abandon(evicted, t0 + 3 * MS);
    let out = drain(&mut other);
    assert_eq!(
        commands(&out.sent),
        [Command::Withdraw, Command::Withdraw, Command::Withdraw],
        "{out:?}"
    );
    assert!(out.events.is_empty(), "abandoned: it reports nothing");
}

#[test]
fn what_the_nodes_are_owed_is_taken_out_and_settles_the_client() {
    let settings = settings();
    let t0 = Instant::now();
    let mut client = new_client(&settings);
    assert!(client.is_settled(), "a new client");
    let op = client.start(acquire(&settings, Attempts::Once, t0), t0);
    let attempt = drain(&mut client);
    assert!(
        client.is_settled(),
        "what is in flight, a running operation waits for"
    );
    answer(&mut client, &attempt.sent[..2], Response::Int(1), t0 + MS);
    let mut lock = match drain(&mut client).events.pop() {
        Some((whose, OpEvent::Acquire(AcquireEvent::Acquired(lock)), true)) if whose == op => lock,
        other => panic!("not granted: {other:?}"),
    };
    assert!(
        !client.is_settled(),
        "the third request is in flight for an operation that ended"
    );
    answer(
        &mut client,
        &attempt.sent[2..],
        Response::Int(1),
        t0 + 2 * MS,
    );
    assert!(client.is_settled());
    // A release that meets a broken connection on node 0 is owed there.
    let t1 = t0 + 10 * MS;
    client.start(Operation::release(&mut lock, t1), t1);
    let out = drain(&mut client);
    let (to_node_0, rest) = out.sent.split_first().unwrap();
    answer(&mut client, rest, Response::Int(1), t1 + MS);
    client.handle_reply(to_node_0.0, broken(&to_node_0.1), t1 + MS);
    drain(&mut client);
    assert_eq!(client.running(), 0);
    assert!(!client.is_settled(), "owed to node 0");
    assert!(!client.is_idle());
    let owed = client.take_owed();
    assert_eq!(owed.len(), 1);
    assert_eq!(
        (owed[0].node, owed[0].command),
        (NodeId(0), Command::Release)
    );
    assert!(client.is_settled());
    assert!(client.is_idle(), "nothing owed, nothing in flight");
}

#[test]
fn a_release_broken_at_its_give_up_instant_is_owed_no_more() {
    let settings = settings();
    let (mut client, to_node_0, _) = releasing_but_node_0(&settings, Instant::now());
    let give_up_at = to_node_0.1.give_up_at;
    client.handle_reply(to_node_0.0, broken(&to_node_0.1), give_up_at);
    drain(&mut client);
    assert!(client.is_idle(), "what it undoes has expired by now");
}

#[test]
fn release_notices_from_two_of_three_nodes_wake_the_clients_waiter_at_once() {
    let settings = notices_settings();
    let t0 = Instant::now();
    let mut client = new_client(&settings);
    let waiter = listening_waiter(&mut client, &settings, t0);
    let t1 = t0 + 50 * MS;
    let channel = settings.release_channel(&settings.key(b"report"));
    // One node's notice may be a failed attempt's clean-up; two of three
    // are more than those can free while another client holds a quorum.
    client.handle_notice(NodeId(0), channel.as_bytes(), t1);
    assert!(acquires(drain(&mut client).sent).is_empty());
    client.handle_notice(NodeId(2), channel.as_bytes(), t1);
    let attempt = acquires(drain(&mut client).sent);
    assert_eq!(attempt.len(), 3, "woken at the notices: {attempt:?}");
    answer(&mut client, &attempt, Response::Int(1), t1 + MS);
    let out = drain(&mut client);
    assert!(
        out.events.iter().any(|(op, event, last)| *op == waiter
            && *last
            && matches!(event, OpEvent::Acquire(AcquireEvent::Acquired(_)))),
        "{out:?}"
    );
    // Nobody waits: each link is asked to unsubscribe, one change at a
    // time; once confirmed, a new waiter's channel is subscribed again.
    assert_eq!(out.unsubscribed.len(), 3, "{out:?}");
    for node in 0..3 {
        client.handle_unsubscribed(NodeId(node), t1 + 2 * MS);
    }
    let t2 = t1 + 10 * MS;
    client.start(acquire(&settings, Attempts::Retry, t2), t2);
    let votes = acquires(drain(&mut client).sent);
    answer(
        &mut client,
        &votes,
        Response::Data(b"another owner".to_vec()),
        t2 + MS,
    );
    let out = drain(&mut client);
    assert_eq!(out.subscribed.len(), 3, "{out:?}");
    assert!(out.notice_connects.is_empty(), "the links are up still");
}

#[test]
fn a_lost_notice_link_is_not_made_again_once_nobody_waits() {
    let settings = notices_settings();
    let t0 = Instant::now();
    let mut client = new_client(&settings);
    let waiter = listening_waiter(&mut client, &settings, t0);
    let t1 = t0 + 10 * MS;
    client.handle_notices_lost(NodeId(1), t1);
    client.cancel(waiter, t1);
    let out = drain(&mut client);
    assert_eq!(out.unsubscribed.len(), 2, "the links up: {out:?}");
    answer(&mut client, &out.sent, Response::Int(1), t1 + MS);
    for node in [0, 2] {
        client.handle_unsubscribed(NodeId(node), t1 + MS);
    }
    // Past every deadline: nothing in flight is waited for any more.
    client.handle_timeout(t1 + Duration::from_secs(5));
    let out = drain(&mut client);
    assert!(out.notice_connects.is_empty(), "{out:?}");
    assert_eq!(
        client.poll_timeout(),
        None,
        "nobody waits: no link is made again, no timer runs"
    );
}

/// Two waiters of this client on a lock another owner holds, the second
/// planned behind the first; release notices from two nodes wake the
/// first alone, whose attempt is returned.
fn two_waiters_the_first_woken(
    client: &mut Client<StdRng>,
    settings: &Arc<Settings>,
    t0: Instant,
) -> (OpId, OpId, Vec<(RequestId, Request)>) {
    let first = listening_waiter(client, settings, t0);
    let t1 = t0 + 10 * MS;
    let second = client.start(acquire(settings, Attempts::Retry, t1), t1);
    assert!(acquires(drain(client).sent).is_empty(), "queued behind");
    let channel = settings.release_channel(&settings.key(b"report"));
    client.handle_notice(NodeId(0), channel.as_bytes(), t1 + MS);
    client.handle_notice(NodeId(2), channel.as_bytes(), t1 + MS);
    let attempt = acquires(drain(client).sent);
    assert_eq!(attempt.len(), 3, "the first waiter's attempt");
    (first, second, attempt)
}

#[test]
fn a_waiter_served_leaves_the_release_it_heard_to_nobody() {
    let settings = notices_settings();
    let t0 = Instant::now();
    let mut client = new_client(&settings);
    let (first, _, attempt) = two_waiters_the_first_woken(&mut client, &settings, t0);
    answer(&mut client, &attempt, Response::Int(1), t0 + 20 * MS);
    let out = drain(&mut client);
    assert!(
        out.events.iter().any(|(op, event, last)| *op == first
            && *last
            && matches!(event, OpEvent::Acquire(AcquireEvent::Acquired(_)))),
        "{out:?}"
    );
    assert!(
        acquires(out.sent).is_empty(),
        "the lock is the first's now: the second waits for its release"
    );
}

#[test]
fn a_waiter_that_leaves_without_the_lock_hands_what_it_heard_to_the_next() {
    let settings = notices_settings();
    let t0 = Instant::now();
    let mut client = new_client(&settings);
    let (first, second, attempt) = two_waiters_the_first_woken(&mut client, &settings, t0);
    // Another program's value of another type: the first fails for good.
    for (id, request) in &attempt {
        let wrong = NodeError::new(NodeErrorKind::WrongType, "WRONGTYPE");
        client.handle_reply(*id, Reply::to(request, Err(wrong)), t0 + 20 * MS);
    }
    let out = drain(&mut client);
    assert!(
        out.events.iter().any(|(op, event, last)| *op == first
            && *last
            && matches!(event, OpEvent::Acquire(AcquireEvent::Failed(_)))),
        "{out:?}"
    );
    let next = acquires(out.sent);
    assert_eq!(next.len(), 3, "the second tries at once: {next:?}");
    assert!(client.running() == 1 && second != first);
}

#[test]
fn an_operation_undone_without_a_client_gives_what_must_reach_the_nodes() {
    let settings = settings();
    let t0 = Instant::now();
    let mut client = new_client(&settings);
    let op = client.start(acquire(&settings, Attempts::Once, t0), t0);
    drain(&mut client);
    let acquisition = client.evict(op, t0 + MS).expect("it ran");
    let undone = acquisition.undo(t0 + MS);
    assert_eq!(
        undone.iter().map(|r| r.command).collect::<Vec<_>>(),
        [Command::Withdraw, Command::Withdraw, Command::Withdraw],
        "its attempt in flight is withdrawn on every node"
    );
}

/// A client that leads: a campaign granted (term 5), its term renewed by
/// the operation returned, started at the instant returned.
fn leading(client: &mut Client<StdRng>, settings: &Arc<Settings>, t0: Instant) -> (OpId, Instant) {
    use redlock_core::{ElectionTiming, LockSpec, Term};
    let timing = ElectionTiming::new(
        settings,
        Duration::from_secs(10),
        Duration::from_secs(6),
        Duration::from_secs(1),
    )
    .unwrap();
    let campaign = Acquisition::with_spec(
        Arc::clone(settings),
        LockSpec::Fenced(b"leader"),
        timing.lease(),
        Attempts::Once,
        t0,
        StdRng::seed_from_u64(3),
    )
    .unwrap();
    let op = client.start(Operation::from(campaign), t0);
    let out = drain(client);
    let granted = Response::Array(vec![Response::Int(1), Response::Int(4)]);
    answer(client, &out.sent, granted, t0 + MS);
    let tokens = drain(client).sent;
    assert!(
        tokens
            .iter()
            .all(|(_, r)| matches!(r.command, Command::StoreToken { .. }))
    );
    answer(client, &tokens, Response::Int(1), t0 + 2 * MS);
    let lock = match drain(client).events.pop() {
        Some((whose, OpEvent::Acquire(AcquireEvent::Acquired(lock)), true)) if whose == op => lock,
        other => panic!("not elected: {other:?}"),
    };
    let term = Term::new(lock, &timing).expect("a fenced lock");
    assert_eq!(term.term(), 5);
    let t1 = t0 + 10 * MS;
    let op = client.start(Operation::term(term), t1);
    assert!(drain(client).sent.is_empty(), "no renewal due yet");
    (op, t1)
}

/// The nodes each request of `sent` went to, where it is a release.
fn released(sent: &[(RequestId, Request)]) -> Vec<NodeId> {
    sent.iter()
        .filter(|(_, r)| r.command == Command::Release)
        .map(|(_, r)| r.node)
        .collect()
}

#[test]
fn close_releases_what_a_leaders_term_holds() {
    let settings = settings();
    let t0 = Instant::now();
    let mut client = new_client(&settings);
    let (_, t1) = leading(&mut client, &settings, t0);
    client.close(t1 + MS);
    let out = drain(&mut client);
    assert!(
        out.events
            .iter()
            .any(|(_, event, last)| *last && matches!(event, OpEvent::Closed)),
        "{out:?}"
    );
    assert_eq!(
        released(&out.sent),
        [NodeId(0), NodeId(1), NodeId(2)],
        "{out:?}"
    );
}

/// A resignation runs inside the term's operation: a release of our value
/// that does not free the name leaves the term standing and renewed; one
/// that does ends it; a term over resigns no more.
#[test]
fn a_term_resigns_in_its_own_operation_and_stands_when_the_release_fails() {
    use redlock_core::{LeadershipLoss, TermEvent};
    let settings = settings();
    let t0 = Instant::now();
    let mut client = new_client(&settings);
    let (op, t1) = leading(&mut client, &settings, t0);
    assert!(client.resign(op, t1));
    assert!(!client.resign(op, t1), "one resignation at a time");
    let out = drain(&mut client);
    assert_eq!(released(&out.sent), [NodeId(0), NodeId(1), NodeId(2)]);
    // Every node times out: the name is not known free.
    let deadline = client.poll_timeout().expect("the release's deadline");
    client.handle_timeout(deadline);
    let out = drain(&mut client);
    match out.events.as_slice() {
        [(whose, OpEvent::Term(TermEvent::Resigned(report)), false)] if *whose == op => {
            assert!(!report.frees_lock(), "{report}");
        }
        other => panic!("expected a failed resignation: {other:?}"),
    }
    // The term renews again.
    let due = client.poll_timeout().expect("a renewal");
    client.handle_timeout(due);
    let renewal = drain(&mut client).sent;
    assert!(
        !renewal.is_empty()
            && renewal
                .iter()
                .all(|(_, r)| matches!(r.command, Command::Extend { .. })),
        "{renewal:?}"
    );
    // Resigned again, the nodes delete our value: the term ends. The
    // renewal's late answers count for nothing.
    assert!(client.resign(op, due));
    let release = drain(&mut client).sent;
    assert_eq!(released(&release), [NodeId(0), NodeId(1), NodeId(2)]);
    answer(&mut client, &renewal, Response::Int(1), due + MS);
    assert!(drain(&mut client).events.is_empty(), "a renewal's answers");
    answer(&mut client, &release, Response::Int(1), due + MS);
    let out = drain(&mut client);
    match out.events.as_slice() {
        [
            (_, OpEvent::Term(TermEvent::Resigned(report)), false),
            (_, OpEvent::Term(TermEvent::Lost(LeadershipLoss::Resigned)), true),
        ] => assert!(report.frees_lock()),
        other => panic!("expected a resignation: {other:?}"),
    }
    assert!(released(&out.sent).is_empty(), "nothing left to release");
    assert!(!client.resign(op, due + MS), "over");
}

/// A term lost (its renewal refused, or its renew deadline passed) has its
/// value released where it may be left: it would hold off the next leader
/// until its TTL.
#[test]
fn a_lost_term_releases_the_value_it_may_have_left() {
    use redlock_core::{LeadershipLoss, TermEvent};
    let settings = settings();
    let t0 = Instant::now();
    // Refused: another owner on two nodes.
    let mut client = new_client(&settings);
    let (op, _) = leading(&mut client, &settings, t0);
    let due = client.poll_timeout().expect("a renewal");
    client.handle_timeout(due);
    let renewal = drain(&mut client).sent;
    answer(&mut client, &renewal[..2], Response::Int(0), due + MS);
    let out = drain(&mut client);
    assert!(
        matches!(
            out.events.last(),
            Some((whose, OpEvent::Term(TermEvent::Lost(LeadershipLoss::Lock(_))), true)) if *whose == op
        ),
        "{out:?}"
    );
    assert_eq!(released(&out.sent), [NodeId(0), NodeId(1), NodeId(2)]);
    // The renew deadline passes with every renewal unanswered.
    let mut client = new_client(&settings);
    let (op, _) = leading(&mut client, &settings, t0);
    let mut lost = None;
    for _ in 0..1000 {
        let at = client.poll_timeout().expect("a renewal or the deadline");
        client.handle_timeout(at);
        let out = drain(&mut client);
        if let Some((whose, OpEvent::Term(TermEvent::Lost(reason)), true)) = out.events.last() {
            assert_eq!(*whose, op);
            lost = Some((reason.clone(), released(&out.sent)));
            break;
        }
    }
    let (reason, released) = lost.expect("lost within 1,000 timeouts");
    assert!(
        matches!(reason, LeadershipLoss::RenewDeadline(_)),
        "{reason}"
    );
    assert_eq!(released, [NodeId(0), NodeId(1), NodeId(2)]);
}

/// Every master's answer to what `client` sent, at `now` (each master a
/// model of the scripts), until it sends nothing more; what it reported.
fn served(
    client: &mut Client<StdRng>,
    masters: &mut [redis::Store],
    t0: Instant,
    now: Instant,
) -> Drained {
    let mut all = Drained::default();
    loop {
        let out = drain(client);
        if out.sent.is_empty() {
            all.events.extend(out.events);
            all.subscribed.extend(out.subscribed);
            all.notice_connects.extend(out.notice_connects);
            return all;
        }
        for (id, request) in &out.sent {
            let clock = (now - t0).as_micros() as f64;
            let response = masters[request.node.0].run(clock, request);
            client.handle_reply(*id, Reply::to(request, Ok(response)), now);
        }
        all.sent.extend(out.sent);
        all.events.extend(out.events);
        all.subscribed.extend(out.subscribed);
        all.notice_connects.extend(out.notice_connects);
    }
}

fn fair(settings: &Arc<Settings>, seed: u64, now: Instant) -> Operation<StdRng> {
    Operation::from(
        Acquisition::with_spec(
            Arc::clone(settings),
            redlock_core::LockSpec::Fair(b"report"),
            settings.default_ttl(),
            Attempts::Retry,
            now,
            StdRng::seed_from_u64(seed),
        )
        .unwrap(),
    )
}

/// The masters order a fair lock's waiters: a release notice goes to every
/// waiter of the client, not to its first alone.
#[test]
fn release_notices_reach_every_fair_waiter_of_the_client() {
    let settings = notices_settings();
    let t0 = Instant::now();
    let mut masters: Vec<redis::Store> = (0..3).map(|_| redis::Store::default()).collect();
    let mut holder = Client::new(Arc::clone(&settings), StdRng::seed_from_u64(1));
    holder.start(fair(&settings, 1, t0), t0);
    let out = served(&mut holder, &mut masters, t0, t0);
    let Some((_, OpEvent::Acquire(AcquireEvent::Acquired(mut held)), true)) =
        out.events.into_iter().last()
    else {
        panic!("the holder is granted the free lock");
    };
    let mut client = new_client(&settings);
    let t1 = t0 + MS;
    client.start(fair(&settings, 2, t1), t1);
    client.start(fair(&settings, 3, t1), t1);
    let out = served(&mut client, &mut masters, t0, t1);
    assert_eq!(out.notice_connects.len(), 3, "they listen: {out:?}");
    for node in 0..3 {
        client.handle_notices_connected(NodeId(node), t1 + MS);
    }
    let out = served(&mut client, &mut masters, t0, t1 + MS);
    assert_eq!(out.subscribed.len(), 3, "{out:?}");
    for node in 0..3 {
        client.handle_subscribed(NodeId(node), t1 + 2 * MS);
    }
    served(&mut client, &mut masters, t0, t1 + 2 * MS);
    // The holder releases; the masters publish on the lock's channel.
    let t2 = t1 + 10 * MS;
    holder.start(Operation::release(&mut held, t2), t2);
    served(&mut holder, &mut masters, t0, t2);
    let channel = settings.release_channel(&settings.key(b"report"));
    client.handle_notice(NodeId(0), channel.as_bytes(), t2 + MS);
    client.handle_notice(NodeId(1), channel.as_bytes(), t2 + MS);
    let out = drain(&mut client);
    let rounds: std::collections::HashSet<_> = acquires(out.sent)
        .into_iter()
        .map(|(_, r)| r.value)
        .collect();
    assert_eq!(rounds.len(), 2, "both waiters try at once");
}

/// What an adapter reads off an operation it gets back: an acquisition's
/// attempts, key and kind; nothing of the kind from another operation.
#[test]
fn an_operation_tells_its_attempts_key_and_kind_only_where_it_has_them() {
    let settings = settings();
    let t0 = Instant::now();
    let mut client = new_client(&settings);
    client.start(acquire(&settings, Attempts::Retry, t0), t0);
    // The first attempt finds the lock held everywhere; the second gets it.
    let out = drain(&mut client);
    let theirs = Response::Data(b"theirs".to_vec());
    answer(&mut client, &out.sent, theirs, t0 + MS);
    let mut retry = t0 + MS;
    let second = loop {
        let out = drain(&mut client);
        // The failed attempt's withdraws are answered; the next attempt's
        // acquires are what this waits for.
        let (acquires, rest): (Vec<_>, Vec<_>) = out
            .sent
            .into_iter()
            .partition(|(_, r)| matches!(r.command, Command::Acquire { .. }));
        answer(&mut client, &rest, Response::Int(0), retry);
        if !acquires.is_empty() {
            break acquires;
        }
        retry = client.poll_timeout().expect("a retry is due");
        client.handle_timeout(retry);
    };
    answer(&mut client, &second, Response::Int(1), retry + MS);
    let mut out = drain(&mut client);
    let acquisition = out.finished.pop().expect("granted");
    assert_eq!(acquisition.attempts(), Some(2));
    assert_eq!(acquisition.key(), Some(&settings.key(b"report")));
    assert_eq!(acquisition.lock_kind(), Some(&LockKind::Exclusive));
    let Some((_, OpEvent::Acquire(AcquireEvent::Acquired(mut lock)), true)) = out.events.pop()
    else {
        panic!("not granted: {out:?}");
    };
    let release = Operation::<StdRng>::release(&mut lock, retry + 2 * MS);
    assert_eq!(release.attempts(), None);
    assert_eq!(release.key(), None);
    assert_eq!(release.lock_kind(), None);
}

/// A release told to wait for every node decides once the last node
/// answered, not at the first certain outcome; one nobody reads the
/// answers of names no client and is the script on every node.
#[test]
fn a_release_for_every_node_waits_for_the_last_and_an_unattended_one_names_nobody() {
    let settings = settings();
    let t0 = Instant::now();
    let mut client = new_client(&settings);
    let mut lock = granted(&mut client, &settings, t0);
    let t1 = t0 + 2 * MS;
    for every_node in [false, true] {
        let mut release = Operation::release(&mut lock, t1);
        if every_node {
            release = release.every_node();
        }
        client.start(release, t1);
        let out = drain(&mut client);
        answer(&mut client, &out.sent[..2], Response::Int(1), t1 + MS);
        let decided = drain(&mut client)
            .events
            .iter()
            .any(|(_, event, last)| *last && matches!(event, OpEvent::Release(_)));
        assert_eq!(decided, !every_node, "every node: {every_node}");
        answer(&mut client, &out.sent[2..], Response::Int(1), t1 + MS);
        drain(&mut client);
    }
    let undo = Operation::<StdRng>::release(&mut lock, t1)
        .unattended()
        .undo(t1);
    assert_eq!(undo.len(), 3);
    assert!(
        undo.iter().all(|r| r.client.is_none() && !r.native),
        "{undo:?}"
    );
    // Only a release is changed by either.
    let acquisition = acquire(&settings, Attempts::Once, t1)
        .every_node()
        .unattended();
    assert_eq!(acquisition.attempts(), Some(1));
}

/// A reply delivered twice counts once: the client forgets a request at
/// its first answer, so no machine sees the copy (with the planted bug
/// `DuplicateVoteCounted`, a machine would count it as a second vote).
#[test]
fn a_reply_delivered_twice_counts_once() {
    #[cfg(feature = "planted-bugs")]
    redlock_core::planted::set(Some(redlock_core::planted::Bug::DuplicateVoteCounted));
    let settings = settings();
    let t0 = Instant::now();
    let mut client = new_client(&settings);
    client.start(acquire(&settings, Attempts::Once, t0), t0);
    let out = drain(&mut client);
    let yes = Reply::to(&out.sent[0].1, Ok(Response::Int(1)));
    client.handle_reply(out.sent[0].0, yes.clone(), t0 + MS);
    client.handle_reply(out.sent[0].0, yes, t0 + MS);
    let after = drain(&mut client);
    #[cfg(feature = "planted-bugs")]
    redlock_core::planted::set(None);
    assert!(after.events.is_empty(), "{after:?}");
}

/// An observer reads every node at once, then one period after each read
/// ended; it tells each new leader once (the same leader again is no
/// news), ignores a late answer to an earlier read, and ends only when
/// its client closes.
#[test]
fn an_observer_reads_every_period_and_tells_each_leader_once() {
    let settings = settings();
    let t0 = Instant::now();
    let period = Duration::from_secs(1);
    let mut client = new_client(&settings);
    let op = client.start(Operation::observe(&settings, b"leader", period, t0), t0);
    let holding = |id: &str, counter: &str| {
        Response::Array(vec![
            Response::Data(id.as_bytes().to_vec()),
            Response::Data(counter.as_bytes().to_vec()),
            Response::Nil,
        ])
    };
    let mut now = t0;
    let mut told = Vec::new();
    let mut late = Vec::new();
    for (id, counter) in [("a", "5"), ("a", "5"), ("b", "6"), ("b", "6")] {
        let reads = drain(&mut client).sent;
        assert_eq!(reads.len(), 3, "one read per node");
        assert!(reads.iter().all(|(_, r)| r.command == Command::ReadLeader));
        // A late answer to the read before counts for nothing.
        answer(&mut client, &late, holding("z", "9"), now);
        answer(&mut client, &reads, holding(id, counter), now + MS);
        let out = drain(&mut client);
        assert!(out.sent.is_empty() && out.finished.is_empty());
        for (whose, event, last) in out.events {
            assert!(whose == op && !last);
            match event {
                OpEvent::Observe(leader) => told.push((leader.id, leader.term)),
                other => panic!("{other:?}"),
            }
        }
        let next = client.poll_timeout().expect("the next read");
        assert_eq!(next, now + MS + period, "a period after the read ended");
        client.handle_timeout(next);
        now = next;
        late = reads;
    }
    assert_eq!(told, [(b"a".to_vec(), 5), (b"b".to_vec(), 6)]);
    client.close(now);
    let out = drain(&mut client);
    assert!(
        matches!(out.events.as_slice(), [(whose, OpEvent::Closed, true)] if *whose == op),
        "{out:?}"
    );
}

/// The attempts of a fenced acquire (a campaign) among `sent`.
fn campaigns(sent: Vec<(RequestId, Request)>) -> Vec<(RequestId, Request)> {
    sent.into_iter()
        .filter(|(_, request)| matches!(request.command, Command::AcquireFenced { .. }))
        .collect()
}

/// A resignation hands the name over to a campaign of the same client
/// waiting for it, as a release does: once its nodes answered that they
/// deleted our value and published nothing, the campaign attempts at
/// once, not at its retry. Its hand-over goes out even when the term is
/// cancelled mid-resignation.
#[test]
fn a_resignation_hands_the_name_to_the_clients_waiting_campaign() {
    use redlock_core::{LockSpec, TermEvent};
    let settings = notices_settings();
    for cancelled in [false, true] {
        let t0 = Instant::now();
        let mut client = new_client(&settings);
        let (term, t1) = leading(&mut client, &settings, t0);
        let campaign = Operation::acquire(
            Arc::clone(&settings),
            LockSpec::Fenced(b"leader"),
            settings.default_ttl(),
            Attempts::Retry,
            t1,
            StdRng::seed_from_u64(9),
        )
        .unwrap();
        client.start(campaign, t1);
        let leader = Response::Data(b"the leader".to_vec());
        let votes = campaigns(drain(&mut client).sent);
        answer(&mut client, &votes, leader.clone(), t1);
        assert_eq!(drain(&mut client).notice_connects.len(), 3, "it listens");
        for node in 0..3 {
            client.handle_notices_connected(NodeId(node), t1 + MS);
        }
        assert_eq!(drain(&mut client).subscribed.len(), 3);
        for node in 0..3 {
            client.handle_subscribed(NodeId(node), t1 + 2 * MS);
        }
        let again = campaigns(drain(&mut client).sent);
        answer(&mut client, &again, leader.clone(), t1 + 3 * MS);
        assert!(campaigns(drain(&mut client).sent).is_empty(), "it waits");
        let t2 = t1 + 20 * MS;
        assert!(client.resign(term, t2));
        let release = drain(&mut client).sent;
        assert_eq!(released(&release).len(), 3, "{release:?}");
        let out = if cancelled {
            // The leader goes away mid-resignation: its release still
            // hands over, telling the worst case.
            client.cancel(term, t2 + MS);
            drain(&mut client)
        } else {
            answer(&mut client, &release, Response::Int(1), t2 + MS);
            let out = drain(&mut client);
            assert!(
                out.events.iter().any(|(op, event, _)| *op == term
                    && matches!(event, OpEvent::Term(TermEvent::Resigned(_)))),
                "{out:?}"
            );
            out
        };
        assert_eq!(
            campaigns(out.sent.clone()).len(),
            3,
            "handed over at once (cancelled: {cancelled}): {out:?}"
        );
    }
}

/// An observer's reads are rounds of their own: a node's answer to an
/// earlier read that timed out, arriving during the next, is not counted
/// there (it would name a leader that read never saw on a quorum).
#[test]
fn an_observer_ignores_a_late_answer_to_an_earlier_read() {
    let settings = settings();
    let t0 = Instant::now();
    let period = Duration::from_secs(1);
    let mut client = new_client(&settings);
    let op = client.start(Operation::observe(&settings, b"leader", period, t0), t0);
    let holding = |id: &str| {
        Response::Array(vec![
            Response::Data(id.as_bytes().to_vec()),
            Response::Data(b"5".to_vec()),
            Response::Nil,
        ])
    };
    // The first read: node c does not answer in time.
    let first = drain(&mut client).sent;
    answer(&mut client, &first[..2], holding("a"), t0 + MS);
    let deadline = client.poll_timeout().expect("the read's deadline");
    client.handle_timeout(deadline);
    drain(&mut client);
    // The second read: b names another id, and c's late answer to the
    // first read names it too.
    let next = client.poll_timeout().expect("the next read");
    client.handle_timeout(next);
    let second = drain(&mut client).sent;
    assert_eq!(second.len(), 3);
    answer(&mut client, &second[1..2], holding("b"), next + MS);
    answer(&mut client, &first[2..], holding("b"), next + MS);
    let out = drain(&mut client);
    assert!(
        !out.events
            .iter()
            .any(|(_, event, _)| matches!(event, OpEvent::Observe(leader) if leader.id == b"b")),
        "a late answer counted: {out:?}"
    );
    answer(&mut client, &second[..1], holding("a"), next + 2 * MS);
    answer(&mut client, &second[2..], holding("a"), next + 2 * MS);
    let told: Vec<_> = drain(&mut client)
        .events
        .into_iter()
        .filter(|(whose, _, _)| *whose == op)
        .collect();
    assert!(told.is_empty(), "the same leader is no news: {told:?}");
}

/// Each request goes in the form its node's last connection can take,
/// picked by the client as it sends it ([`Request::form`]): a plain
/// command where the server has one, the script by its digest elsewhere;
/// a node reconnected to another server is sent what that one takes.
#[test]
fn each_request_goes_in_the_form_its_nodes_last_connection_can_take() {
    let settings = settings();
    let t0 = Instant::now();
    let mut client = new_client(&settings);
    let valkey = NodeFacts::new(Server::Valkey, Version(9, 1, 2));
    let redis = NodeFacts::new(Server::Redis, Version(7, 0, 15));
    client.handle_connected(NodeId(0), &found(&[], valkey), t0);
    client.handle_connected(NodeId(2), &found(&[], redis), t0);
    let op = client.start(acquire(&settings, Attempts::Once, t0), t0);
    let sent = drain(&mut client).sent;
    let forms: Vec<Form> = sent.iter().map(|(_, request)| request.form).collect();
    let set_nx_get = Form::Native(Native::SetNxGet);
    assert_eq!(forms, [set_nx_get, Form::Digest, set_nx_get]);
    for (id, request) in &sent {
        // `SET NX GET` answers nil where it set the key; the script, 1.
        let granted = match request.form {
            Form::Native(_) => Response::Nil,
            _ => Response::Int(1),
        };
        client.handle_reply(*id, Reply::to(request, Ok(granted)), t0 + MS);
    }
    let mut lock = match drain(&mut client).events.pop() {
        Some((whose, OpEvent::Acquire(AcquireEvent::Acquired(lock)), true)) if whose == op => lock,
        other => panic!("not granted: {other:?}"),
    };
    // Node 0 comes back as a server that does not say what it is; node 1
    // as a Valkey with `DELIFEQ`.
    let t1 = t0 + 10 * MS;
    client.handle_disconnected(NodeId(0), t1);
    client.handle_connected(NodeId(0), &found(&[], NodeFacts::default()), t1);
    client.handle_connected(NodeId(1), &found(&[], valkey), t1);
    client.start(Operation::release(&mut lock, t1), t1);
    let sent = drain(&mut client).sent;
    let forms: Vec<Form> = sent.iter().map(|(_, request)| request.form).collect();
    assert_eq!(
        forms,
        [Form::Digest, Form::Native(Native::DelIfEq), Form::Digest]
    );
}

/// A server that may evict lock keys is said at each connection, unless
/// the settings allow eviction; one that may lose locks at a restart, once
/// per node, unless they accept it.
#[test]
fn servers_that_may_lose_locks_are_said_as_the_settings_ask() {
    use redlock_core::{Config, WeakPersistence};
    let t0 = Instant::now();
    let risky = Connected {
        evicting: Some("allkeys-lru".to_owned()),
        weak_persistence: Some("appendonly no".to_owned()),
        ..Connected::default()
    };
    let said = |config: Config| {
        let settings = Arc::new(config.validate().unwrap());
        let mut client = new_client(&settings);
        let mut health = Vec::new();
        for at in 0..2 {
            client.handle_connected(NodeId(1), &risky, t0 + at * MS);
            client.handle_disconnected(NodeId(1), t0 + at * MS);
            health.extend(drain(&mut client).health);
        }
        health
    };
    let evict = HealthChange::MayEvict {
        node: NodeId(1),
        policy: "allkeys-lru".to_owned(),
    };
    let lose = HealthChange::MayLoseLocks {
        node: NodeId(1),
        reason: "appendonly no".to_owned(),
    };
    let three = || three_nodes(3, Duration::from_secs(10));
    assert_eq!(said(three()), [evict.clone(), lose.clone(), evict.clone()]);
    let refusing = three().weak_persistence(WeakPersistence::Refuse);
    assert_eq!(said(refusing), [evict.clone(), lose.clone(), evict.clone()]);
    let accepting = three().weak_persistence(WeakPersistence::Accept);
    assert_eq!(said(accepting), [evict.clone(), evict]);
    assert_eq!(said(three().allow_eviction(true)), [lose]);
}

fn noscript(request: &Request) -> Reply {
    failed(
        request,
        NodeErrorKind::NoScript,
        "NOSCRIPT No matching script.",
    )
}

/// Extends `lock` at `now`: its three requests, and its operation.
fn extending(
    client: &mut Client<StdRng>,
    settings: &Arc<Settings>,
    lock: &mut redlock_core::Lock,
    now: Instant,
) -> (OpId, Vec<(RequestId, Request)>) {
    let extension = Operation::extend(lock, settings.default_ttl(), now).expect("valid");
    let op = client.start(extension, now);
    let sent = drain(client).sent;
    assert!(
        sent.iter()
            .all(|(_, request)| matches!(request.command, Command::Extend { .. })),
        "{sent:?}"
    );
    assert_eq!(sent.len(), 3);
    (op, sent)
}

/// A request its node answered `NOSCRIPT` (its script cache was flushed)
/// is sent again in full, to the same node, for the same operation, while
/// it is the last request for its lock key sent there: the node runs the
/// repeat after everything sent before it, as it would have run the first.
/// A release is sent again even once its operation decided: it must
/// arrive.
#[test]
fn a_request_answered_noscript_is_sent_again_in_full_while_it_is_the_last_for_its_key() {
    let settings = settings();
    let t0 = Instant::now();
    let mut client = new_client(&settings);
    let mut lock = granted(&mut client, &settings, t0);
    let t1 = t0 + 100 * MS;
    let (op, sent) = extending(&mut client, &settings, &mut lock, t1);
    client.handle_reply(sent[0].0, noscript(&sent[0].1), t1 + MS);
    let again = drain(&mut client).sent;
    assert_eq!(again.len(), 1, "sent again at once");
    let (id, repeat) = &again[0];
    assert!(
        repeat.form == Form::InFull && sent[0].1.form == Form::Digest,
        "in full this time"
    );
    assert!(!repeat.native, "the script itself, never a plain command");
    assert_eq!(
        (repeat.node, repeat.command),
        (NodeId(0), sent[0].1.command)
    );
    client.handle_reply(*id, Reply::to(repeat, Ok(Response::Int(1))), t1 + 2 * MS);
    answer(&mut client, &sent[1..], Response::Int(1), t1 + 2 * MS);
    let out = drain(&mut client);
    match &out.events[..] {
        [(whose, OpEvent::Extend(Ok(extended)), true)] if *whose == op => {
            assert_eq!(
                extended.votes.get(NodeId(0)),
                Some(&redlock_core::NodeVote::Granted),
                "node 0's repeat counted: {extended:?}"
            )
        }
        other => panic!("not extended: {other:?}"),
    }

    // A release decided without node 0, which then answers NOSCRIPT.
    let t2 = t1 + 100 * MS;
    client.start(Operation::release(&mut lock, t2), t2);
    let sent = drain(&mut client).sent;
    answer(&mut client, &sent[1..], Response::Int(1), t2 + MS);
    assert!(matches!(
        &drain(&mut client).events[..],
        [(_, OpEvent::Release(_), true)]
    ));
    client.handle_reply(sent[0].0, noscript(&sent[0].1), t2 + 2 * MS);
    let again = drain(&mut client).sent;
    assert!(
        matches!(&again[..], [(_, repeat)] if repeat.form == Form::InFull && repeat.command == Command::Release),
        "{again:?}"
    );
    // Within its deadline, the repeat makes its node overdue at that
    // deadline, as the first send would have.
    assert_eq!(client.poll_timeout(), Some(again[0].1.deadline));
    client.handle_reply(
        again[0].0,
        Reply::to(&again[0].1, Ok(Response::Int(1))),
        t2 + 3 * MS,
    );
    assert!(client.is_idle());
    // Answered NOSCRIPT only at its deadline: the repeat is overdue at once
    // (the node's lateness is not counted twice) and waited for until it
    // is given up.
    let t3 = t2 + 100 * MS;
    client.start(Operation::release(&mut lock, t3), t3);
    let sent = drain(&mut client).sent;
    answer(&mut client, &sent[1..], Response::Int(1), t3 + MS);
    let deadline = sent[0].1.deadline;
    client.handle_reply(sent[0].0, noscript(&sent[0].1), deadline);
    let again = drain(&mut client).sent;
    assert_eq!(again.len(), 1);
    assert_eq!(client.poll_timeout(), Some(again[0].1.give_up_at));
    assert!(again[0].1.give_up_at > deadline);
}

/// Where a later request for the same lock key went to the node after the
/// one it answered `NOSCRIPT`, the repeat would run after that one, out of
/// order (an extend after the release that followed it would take the key
/// back for a whole TTL): it is not sent, and its operation counts the node
/// as failed with that error.
#[test]
fn a_request_answered_noscript_is_not_sent_again_behind_a_later_one_for_its_key() {
    let settings = settings();
    let t0 = Instant::now();
    let mut client = new_client(&settings);
    let mut lock = granted(&mut client, &settings, t0);
    let t1 = t0 + 100 * MS;
    let (op, extends) = extending(&mut client, &settings, &mut lock, t1);
    let mut release = lock.clone();
    client.start(Operation::release(&mut release, t1 + MS), t1 + MS);
    let releases = drain(&mut client).sent;
    assert_eq!(releases.len(), 3);
    client.handle_reply(extends[0].0, noscript(&extends[0].1), t1 + 2 * MS);
    let out = drain(&mut client);
    assert!(
        out.sent.is_empty(),
        "sent again behind the release: {:?}",
        out.sent
    );
    answer(&mut client, &extends[1..], Response::Int(1), t1 + 2 * MS);
    let out = drain(&mut client);
    match &out.events[..] {
        [(whose, OpEvent::Extend(Ok(extended)), true)] if *whose == op => {
            assert!(
                matches!(extended.votes.get(NodeId(0)), Some(redlock_core::NodeVote::Failed(error)) if error.kind == NodeErrorKind::NoScript && error.detail.contains("not sent again")),
                "{extended:?}"
            );
        }
        other => panic!("not extended: {other:?}"),
    }
    answer(&mut client, &releases, Response::Int(1), t1 + 3 * MS);
    let _ = drain(&mut client);
    assert!(client.is_idle());
}

#[cfg(feature = "planted-bugs")]
#[test]
fn the_noscript_test_catches_a_repeat_that_overtakes_a_later_request() {
    assert_catches(
        redlock_core::planted::Bug::NoScriptResendOvertakes,
        a_request_answered_noscript_is_not_sent_again_behind_a_later_one_for_its_key,
    );
}

/// The requests of `sent` to `node`, by command.
fn to_node(sent: &[(RequestId, Request)], node: usize) -> Vec<Command> {
    sent.iter()
        .filter(|(_, request)| request.node == NodeId(node))
        .map(|(_, request)| request.command)
        .collect()
}

/// A Redis Cluster's connection keeps no order between requests (it routes
/// each on its own and sends it again on MOVED, ASK or TRYAGAIN), so the
/// client sends a cluster node one request per lock key at a time: the next
/// once the one before was answered, or forgotten. A request repeated in
/// full after `NOSCRIPT` goes before those that wait. Plain masters get
/// every request at once.
#[test]
fn a_cluster_node_is_sent_one_request_per_lock_key_at_a_time() {
    let settings = Arc::new(
        three_nodes(3, Duration::from_secs(10))
            .validate()
            .unwrap()
            .with_cluster_nodes([NodeId(0)]),
    );
    let t0 = Instant::now();
    let mut client = new_client(&settings);
    let mut lock = granted(&mut client, &settings, t0);
    let is_release = |command: &Command| *command == Command::Release;
    for (round, answer_first) in ["answered", "noscript", "forgotten"]
        .into_iter()
        .enumerate()
    {
        let t1 = t0 + (round as u32 + 1) * 100 * MS;
        let (_, extends) = extending(&mut client, &settings, &mut lock, t1);
        let mut release = lock.clone();
        client.start(Operation::release(&mut release, t1 + MS), t1 + MS);
        let releases = drain(&mut client).sent;
        assert_eq!(to_node(&releases, 0), [], "node 0's waits for the extend");
        assert!(to_node(&releases, 1).iter().all(is_release), "{releases:?}");
        assert_eq!(releases.len(), 2, "the plain masters' go at once");
        let node_0 = &extends[0];
        assert_eq!(node_0.1.node, NodeId(0));
        let now = match answer_first {
            "answered" => {
                client.handle_reply(
                    node_0.0,
                    Reply::to(&node_0.1, Ok(Response::Int(1))),
                    t1 + 2 * MS,
                );
                t1 + 2 * MS
            }
            "noscript" => {
                client.handle_reply(node_0.0, noscript(&node_0.1), t1 + 2 * MS);
                let again = drain(&mut client).sent;
                assert!(
                    matches!(&again[..], [(_, repeat)] if repeat.form == Form::InFull && repeat.node == NodeId(0) && !is_release(&repeat.command)),
                    "the repeat alone, before the release: {again:?}"
                );
                client.handle_reply(
                    again[0].0,
                    Reply::to(&again[0].1, Ok(Response::Int(1))),
                    t1 + 3 * MS,
                );
                t1 + 3 * MS
            }
            _ => {
                client.handle_timeout(node_0.1.deadline);
                node_0.1.deadline
            }
        };
        let out = drain(&mut client);
        assert_eq!(
            to_node(&out.sent, 0),
            [Command::Release],
            "{answer_first}: its turn came"
        );
        answer(&mut client, &extends[1..], Response::Int(1), now);
        answer(&mut client, &releases, Response::Int(1), now);
        answer(&mut client, &out.sent, Response::Int(1), now);
        let _ = drain(&mut client);
        assert!(client.is_idle(), "{answer_first}");
    }
}

/// On a cluster node, a request that waits for its key's turn and need not
/// arrive is dropped once its deadline passed (its operation timed the node
/// out); one that must arrive goes however late, and is among what the
/// nodes are owed when a driver takes that out.
#[test]
fn a_cluster_nodes_waiting_request_is_dropped_past_its_deadline_unless_it_must_arrive() {
    let settings = Arc::new(
        three_nodes(3, Duration::from_secs(10))
            .validate()
            .unwrap()
            .with_cluster_nodes([NodeId(0)]),
    );
    let t0 = Instant::now();
    let mut client = new_client(&settings);
    let lock = granted(&mut client, &settings, t0);
    let t1 = t0 + 100 * MS;
    // Node 0 is sent the first release and holds the extend and the
    // second release behind it.
    client.start(Operation::release(&mut lock.clone(), t1), t1);
    let first = drain(&mut client).sent;
    let extension = Operation::extend(&mut lock.clone(), settings.default_ttl(), t1 + MS).unwrap();
    client.start(extension, t1 + MS);
    let extends = drain(&mut client).sent;
    client.start(
        Operation::release(&mut lock.clone(), t1 + 2 * MS),
        t1 + 2 * MS,
    );
    let second = drain(&mut client).sent;
    assert_eq!(to_node(&first, 0), [Command::Release]);
    assert_eq!(to_node(&extends, 0), []);
    assert_eq!(to_node(&second, 0), []);
    for sent in [&first, &extends, &second] {
        let others: Vec<_> = sent
            .iter()
            .filter(|(_, request)| request.node != NodeId(0))
            .cloned()
            .collect();
        answer(&mut client, &others, Response::Int(1), t1 + 3 * MS);
    }
    let _ = drain(&mut client);
    assert!(!client.is_idle(), "node 0 holds two requests");
    // Node 0 never answers the first release: given up, its turn passes.
    let give_up_at = first
        .iter()
        .find(|(_, request)| request.node == NodeId(0))
        .unwrap()
        .1
        .give_up_at;
    client.handle_timeout(give_up_at);
    let out = drain(&mut client);
    assert_eq!(
        to_node(&out.sent, 0),
        [Command::Release],
        "the extend dropped, the release sent past its deadline"
    );
    answer(&mut client, &out.sent, Response::Int(1), give_up_at + MS);
    let _ = drain(&mut client);
    assert!(client.is_idle());

    // What must arrive is owed too while it waits for its turn, and so
    // is what is in flight and must arrive (the other nodes' releases);
    // the extension in flight is not.
    let t2 = give_up_at + 100 * MS;
    let lock = granted(&mut client, &settings, t2);
    let extension = Operation::extend(&mut lock.clone(), settings.default_ttl(), t2).unwrap();
    client.start(extension, t2);
    client.start(Operation::release(&mut lock.clone(), t2 + MS), t2 + MS);
    let _ = drain(&mut client);
    let owed = client.take_owed();
    let owed: Vec<_> = owed
        .iter()
        .map(|request| (request.node, request.command))
        .collect();
    assert_eq!(
        owed,
        [
            (NodeId(0), Command::Release),
            (NodeId(1), Command::Release),
            (NodeId(2), Command::Release)
        ],
    );
}
