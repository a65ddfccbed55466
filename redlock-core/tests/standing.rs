//! `Standing`: what a holder's handle reads between its driver's turns.
//! Whatever the nodes answer, it never reads a loss before the keep-alive
//! (or the term) tells one, and where it reads one by the clock, it is the
//! one the machine tells at that instant. Time is passed in; no clock is
//! read.

mod support;

use std::fmt::Debug;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::{RngExt, SeedableRng, rngs::StdRng};
use redlock_core::{
    Acquisition, Attempts, Config, ElectionTiming, ExtendError, KeepAlive, KeptLock, KeptLockEvent,
    LeadershipLoss, Lock, LockSpec, LossReason, Machine, NodeError, NodeErrorKind, OpEvent, Reply,
    Response, Settings, Standing, Term, TermEvent,
};
use support::{drain, expect_lock, granted};

const NS: Duration = Duration::from_nanos(1);

fn settings() -> Arc<Settings> {
    Arc::new(Config::new(["a", "b", "c"]).validate().unwrap())
}

/// Drives `machine` through its timers until it ends, each request
/// answered as `rng` picks (yes, no, an error or silence) for a few
/// timers, then by nobody; its events fed to `standing` as a handle takes
/// them (no node refuses unless `refusals`); checks the standing's reading an
/// instant before each timer (never a loss the machine has not told) and
/// at each timer, before the machine acts (a loss by the clock is the one
/// the machine then tells). `stands` is what `handle_event` takes; `lost`
/// picks the loss out of an event.
fn drive<M: Machine, L: Clone + PartialEq + Debug>(
    mut machine: M,
    standing: &mut Standing<L>,
    rng: &mut StdRng,
    refusals: bool,
    stands: impl Fn(&mut Standing<L>, M::Event) -> bool,
    lost: impl Fn(&M::Event) -> Option<L>,
) -> L {
    // Random answers for a while, then every node down for good.
    let answered = rng.random_range(0..40);
    for step in 0..10_000 {
        let at = machine
            .poll_timeout()
            .expect("a timer until the machine ends");
        assert_eq!(standing.loss(at - NS), None, "read lost before it was");
        let read = standing.loss(at);
        let end = standing.until();
        machine.handle_timeout(at);
        for request in drain(&mut machine) {
            let yes = if refusals { 4 } else { 6 };
            let pick = if step < answered {
                rng.random_range(0..10)
            } else {
                9
            };
            let answer = match pick {
                pick if pick < yes => Ok(Response::Int(1)),
                pick if pick == yes && refusals => Ok(Response::Int(0)),
                pick if pick < 8 => Err(NodeError::new(NodeErrorKind::Connection, "down")),
                _ => continue,
            };
            machine.handle_reply(Reply::to(&request, answer), at);
        }
        let mut told = None;
        while let Some(event) = machine.poll_event() {
            told = told.or(lost(&event));
            let loses = stands(standing, event);
            assert!(
                !loses || standing.loss(at).is_some(),
                "told lost, read standing"
            );
        }
        if let Some(reading) = &read {
            assert_eq!(
                told.as_ref(),
                Some(reading),
                "the clock read a loss the machine did not tell then"
            );
        }
        if let Some(reason) = told {
            if at >= end {
                // Lost at the end: the clock read it before the machine
                // told it.
                assert_eq!(read.as_ref(), Some(&reason), "the clock missed the end");
            }
            assert!(machine.is_done());
            assert_eq!(standing.loss(at), Some(reason.clone()), "told, then read");
            assert_eq!(standing.poll_timeout(), None);
            return reason;
        }
        assert_eq!(
            standing.poll_timeout(),
            Some(standing.until()),
            "a timer while it stands"
        );
    }
    panic!("the machine never ended");
}

#[test]
fn a_locks_standing_reads_the_keep_alives_loss_never_sooner() {
    let settings = settings();
    let mut seen = Vec::new();
    for seed in 0..300 {
        let lock = granted(&settings, seed, Instant::now());
        let mut standing = Standing::for_lock(&lock);
        let options = match seed % 3 {
            0 => KeepAlive::default(),
            other => KeepAlive::default().max_extensions(other),
        };
        let kept = KeptLock::new(lock, options);
        let reason = drive(
            kept,
            &mut standing,
            &mut StdRng::seed_from_u64(seed),
            seed % 2 == 0,
            |standing, event| standing.handle_event(&OpEvent::KeepAlive(event)),
            |event| match event {
                KeptLockEvent::Lost(reason) => Some(reason.clone()),
                _ => None,
            },
        );
        seen.push(std::mem::discriminant(&reason));
        // Let go after the loss: the loss stays.
        standing.let_go();
        assert_eq!(standing.loss(standing.until()), Some(reason));
    }
    seen.sort_by_key(|reason| format!("{reason:?}"));
    seen.dedup();
    assert!(
        seen.len() >= 2,
        "the seeds reach more than one kind of loss"
    );
}

/// A 10 s lease, a 6 s renew deadline, renewed every second.
fn timing(settings: &Settings) -> ElectionTiming {
    ElectionTiming::new(
        settings,
        Duration::from_secs(10),
        Duration::from_secs(6),
        Duration::from_secs(1),
    )
    .unwrap()
}

/// The term of a campaign every node granted.
fn elected(settings: &Arc<Settings>, timing: &ElectionTiming, seed: u64) -> Term {
    let t0 = Instant::now();
    let mut acquire = Acquisition::with_spec(
        settings.clone(),
        LockSpec::Fenced(b"leader"),
        timing.lease(),
        Attempts::Once,
        t0,
        StdRng::seed_from_u64(seed),
    )
    .unwrap();
    for request in drain(&mut acquire) {
        let answer = Response::Array(vec![Response::Int(1), Response::Int(4)]);
        acquire.handle_reply(Reply::to(&request, Ok(answer)), t0);
    }
    for request in drain(&mut acquire) {
        acquire.handle_reply(Reply::to(&request, Ok(Response::Int(1))), t0);
    }
    Term::new(expect_lock(&mut acquire), timing).unwrap()
}

#[test]
fn a_terms_standing_reads_the_terms_loss_never_sooner() {
    let settings = settings();
    let timing = timing(&settings);
    let mut kinds = Vec::new();
    for seed in 0..300 {
        let term = elected(&settings, &timing, seed);
        let mut standing = Standing::for_term(&term);
        assert_eq!(standing.until(), term.lose_at());
        let reason = drive(
            term,
            &mut standing,
            &mut StdRng::seed_from_u64(seed),
            seed % 2 == 0,
            |standing, event| standing.handle_event(&OpEvent::Term(event)),
            |event| match event {
                TermEvent::Lost(reason) => Some(reason.clone()),
                _ => None,
            },
        );
        kinds.push(matches!(reason, LeadershipLoss::RenewDeadline(_)));
    }
    kinds.sort();
    kinds.dedup();
    assert_eq!(
        kinds,
        [false, true],
        "lost both to the clock and to a refusal"
    );
}

#[test]
fn a_lock_let_go_is_never_lost_and_closed_is_a_loss_once() {
    let settings = settings();
    let t0 = Instant::now();
    let lock = granted(&settings, 1, t0);
    let end = lock.valid_until();

    let held = Standing::for_lock(&lock);
    assert!(!held.is_let_go());
    assert_eq!(held.loss(end - NS), None);
    assert_eq!(
        held.loss(end),
        Some(LossReason::Expired),
        "expired at its end"
    );
    let mut released = held.clone();
    released.let_go();
    assert!(released.is_let_go());
    assert_eq!(released.loss(end + Duration::from_secs(60)), None);
    assert_eq!(released.poll_timeout(), None);
    assert!(!released.handle_event(&OpEvent::Closed), "let go before");

    let mut closed = Standing::for_lock(&lock);
    assert!(closed.handle_event(&OpEvent::Closed));
    assert!(
        !closed.handle_event(&OpEvent::Closed),
        "the first loss stays"
    );
    assert_eq!(closed.loss(t0), Some(LossReason::Closed));

    // An extension by hand refused for good loses the lock; one short of
    // answers does not, nor one that counted (it moves the end).
    let mut by_hand = Standing::for_lock(&lock);
    let short = extension_fails(
        &lock,
        Err(NodeError::new(NodeErrorKind::Connection, "down")),
    );
    assert!(matches!(short, ExtendError::NoQuorum { .. }));
    assert!(!by_hand.handle_event(&OpEvent::Extend(Err(short))));
    assert_eq!(by_hand.loss(end - NS), None);
    let taken = extension_fails(&lock, Ok(Response::Int(0)));
    assert!(matches!(taken, ExtendError::Lost { .. }));
    assert!(by_hand.handle_event(&OpEvent::Extend(Err(taken.clone()))));
    assert_eq!(by_hand.loss(t0), Some(LossReason::ExtendFailed(taken)));
}

/// The error of `lock`'s extension when every node answers `answer`.
fn extension_fails(lock: &Lock, answer: Result<Response, NodeError>) -> ExtendError {
    let mut kept = KeptLock::new(lock.clone(), KeepAlive::default());
    let due = kept.poll_timeout().unwrap();
    kept.handle_timeout(due);
    for request in drain(&mut kept) {
        kept.handle_reply(Reply::to(&request, answer.clone()), due);
    }
    std::iter::from_fn(|| kept.poll_event())
        .find_map(|event| match event {
            KeptLockEvent::ExtendFailed(error) => Some(error),
            _ => None,
        })
        .expect("the extension failed")
}

#[test]
fn a_term_ends_at_a_resignation_that_frees_the_name_or_at_a_close() {
    let settings = settings();
    let timing = timing(&settings);
    let mut term = elected(&settings, &timing, 1);
    let mut standing = Standing::for_term(&term);
    let now = term.lose_at() - Duration::from_secs(5);
    // Nobody answers the first resignation: the term stands.
    assert!(term.resign(now, |release| release));
    drain(&mut term);
    term.handle_timeout(term.poll_timeout().unwrap());
    let Some(TermEvent::Resigned(report)) = term.poll_event() else {
        panic!("a resignation's report")
    };
    assert!(!report.frees_lock());
    assert!(!standing.handle_event(&OpEvent::Term(TermEvent::Resigned(report))));
    assert_eq!(standing.loss(now), None, "a resignation that freed nothing");
    // The second frees the name: ended at its report, before `Lost` is told.
    assert!(term.resign(now, |release| release));
    for request in drain(&mut term) {
        term.handle_reply(Reply::to(&request, Ok(Response::Int(1))), now);
    }
    let Some(TermEvent::Resigned(report)) = term.poll_event() else {
        panic!("a resignation's report")
    };
    assert!(report.frees_lock());
    assert!(standing.handle_event(&OpEvent::Term(TermEvent::Resigned(report))));
    assert_eq!(standing.loss(now), Some(LeadershipLoss::Resigned));

    let mut closed = Standing::for_term(&elected(&settings, &timing, 2));
    assert!(closed.handle_event(&OpEvent::Closed));
    assert_eq!(
        closed.loss(now),
        Some(LeadershipLoss::Lock(LossReason::Closed))
    );
}
