//! Old and new servers in one quorum: nodes that take plain commands
//! (`SET NX PX GET` acquires on Redis 7, also `DELIFEQ` withdraws on Valkey 9)
//! next to nodes that run only scripts, under in-model faults. No two holds
//! may overlap, and the plain commands are really sent.

mod sim;

use sim::{Servers, SimConfig, run};

fn schedules() -> u64 {
    std::env::var("SIM_SCHEDULES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000)
}

fn assert_safe(name: &str, cfg: &SimConfig, seeds: std::ops::Range<u64>) {
    let (mut granted, mut native) = (0, 0);
    for seed in seeds.clone() {
        let outcome = run(seed, cfg);
        let overlaps = outcome.overlaps();
        assert!(
            overlaps.is_empty(),
            "{name}: seed {seed} produced overlapping holds: {overlaps:?}"
        );
        granted += outcome.holds.len();
        native += outcome.native_commands;
    }
    println!(
        "{name}: {} schedules, {granted} locks granted, {native} plain commands, 0 overlaps",
        seeds.end - seeds.start
    );
    assert!(
        granted as u64 > (seeds.end - seeds.start) * 5,
        "{name}: too few locks granted"
    );
    assert!(
        native > granted,
        "{name}: the native nodes ran too few plain commands"
    );
}

#[test]
fn scripted_redis_and_valkey_nodes_in_one_quorum() {
    let cfg = SimConfig {
        servers: Servers::Mixed,
        ..SimConfig::default()
    };
    assert_safe("5 mixed nodes", &cfg, 30_000..30_000 + schedules());
}

#[test]
fn three_mixed_nodes_without_notices_withdraw_and_release_natively() {
    // Without notices a release is a withdraw: `DELIFEQ` on Valkey.
    let cfg = SimConfig {
        nodes: 3,
        clients: 5,
        notices: false,
        servers: Servers::Mixed,
        ..SimConfig::default()
    };
    assert_safe(
        "3 mixed nodes, no notices",
        &cfg,
        40_000..40_000 + schedules(),
    );
}

#[test]
fn every_node_valkey_with_crashes_and_pauses() {
    let cfg = SimConfig {
        crashes: 2,
        pauses: 4,
        servers: Servers::Valkey,
        ..SimConfig::default()
    };
    assert_safe("5 Valkey nodes", &cfg, 50_000..50_000 + schedules());
}
