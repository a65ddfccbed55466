//! The bounded model runs of `make test`: the short in-model configurations
//! and the fair one must violate nothing; each out-of-model control and each planted bug
//! must produce a counterexample. State counts are printed, never judged.

use redlock_verify::{OPERATOR, RedlockModel, Report, configurations};

fn run(setup: redlock_verify::Setup, stop_at_first: bool) -> Report {
    let report = RedlockModel::new(setup).check(2, stop_at_first);
    println!("{}", report.line());
    for (_, trace) in &report.violations {
        println!("{trace}");
    }
    report
}

#[test]
fn short_run_in_model_violates_nothing() {
    for setup in configurations::in_model(true) {
        let report = run(setup, false);
        assert!(report.violations.is_empty(), "{}", report.line());
    }
}

/// Fair locks: mutual exclusion and the rest, no stand-off, service within
/// `FAIR_PATIENCE + 1` attempts, nothing left in the queues.
#[test]
fn fair_run_violates_nothing() {
    for setup in configurations::fair(true) {
        let report = run(setup, false);
        assert!(report.violations.is_empty(), "{}", report.line());
    }
}

/// The operator-release configuration, shortened for `make test` (clients
/// start at t=0); `make model` runs it in full. Holds since extensions count
/// only masters that confirmed our value (extend.rs).
#[test]
fn operator_release_is_never_undone() {
    let setup = redlock_verify::Setup {
        start_by: 0,
        ..configurations::operator()
    };
    let report = run(setup, false);
    assert!(
        report.violations.iter().all(|(p, _)| *p != OPERATOR),
        "{}",
        report.line()
    );
}

/// Semaphores: no more than k holders, one per slot, withdraws queued
/// everywhere a value may sit.
#[test]
fn semaphore_run_violates_nothing() {
    for setup in configurations::semaphore(true) {
        let report = run(setup, false);
        assert!(report.violations.is_empty(), "{}", report.line());
    }
}

#[test]
fn out_of_model_controls_are_caught() {
    for (setup, expected) in configurations::out_of_model() {
        let report = RedlockModel::new(setup).check_for(2, expected);
        println!("{}", report.line());
        assert!(
            report.violations.iter().any(|(p, _)| *p == expected),
            "expected a counterexample to {expected}: {}",
            report.line()
        );
    }
}

macro_rules! planted {
    ($name:ident, $bug:ident) => {
        #[test]
        fn $name() {
            let (_, setup) = configurations::planted()
                .into_iter()
                .find(|(bug, _)| *bug == redlock_core::planted::Bug::$bug)
                .expect("every bug has a configuration");
            let bug = redlock_core::planted::Bug::$bug;
            let report = match configurations::caught_by(bug) {
                Some(property) => {
                    let report = RedlockModel::new(setup).check_for(2, property);
                    println!("{}", report.line());
                    for (_, trace) in &report.violations {
                        println!("{trace}");
                    }
                    assert!(
                        report.violations.iter().any(|(p, _)| *p == property),
                        "planted bug {bug:?} not caught by \"{property}\": {}",
                        report.line()
                    );
                    report
                }
                None => run(setup, true),
            };
            assert!(
                !report.violations.is_empty(),
                "planted bug {bug:?} not caught: {}",
                report.line()
            );
        }
    };
}

planted!(
    planted_validity_from_decision_time,
    ValidityFromDecisionTime
);
planted!(planted_quorum_half, QuorumHalf);
planted!(planted_duplicate_vote_counted, DuplicateVoteCounted);
planted!(planted_extend_missing_as_ours, ExtendMissingAsOurs);
planted!(planted_release_skips_timed_out, ReleaseSkipsTimedOut);
planted!(planted_fair_never_falls_back, FairNeverFallsBack);
planted!(planted_fair_leave_forgotten, FairLeaveForgotten);
planted!(planted_release_decides_early, ReleaseDecidesEarly);
planted!(planted_permits_not_kept_alive, PermitsNotKeptAlive);
planted!(
    planted_permit_release_keeps_permits,
    PermitReleaseKeepsPermits
);
planted!(planted_late_grant_kept_at_any_slot, LateGrantKeptAtAnySlot);

/// The notice hub: waiters woken only by notices and hand-overs are never
/// stranded, and the hub's planted bug strands one.
#[test]
fn hub_run_violates_nothing() {
    for setup in redlock_verify::hub::HubSetup::all(true) {
        let report = redlock_verify::hub::HubModel::new(setup).check(2, false);
        println!("{}", report.line());
        assert!(report.violations.is_empty(), "{}", report.line());
    }
}

#[test]
fn planted_hub_forgets_replay() {
    let report =
        redlock_verify::hub::HubModel::new(redlock_verify::hub::HubSetup::planted()).check(2, true);
    println!("{}", report.line());
    for (_, trace) in &report.violations {
        println!("{trace}");
    }
    assert!(
        report
            .violations
            .iter()
            .any(|(p, _)| *p == redlock_verify::hub::HUB_NOT_STRANDED),
        "{}",
        report.line()
    );
}

/// On a master with `DELIFEQ`, a release that hands over to its client's
/// waiter before the script that follows a `DELIFEQ` that deleted nothing
/// (issue 52's bug, planted) strands that waiter.
#[test]
fn planted_hand_over_before_follow_up() {
    let setup = redlock_verify::hub::HubSetup::planted_delifeq();
    let report = redlock_verify::hub::HubModel::new(setup).check(2, true);
    println!("{}", report.line());
    for (_, trace) in &report.violations {
        println!("{trace}");
    }
    assert!(
        report
            .violations
            .iter()
            .any(|(p, _)| *p == redlock_verify::hub::HUB_NOT_STRANDED),
        "{}",
        report.line()
    );
}
