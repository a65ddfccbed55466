//! Leader election: the timing check, a term's loss instant and renewals,
//! resign (our term only, idempotent, kept when the release fails),
//! proclaim, the leader read and a watch whose terms only rise. Time is
//! passed in; no clock is read.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::{SeedableRng, rngs::StdRng};
use redlock_core::{
    Acquisition, Attempts, Command, Config, ConfigError, ElectionTiming, ExtendError, LeaderRead,
    LeaderReport, LeaderWatch, LeadershipLoss, Lock, LockSpec, Machine, NodeError, NodeErrorKind,
    Reply, Response, RoundId, Settings, Term, TermEvent,
};
use support::{drain, expect_lock};

fn settings(nodes: usize) -> Arc<Settings> {
    Arc::new(
        Config::new((0..nodes).map(|n| format!("n{n}")))
            .validate()
            .unwrap(),
    )
}

fn timing(settings: &Settings) -> ElectionTiming {
    ElectionTiming::new(
        settings,
        Duration::from_secs(10),
        Duration::from_secs(6),
        Duration::from_secs(1),
    )
    .unwrap()
}

/// A won campaign whose nodes held `counter` before: the term is counter + 1.
fn campaign(settings: &Arc<Settings>, counter: i64, t0: Instant) -> Lock {
    campaign_with(settings, &timing(settings), counter, t0)
}

/// [`campaign`] with a lease of `timing`.
fn campaign_with(
    settings: &Arc<Settings>,
    timing: &ElectionTiming,
    counter: i64,
    t0: Instant,
) -> Lock {
    let mut acquire = Acquisition::with_spec(
        settings.clone(),
        LockSpec::Fenced(b"leader"),
        timing.lease(),
        Attempts::Once,
        t0,
        StdRng::seed_from_u64(counter as u64),
    )
    .unwrap();
    for request in drain(&mut acquire) {
        let answer = Response::Array(vec![Response::Int(1), Response::Int(counter)]);
        acquire.handle_reply(Reply::to(&request, Ok(answer)), t0);
    }
    for request in drain(&mut acquire) {
        assert!(matches!(request.command, Command::StoreToken { .. }));
        acquire.handle_reply(Reply::to(&request, Ok(Response::Int(1))), t0);
    }
    expect_lock(&mut acquire)
}

fn events(term: &mut Term) -> Vec<TermEvent> {
    std::iter::from_fn(|| term.poll_event()).collect()
}

#[test]
fn timings_are_checked_like_client_go() {
    let settings = settings(3);
    let check = |lease, renew, retry| {
        ElectionTiming::new(
            &settings,
            Duration::from_millis(lease),
            Duration::from_millis(renew),
            Duration::from_millis(retry),
        )
    };
    assert!(check(10_000, 6_000, 1_000).is_ok());
    // The renew deadline must stay below the lease's validity (TTL - drift).
    let error = check(10_000, 9_950, 1_000).unwrap_err();
    assert!(matches!(error, ConfigError::ElectionTiming { .. }));
    println!("{error}");
    // ... and above 1.2 x the retry period.
    assert!(check(10_000, 1_200, 1_000).is_err());
    assert!(check(10_000, 1_300, 1_000).is_ok());
    assert!(check(10_000, 6_000, 0).is_err());
    // The lease is checked like any TTL.
    assert!(matches!(check(0, 6_000, 1_000), Err(ConfigError::ZeroTtl)));
    let default = ElectionTiming::default_for(&settings);
    assert!(
        ElectionTiming::new(
            &settings,
            default.lease().as_duration(),
            default.renew_deadline(),
            default.retry_period()
        )
        .is_ok()
    );
}

#[test]
fn the_term_is_the_fencing_token_and_loss_comes_before_the_validity_ends() {
    let settings = settings(3);
    let t0 = Instant::now();
    let lock = campaign(&settings, 41, t0);
    let valid_until = lock.valid_until();
    let mut term = Term::new(lock, &timing(&settings)).expect("fenced");
    assert_eq!(term.term(), 42);
    // Lost at the round's start + the renew deadline, before the validity.
    assert_eq!(term.lose_at(), t0 + Duration::from_secs(6));
    assert!(term.lose_at() < valid_until);
    // The renewal is due one retry period after the round.
    let due = term.poll_timeout().unwrap();
    assert_eq!(due, t0 + Duration::from_secs(1));
    term.handle_timeout(due);
    let sent = drain(&mut term);
    assert_eq!(sent.len(), 3);
    // No node answers: renewals are retried, then the deadline strikes.
    let mut now = due;
    for rounds in 0.. {
        if term.is_done() {
            break;
        }
        assert!(rounds < 100, "the renew deadline never ended the term");
        now = term.poll_timeout().unwrap();
        assert!(
            now <= t0 + Duration::from_secs(6),
            "never past the loss instant"
        );
        term.handle_timeout(now);
        drain(&mut term);
    }
    assert_eq!(now, t0 + Duration::from_secs(6));
    let events = events(&mut term);
    assert!(matches!(
        events.last(),
        Some(TermEvent::Lost(LeadershipLoss::RenewDeadline(_)))
    ));
    assert!(
        events[..events.len() - 1]
            .iter()
            .all(|e| matches!(e, TermEvent::RenewFailed(_)))
    );
    assert_eq!(term.poll_timeout(), None);
}

/// A lease long beside the renew deadline: the term still renews one retry
/// period after each round. (At a share of the lease, as a lock's
/// keep-alive does, the first renewal came 3 s in, after the 900 ms renew
/// deadline: every such term was lost.)
#[test]
fn a_long_lease_still_renews_every_retry_period() {
    let settings = settings(3);
    let retry = Duration::from_millis(200);
    let timing = ElectionTiming::new(
        &settings,
        Duration::from_secs(60),
        Duration::from_millis(900),
        retry,
    )
    .unwrap();
    let t0 = Instant::now();
    let mut term = Term::new(campaign_with(&settings, &timing, 0, t0), &timing).unwrap();
    for round in 1..=3 {
        let due = term.poll_timeout().unwrap();
        assert_eq!(due, t0 + retry * round, "round {round}");
        assert!(due < term.lose_at());
        term.handle_timeout(due);
        for request in drain(&mut term) {
            term.handle_reply(Reply::to(&request, Ok(Response::Int(1))), due);
        }
        assert!(
            matches!(events(&mut term).as_slice(), [TermEvent::Renewed { .. }]),
            "round {round}"
        );
    }
}

#[test]
fn default_timings_are_two_thirds_of_the_validity_and_a_quarter_of_that() {
    let settings = settings(3);
    let default = ElectionTiming::default_for(&settings);
    let lease = settings.default_ttl();
    assert_eq!(default.lease(), lease);
    let validity = lease.as_duration() - settings.drift(lease);
    assert_eq!(default.renew_deadline(), validity * 2 / 3);
    assert_eq!(default.retry_period(), validity * 2 / 3 / 4);
}

#[test]
fn a_term_is_over_once_it_is_lost_and_not_before() {
    let settings = settings(3);
    let t0 = Instant::now();
    let mut term = Term::new(campaign(&settings, 3, t0), &timing(&settings)).unwrap();
    assert!(!term.is_over());
    let lose_at = term.lose_at();
    term.handle_timeout(lose_at - Duration::from_millis(1));
    drain(&mut term);
    assert!(!term.is_over(), "an instant before: still leading");
    term.handle_timeout(lose_at);
    assert!(term.is_over());
    assert!(
        !term.resign(lose_at, |release| release),
        "nothing left to resign"
    );
}

#[test]
fn a_renewal_without_a_quorum_is_told_and_the_term_goes_on() {
    let settings = settings(3);
    let t0 = Instant::now();
    let mut term = Term::new(campaign(&settings, 8, t0), &timing(&settings)).unwrap();
    let due = term.poll_timeout().unwrap();
    term.handle_timeout(due);
    let sent = drain(&mut term);
    term.handle_reply(Reply::to(&sent[0], Ok(Response::Int(1))), due);
    for request in &sent[1..] {
        let down = NodeError::new(NodeErrorKind::Connection, "down");
        term.handle_reply(Reply::to(request, Err(down)), due);
    }
    let events = events(&mut term);
    assert!(
        matches!(events.as_slice(), [TermEvent::RenewFailed(_)]),
        "{events:?}"
    );
    assert!(!term.is_over());
    assert_eq!(term.lose_at(), t0 + Duration::from_secs(6), "not moved");
}

#[test]
fn a_renewal_moves_the_loss_instant_and_a_refusal_ends_the_term_at_once() {
    let settings = settings(3);
    let t0 = Instant::now();
    let mut term = Term::new(campaign(&settings, 0, t0), &timing(&settings)).unwrap();
    assert_eq!(term.term(), 1);
    let due = term.poll_timeout().unwrap();
    term.handle_timeout(due);
    for request in drain(&mut term) {
        term.handle_reply(Reply::to(&request, Ok(Response::Int(1))), due);
    }
    match events(&mut term).as_slice() {
        [TermEvent::Renewed { lose_at, .. }] => {
            assert_eq!(*lose_at, due + Duration::from_secs(6));
        }
        other => panic!("expected a renewal, got {other:?}"),
    }
    // The next renewal finds another owner on every node: lost at once.
    let due = term.poll_timeout().unwrap();
    term.handle_timeout(due);
    for request in drain(&mut term) {
        term.handle_reply(Reply::to(&request, Ok(Response::Int(0))), due);
    }
    let events = events(&mut term);
    assert!(
        matches!(
            events.last(),
            Some(TermEvent::Lost(LeadershipLoss::Lock(_)))
        ),
        "{events:?}"
    );
    assert!(term.is_done());
}

#[test]
fn resign_acts_on_our_value_keeps_the_term_when_it_fails_and_is_idempotent() {
    let settings = settings(3);
    let t0 = Instant::now();
    let mut term = Term::new(campaign(&settings, 6, t0), &timing(&settings)).unwrap();
    let now = t0 + Duration::from_millis(10);
    // First try: every node times out. The term stands.
    assert!(term.resign(now, |release| release), "leading");
    let sent = drain(&mut term);
    assert!(sent.iter().all(|r| r.value == *term.id()));
    assert!(sent.iter().all(|r| r.command == Command::Release));
    term.handle_timeout(term.poll_timeout().unwrap());
    match events(&mut term).as_slice() {
        [TermEvent::Resigned(report)] => assert!(!report.frees_lock()),
        other => panic!("{other:?}"),
    }
    assert!(!term.is_done(), "a failed resign keeps the leadership");
    // Second try: the nodes release it.
    assert!(term.resign(now, |release| release), "still leading");
    for request in drain(&mut term) {
        term.handle_reply(Reply::to(&request, Ok(Response::Int(1))), now);
    }
    assert!(term.is_done());
    match events(&mut term).as_slice() {
        [
            TermEvent::Resigned(report),
            TermEvent::Lost(LeadershipLoss::Resigned),
        ] => assert!(report.frees_lock()),
        other => panic!("{other:?}"),
    }
    // Idempotent: nothing more to send, nothing more to tell.
    assert!(!term.resign(now, |release| release));
    assert!(drain(&mut term).is_empty());
    assert!(events(&mut term).is_empty());
}

#[test]
fn proclaim_writes_under_our_term_and_fails_where_a_higher_term_is_stored() {
    let settings = settings(3);
    let t0 = Instant::now();
    let term = Term::new(campaign(&settings, 2, t0), &timing(&settings)).unwrap();
    let mut proclaim = term.proclaim(b"10.0.0.7:8080", t0);
    let sent = drain(&mut proclaim);
    assert_eq!(sent.len(), 3);
    let request = &sent[0];
    assert_eq!(request.command, Command::Proclaim { term: 3 });
    assert_eq!(request.script(), redlock_core::scripts::PROCLAIM);
    assert_eq!(request.keys[2].as_bytes(), b"{leader}\0leader");
    let args: Vec<String> = request
        .arguments()
        .map(|a| match a {
            redlock_core::Argument::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
            redlock_core::Argument::Int(n) => n.to_string(),
        })
        .collect();
    assert_eq!(args, [term.id().as_str(), "3", "10.0.0.7:8080"]);
    proclaim.handle_reply(Reply::to(&sent[0], Ok(Response::Int(1))), t0);
    assert_eq!(proclaim.poll_event(), None);
    proclaim.handle_reply(Reply::to(&sent[1], Ok(Response::Int(1))), t0);
    assert_eq!(proclaim.poll_event(), Some(Ok(3)));

    let mut refused = term.proclaim(b"x", t0);
    let sent = drain(&mut refused);
    refused.handle_reply(Reply::to(&sent[0], Ok(Response::Int(-1))), t0);
    refused.handle_reply(Reply::to(&sent[1], Ok(Response::Int(0))), t0);
    let outcome = refused.poll_event().unwrap();
    assert!(matches!(outcome, Err(ref e) if e.is_lost()), "{outcome:?}");
}

#[test]
fn one_refusal_does_not_fail_a_proclaim_the_others_write() {
    let settings = settings(3);
    let t0 = Instant::now();
    let term = Term::new(campaign(&settings, 4, t0), &timing(&settings)).unwrap();
    let mut proclaim = term.proclaim(b"addr", t0);
    let sent = drain(&mut proclaim);
    proclaim.handle_reply(Reply::to(&sent[0], Ok(Response::Int(-1))), t0);
    assert_eq!(proclaim.poll_event(), None, "two nodes may still write it");
    assert!(!proclaim.is_done());
    for request in &sent[1..] {
        proclaim.handle_reply(Reply::to(request, Ok(Response::Int(1))), t0);
    }
    assert_eq!(proclaim.poll_event(), Some(Ok(5)));
    assert!(proclaim.is_done());
}

#[test]
fn a_proclaim_nobody_answers_ends_at_its_deadline_without_a_quorum() {
    let settings = settings(3);
    let t0 = Instant::now();
    let term = Term::new(campaign(&settings, 4, t0), &timing(&settings)).unwrap();
    let mut proclaim = term.proclaim(b"addr", t0);
    assert_eq!(drain(&mut proclaim).len(), 3);
    let deadline = proclaim.poll_timeout().expect("a deadline while open");
    assert!(deadline > t0);
    proclaim.handle_timeout(deadline - Duration::from_millis(1));
    assert_eq!(proclaim.poll_event(), None, "not before its deadline");
    assert!(!proclaim.is_done());
    proclaim.handle_timeout(deadline);
    let outcome = proclaim.poll_event();
    assert!(
        matches!(outcome, Some(Err(ExtendError::NoQuorum { .. }))),
        "{outcome:?}"
    );
    assert!(proclaim.is_done());
    assert_eq!(proclaim.poll_timeout(), None);
    proclaim.handle_timeout(deadline);
    assert_eq!(proclaim.poll_event(), None, "one outcome");
}

fn read(settings: &Settings, answers: &[Result<Response, NodeError>]) -> LeaderReport {
    let t0 = Instant::now();
    let mut read = LeaderRead::new(settings, b"leader", RoundId(1), t0);
    let sent = drain(&mut read);
    for (request, answer) in sent.iter().zip(answers) {
        read.handle_reply(Reply::to(request, answer.clone()), t0);
    }
    if !read.is_done() {
        read.handle_timeout(read.poll_timeout().unwrap());
    }
    read.poll_event().unwrap()
}

fn node(
    holder: Option<&str>,
    counter: Option<u64>,
    record: Option<&str>,
) -> Result<Response, NodeError> {
    let data = |s: &str| Response::Data(s.as_bytes().to_vec());
    Ok(Response::Array(vec![
        holder.map_or(Response::Nil, data),
        counter.map_or(Response::Nil, |c| data(&c.to_string())),
        record.map_or(Response::Nil, data),
    ]))
}

#[test]
fn the_leader_is_an_id_on_a_quorum_and_a_watch_tells_only_rising_terms() {
    let settings = settings(3);
    let timeout = Err(NodeError::new(NodeErrorKind::Timeout, "slow"));
    let report = read(
        &settings,
        &[
            node(Some("a"), Some(5), Some("5\0a\0addr-a")),
            node(Some("a"), Some(5), None),
            timeout.clone(),
        ],
    );
    let leader = report.leader().expect("a on a quorum");
    assert_eq!((leader.id.as_slice(), leader.term), (&b"a"[..], 5));
    assert_eq!(leader.value.as_deref(), Some(&b"addr-a"[..]));
    // A record of an older term is not this leader's value.
    let stale = read(
        &settings,
        &[
            node(Some("b"), Some(6), Some("5\0a\0addr-a")),
            node(Some("b"), Some(6), None),
            node(None, Some(5), None),
        ],
    );
    let b = stale.leader().unwrap();
    assert_eq!((b.term, b.value), (6, None));
    // No quorum holds one id: nobody leads, as far as this read tells.
    let split = read(
        &settings,
        &[
            node(Some("a"), Some(5), None),
            node(Some("b"), Some(6), None),
            timeout.clone(),
        ],
    );
    assert_eq!(split.leader(), None);

    let mut watch = LeaderWatch::new();
    assert_eq!(watch.handle_report(&report).map(|l| l.term), Some(5));
    assert_eq!(watch.handle_report(&report), None, "told once");
    assert_eq!(watch.handle_report(&stale).map(|l| l.term), Some(6));
    // Another leader under a lower term: the servers lost their data
    // (restarted empty), and the observer follows the leader there is.
    assert_eq!(
        watch.handle_report(&report).map(|l| (l.id, l.term)),
        Some((b"a".to_vec(), 5)),
        "another id is news, whatever its term"
    );
    assert_eq!(watch.handle_report(&report), None, "told once");
    // The same leader under a lower term (a minority behind): nothing.
    let behind = read(
        &settings,
        &[
            node(Some("a"), Some(4), None),
            node(Some("a"), Some(4), None),
            timeout,
        ],
    );
    assert_eq!(behind.leader().map(|l| l.term), Some(4));
    assert_eq!(
        watch.handle_report(&behind),
        None,
        "never back for one leader"
    );
    assert_eq!(watch.last().map(|l| l.term), Some(5));
}

#[test]
fn the_leaders_value_is_a_record_of_its_id_and_its_term() {
    let settings = settings(3);
    let report = read(
        &settings,
        &[
            node(Some("a"), Some(5), Some("5\0b\0addr-b")),
            node(Some("a"), Some(5), Some("4\0a\0old-a")),
            node(Some("a"), Some(5), Some("5\0a\0addr-a")),
        ],
    );
    let leader = report.leader().unwrap();
    assert_eq!(leader.value.as_deref(), Some(&b"addr-a"[..]));
}

#[test]
fn a_leader_read_reports_a_silent_node_as_timed_out_at_its_deadline() {
    let settings = settings(3);
    let t0 = Instant::now();
    let mut read = LeaderRead::new(&settings, b"leader", RoundId(1), t0);
    let sent = drain(&mut read);
    for request in &sent[..2] {
        read.handle_reply(Reply::to(request, node(Some("a"), Some(5), None)), t0);
    }
    assert!(!read.is_done(), "a node has not answered");
    let deadline = read.poll_timeout().expect("a deadline while open");
    assert_eq!(deadline, t0 + settings.node_timeout());
    read.handle_timeout(deadline - Duration::from_millis(1));
    assert_eq!(read.poll_event(), None, "not before its deadline");
    read.handle_timeout(deadline);
    assert!(read.is_done());
    assert_eq!(read.poll_timeout(), None);
    let report = read.poll_event().expect("the report at the deadline");
    assert!(matches!(
        &report.reads[2],
        Err(error) if error.kind == NodeErrorKind::Timeout
    ));
    assert_eq!(report.leader().map(|leader| leader.term), Some(5));
    read.handle_timeout(deadline);
    assert_eq!(read.poll_event(), None, "one report");
}

/// A retry period close to the lease's validity: the renewal still comes
/// two per-node timeouts before the validity ends, so that it has time to
/// finish.
#[test]
fn a_renewal_leaves_two_node_timeouts_before_the_validity_ends() {
    let node_timeout = Duration::from_millis(150);
    let settings = Arc::new(
        Config::new(["n0", "n1", "n2"])
            .ttl(Duration::from_secs(1))
            .node_timeout(node_timeout)
            .validate()
            .unwrap(),
    );
    let lease = Duration::from_secs(1);
    let retry = Duration::from_millis(740);
    let timing = ElectionTiming::new(&settings, lease, Duration::from_millis(900), retry).unwrap();
    let t0 = Instant::now();
    let lock = campaign_with(&settings, &timing, 0, t0);
    let valid_until = lock.valid_until();
    let term = Term::new(lock, &timing).unwrap();
    let due = term.poll_timeout().unwrap();
    assert!(due < t0 + retry, "not at the retry period");
    assert_eq!(due, valid_until - node_timeout * 2);
}
