//! The simulation against the core's planted bugs (feature `planted-bugs`):
//! each bug the simulation can see must be caught within a bounded number
//! of seeded schedules. Run with
//! `cargo nextest run -p redlock-core --features planted-bugs`.
//!
//! Caught here: a release decided early (its report claims free a lock a
//! quorum still holds, checked at the instant of every report),
//! validity from decision time (handed-out validity not covered
//! by a quorum of keys in true time; overlaps alone rarely show it),
//! quorum N/2 (overlapping holds), and a leader's term lost at the key's
//! expiry or counted by the client (each holder of a fenced lock runs the
//! core's term), a restarted master counted at once (overlaps) and
//! reconnections without backoff (the attempts). Not here: an extension counting a
//! missing key as ours needs an operator release by value, a release that
//! skips timed-out nodes leaves keys that only cost liveness, and a
//! duplicate vote counted twice cannot happen through the `Client`, which
//! forgets a request at its first answer; the model checker (`verify/`)
//! catches all three.
#![cfg(feature = "planted-bugs")]

mod sim;

use std::time::Duration;

use redlock_core::planted::{self, Bug};
use sim::{SimConfig, run};

/// In-model faults, replies sometimes duplicated, lock hand-outs often
/// decided late (wide latency).
fn config() -> SimConfig {
    SimConfig {
        nodes: 3,
        clients: 4,
        latency: (Duration::from_micros(100), Duration::from_millis(8)),
        duplicate: 0.1,
        ..SimConfig::default()
    }
}

/// Seeds until the first schedule where `broken` says the run went wrong.
fn first_caught(
    bug: Option<Bug>,
    max_seeds: u64,
    broken: impl Fn(&sim::Outcome) -> bool,
) -> Option<u64> {
    planted::set(bug);
    let found = (0..max_seeds).find(|&seed| broken(&run(seed, &config())));
    planted::set(None);
    found
}

#[test]
fn without_a_bug_nothing_is_flagged() {
    let flagged = first_caught(None, 100, |o| {
        !o.overlaps().is_empty() || !o.uncovered.is_empty()
    });
    assert_eq!(flagged, None, "the correct core was flagged");
    println!("no bug: 100 schedules, no overlap, every hand-out covered");
}

#[test]
fn validity_from_decision_time_is_caught_by_coverage() {
    let seed = first_caught(Some(Bug::ValidityFromDecisionTime), 200, |o| {
        !o.uncovered.is_empty()
    });
    println!("validity from decision time: first caught at seed {seed:?}");
    assert!(seed.is_some(), "not caught in 200 schedules");
}

#[test]
fn quorum_half_is_caught_by_overlaps() {
    let seed = first_caught(Some(Bug::QuorumHalf), 200, |o| !o.overlaps().is_empty());
    println!("quorum N/2: first caught at seed {seed:?}");
    assert!(seed.is_some(), "not caught in 200 schedules");
}

/// Each simulated process runs the core's whole `Client`, which names
/// every request and forgets it at its first answer: a reply the network
/// delivers twice never reaches a machine again, so a machine that would
/// count it twice (the planted bug) does no harm here. The model checker
/// drives the machines alone and catches the bug (`verify/tests/model.rs`).
#[test]
fn duplicate_replies_never_reach_a_machine_through_the_client() {
    let seed = first_caught(Some(Bug::DuplicateVoteCounted), 100, |o| {
        !o.overlaps().is_empty() || !o.uncovered.is_empty()
    });
    assert_eq!(seed, None, "a duplicated reply was counted");
}

/// A release that decides one confirmation early claims a lock free that a
/// quorum still holds; the simulation checks every release's claim against
/// the nodes at the instant it is made.
#[test]
fn release_decided_early_is_caught_by_its_claim() {
    let clean = first_caught(None, 100, |o| !o.false_frees.is_empty());
    assert_eq!(clean, None, "the correct core claimed a held lock free");
    let seed = first_caught(Some(Bug::ReleaseDecidesEarly), 200, |o| {
        !o.false_frees.is_empty()
    });
    assert!(seed.is_some(), "ReleaseDecidesEarly was not caught");
    println!("ReleaseDecidesEarly: caught at seed {seed:?}");
}

/// Leaders whose term runs to the key's expiry on an exact clock (no
/// drift allowance, no margin) lead past their keys on a quorum once the
/// masters' clocks run fast; the term's loss instant must come first.
/// Checked at every renewal against the masters' expiries in true time.
/// And terms counted by the client, not by the quorum, go back from one
/// leader to the next. Seen through the whole client: each holder runs
/// the core's term.
#[test]
fn a_term_lost_at_the_keys_expiry_or_counted_by_the_client_is_caught() {
    let cfg = SimConfig {
        fenced: true,
        persistent: true,
        elections: true,
        ..config()
    };
    let caught = |bug, broken: fn(&sim::Outcome) -> bool| {
        planted::set(bug);
        let found = (0..300).find(|&seed| broken(&run(seed, &cfg)));
        planted::set(None);
        found
    };
    let unsafe_leaders = |o: &sim::Outcome| !o.overlaps().is_empty() || !o.uncovered.is_empty();
    let terms_back = |o: &sim::Outcome| !o.token_regressions().is_empty();
    assert_eq!(
        caught(None, unsafe_leaders),
        None,
        "the correct core was flagged"
    );
    assert_eq!(caught(None, terms_back), None, "a correct term went back");
    let seed = caught(Some(Bug::ElectionLosesAtExpiry), unsafe_leaders);
    println!("ElectionLosesAtExpiry: first caught at seed {seed:?}");
    assert!(
        seed.is_some(),
        "ElectionLosesAtExpiry not caught in 300 schedules"
    );
    let seed = caught(Some(Bug::ElectionTermFromClient), terms_back);
    println!("ElectionTermFromClient: first caught at seed {seed:?}");
    assert!(
        seed.is_some(),
        "ElectionTermFromClient not caught in 300 schedules"
    );
}

/// A master that restarts empty sooner than a TTL forgot the locks it
/// granted; the client reads the server's new run id as it connects again
/// and counts none of its votes for one TTL. A client that counts them at
/// once (the planted bug) grants a lock still held elsewhere.
#[test]
fn a_restarted_server_that_votes_at_once_is_caught_by_overlaps() {
    let cfg = SimConfig {
        restart_delay: Duration::from_millis(20),
        crashes: 2,
        ..config()
    };
    let caught = |bug| {
        planted::set(bug);
        let found = (0..300).find(|&seed| !run(seed, &cfg).overlaps().is_empty());
        planted::set(None);
        found
    };
    assert_eq!(caught(None), None, "the correct core was flagged");
    let seed = caught(Some(Bug::RestartedNodeVotes));
    println!("RestartedNodeVotes: first caught at seed {seed:?}");
    assert!(seed.is_some(), "not caught in 300 schedules");
}

/// While a crashed master is down, each client tries to connect again
/// after a backoff that doubles from 50 ms: a few attempts per crash. A
/// client that tries again at once (the planted bug) makes one attempt per
/// round trip.
#[test]
fn reconnecting_without_backoff_is_caught_by_the_attempts() {
    let cfg = config();
    // 500 ms down: attempts at 0, 50, 150, 350 ms (and jitter less).
    let per_crash = 8;
    let storm = |o: &sim::Outcome| o.failed_connects > cfg.crashes * cfg.clients * per_crash;
    planted::set(None);
    assert!(
        (0..100).all(|seed| !storm(&run(seed, &cfg))),
        "the correct core stormed"
    );
    planted::set(Some(Bug::ReconnectWithoutBackoff));
    let seed = (0..100).find(|&seed| storm(&run(seed, &cfg)));
    planted::set(None);
    println!("ReconnectWithoutBackoff: first caught at seed {seed:?}");
    assert!(seed.is_some(), "not caught in 100 schedules");
}
