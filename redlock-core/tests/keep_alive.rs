//! Holders that keep their lock alive on the core's schedule
//! (`KeepAliveSchedule`) through work longer than the TTL, under the faults
//! of Redlock's model: no two holds may overlap, and the schedule's losses
//! (failed extensions, the extension limit) end the holds in time.

mod sim;

use std::time::Duration;

use redlock_core::KeepAlive;
use sim::{Outcome, SimConfig, run};

fn schedules() -> u64 {
    std::env::var("SIM_SCHEDULES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000)
}

/// Runs the seeds, checks every schedule for overlaps, prints the counts
/// and returns them summed, with the holds that outlived one TTL.
fn run_safe(name: &str, cfg: &SimConfig, seeds: std::ops::Range<u64>) -> (Outcome, usize) {
    let mut total = Outcome::default();
    let mut long_holds = 0;
    for seed in seeds.clone() {
        let outcome = run(seed, cfg);
        let overlaps = outcome.overlaps();
        assert!(
            overlaps.is_empty(),
            "{name}: seed {seed} produced overlapping holds: {overlaps:?}"
        );
        long_holds += outcome
            .holds
            .iter()
            .filter(|hold| hold.end.saturating_sub(hold.start) > cfg.ttl)
            .count();
        total.holds.extend(outcome.holds);
        total.extensions += outcome.extensions;
        total.failed_extensions += outcome.failed_extensions;
        total.limits_reached += outcome.limits_reached;
        total.lost_at_limit += outcome.lost_at_limit;
        total.lost_by_failure += outcome.lost_by_failure;
    }
    println!(
        "{name}: {} schedules, {} locks granted ({long_holds} held past one TTL), \
         {} extensions ({} failed), {} limits reached, lost: {} at the limit, {} by failure, 0 overlaps",
        seeds.end - seeds.start,
        total.holds.len(),
        total.extensions,
        total.failed_extensions,
        total.limits_reached,
        total.lost_at_limit,
        total.lost_by_failure,
    );
    (total, long_holds)
}

/// Work of one to four TTLs under a lock kept alive with the defaults.
#[test]
fn keep_alive_holds_locks_through_long_work() {
    let cfg = SimConfig {
        keep_alive: Some(KeepAlive::default()),
        hold_share: (1.0, 4.0),
        ..SimConfig::default()
    };
    let (_, long_holds) = run_safe("keep-alive, 5 nodes", &cfg, 40_000..40_000 + schedules());
    assert!(long_holds > 0, "no lock was kept past its TTL");
}

/// Three nodes, heavier loss and slow links: extensions fail more often and
/// the schedule retries or gives up, never past the validity.
#[test]
fn keep_alive_under_loss_gives_up_in_time() {
    let cfg = SimConfig {
        nodes: 3,
        clients: 5,
        loss: 0.08,
        latency: (Duration::from_micros(50), Duration::from_millis(15)),
        pauses: 4,
        keep_alive: Some(KeepAlive::default().extend_when_left(0.3)),
        hold_share: (1.0, 4.0),
        ..SimConfig::default()
    };
    let (total, _) = run_safe(
        "keep-alive, 3 nodes, heavy loss",
        &cfg,
        50_000..50_000 + schedules() / 2,
    );
    assert!(total.lost_by_failure > 0, "no keep-alive ever gave up");
}

/// An extension limit ends long holds when the last validity runs out.
#[test]
fn the_extension_limit_ends_long_holds() {
    let cfg = SimConfig {
        keep_alive: Some(KeepAlive::default().max_extensions(1)),
        hold_share: (2.0, 4.0),
        ..SimConfig::default()
    };
    let (total, _) = run_safe(
        "keep-alive, 1 extension",
        &cfg,
        60_000..60_000 + schedules() / 2,
    );
    assert!(total.lost_at_limit > 0, "no hold ran into the limit");
}
