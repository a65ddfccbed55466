//! Fencing tokens: every token handed out is larger than every earlier one for
//! that resource, over thousands of seeded schedules with lost messages, paused
//! nodes and crashed nodes that keep their data (AOF with fsync always).

mod sim;

use std::time::Duration;

use sim::{SimConfig, run};

fn schedules() -> u64 {
    std::env::var("SIM_SCHEDULES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000)
}

fn fenced(nodes: usize) -> SimConfig {
    SimConfig {
        nodes,
        clients: 5,
        keys: 2,
        fenced: true,
        persistent: true,
        crashes: 3,
        // Persistent nodes may come back at once: they keep locks and counters.
        restart_delay: Duration::from_millis(20),
        ..SimConfig::default()
    }
}

#[test]
fn tokens_only_grow_with_persistent_nodes() {
    for nodes in [3, 5] {
        let cfg = fenced(nodes);
        let mut granted = 0;
        for seed in 0..schedules() {
            let outcome = run(seed, &cfg);
            let regressions = outcome.token_regressions();
            assert!(
                regressions.is_empty(),
                "{nodes} nodes, seed {seed}: {regressions:?}"
            );
            let overlaps = outcome.overlaps();
            assert!(
                overlaps.is_empty(),
                "{nodes} nodes, seed {seed}: {overlaps:?}"
            );
            granted += outcome.holds.len();
        }
        println!(
            "fencing, {nodes} nodes: {} schedules, {granted} tokens, all increasing",
            schedules()
        );
        assert!(granted as u64 > schedules() * 5);
    }
}

#[test]
fn tokens_regress_when_nodes_forget_their_counters() {
    // Out of model: crashed nodes restart empty, losing locks and counters.
    let cfg = SimConfig {
        persistent: false,
        crashes: 12,
        restart_delay: Duration::from_millis(1),
        nodes: 3,
        ..fenced(3)
    };
    for seed in 0..500 {
        let outcome = run(seed, &cfg);
        if let Some((a, b)) = outcome.token_regressions().first() {
            println!("seed {seed}: token {:?} after {:?}", b.token, a.token);
            return;
        }
    }
    panic!("no token regression found although nodes forgot their counters");
}
