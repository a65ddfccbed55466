//! Thousands of seeded schedules with faults inside Redlock's model: bounded
//! clock drift, lost messages, paused nodes, and crashed nodes that stay down
//! longer than the TTL before restarting empty. No two holds may overlap.

mod sim;

use std::time::Duration;

use sim::{SimConfig, run};

fn schedules() -> u64 {
    std::env::var("SIM_SCHEDULES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000)
}

fn assert_safe(name: &str, cfg: &SimConfig, seeds: std::ops::Range<u64>) -> sim::Outcome {
    let mut granted = 0;
    let mut extensions = 0;
    let mut total = sim::Outcome::default();
    for seed in seeds.clone() {
        let outcome = run(seed, cfg);
        let overlaps = outcome.overlaps();
        assert!(
            overlaps.is_empty(),
            "{name}: seed {seed} produced overlapping holds: {overlaps:?}"
        );
        granted += outcome.holds.len();
        extensions += outcome.extensions;
        total.resends += outcome.resends;
        total.notices += outcome.notices;
        total.reconnects += outcome.reconnects;
        total.failed_connects += outcome.failed_connects;
    }
    println!(
        "{name}: {} schedules, {granted} locks granted, {extensions} extensions, {} resends, {} notices, {} reconnects ({} attempts refused), 0 overlaps",
        seeds.end - seeds.start,
        total.resends,
        total.notices,
        total.reconnects,
        total.failed_connects,
    );
    // Liveness sanity: a majority is up nearly all the time, so locks are granted.
    assert!(
        granted as u64 > (seeds.end - seeds.start) * 5,
        "{name}: too few locks granted ({granted})"
    );
    total
}

#[test]
fn five_nodes_in_model_faults() {
    let cfg = SimConfig::default();
    let total = assert_safe("5 nodes", &cfg, 0..schedules());
    // Each process runs the core's whole client: it connects again to a
    // crashed node (backing off while it is down), what the node refused
    // is sent again, and waiters hear release notices.
    assert!(total.reconnects > 0, "no connection was made again");
    assert!(total.failed_connects > 0, "no reconnection met a node down");
    assert!(total.resends > 0, "no release was sent again");
    assert!(total.notices > 0, "no release notice was heard");
}

#[test]
fn three_nodes_in_model_faults_several_keys() {
    let cfg = SimConfig {
        nodes: 3,
        clients: 6,
        keys: 2,
        ..SimConfig::default()
    };
    assert_safe("3 nodes, 2 keys", &cfg, 10_000..10_000 + schedules());
}

#[test]
fn one_node_no_crashes() {
    let cfg = SimConfig {
        nodes: 1,
        clients: 3,
        crashes: 0,
        ..SimConfig::default()
    };
    assert_safe("1 node", &cfg, 20_000..20_000 + schedules() / 2);
}

#[test]
fn heavy_loss_and_latency_without_retries() {
    let cfg = SimConfig {
        nodes: 5,
        clients: 5,
        loss: 0.1,
        latency: (Duration::from_micros(50), Duration::from_millis(20)),
        retry: false,
        pauses: 5,
        crashes: 2,
        restart_delay: Duration::from_millis(300),
        ..SimConfig::default()
    };
    assert_safe(
        "5 nodes, heavy loss",
        &cfg,
        30_000..30_000 + schedules() / 2,
    );
}

/// Leaders: each holder of a fenced lock runs the core's term, which
/// renews it every retry period; a leader leads until its term's loss
/// instant and, when done, resigns (the release inside the term) or
/// releases. No two leaders of a name overlap, and terms only rise (the
/// masters keep their data).
#[test]
fn leaders_never_overlap_and_terms_only_rise() {
    let cfg = SimConfig {
        nodes: 3,
        fenced: true,
        persistent: true,
        elections: true,
        ..SimConfig::default()
    };
    let (mut leaders, mut renewals, mut resigned, mut resigns_failed, mut lost) = (0, 0, 0, 0, 0);
    for seed in 0..schedules() {
        let outcome = run(seed, &cfg);
        let overlaps = outcome.overlaps();
        assert!(
            overlaps.is_empty(),
            "seed {seed}: two leaders: {overlaps:?}"
        );
        let regressions = outcome.token_regressions();
        assert!(
            regressions.is_empty(),
            "seed {seed}: a term went back: {regressions:?}"
        );
        leaders += outcome.holds.len();
        renewals += outcome.renewals;
        resigned += outcome.resigned;
        resigns_failed += outcome.resigns_failed;
        lost += outcome.lost_by_failure;
    }
    println!(
        "elections: {} schedules, {leaders} terms, {renewals} renewals, {resigned} resigned, \
         {resigns_failed} resignations that did not free the name, {lost} terms lost, 0 overlaps",
        schedules()
    );
    // The simulation covers what it claims: renewals, resignations, losses.
    assert!(renewals > 0 && resigned > 0 && lost > 0);
}
