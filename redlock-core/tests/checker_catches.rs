//! The checker must find violations when the model is broken on purpose.
//! A checker that never fires proves nothing; these tests expect it to fire.

mod sim;

use std::time::Duration;

use sim::{Hold, SimConfig, check_overlaps, run};

/// Runs seeds until the checker reports an overlap; panics if none is found.
fn find_violation(name: &str, cfg: &SimConfig, max_seeds: u64) -> u64 {
    for seed in 0..max_seeds {
        let overlaps = run(seed, cfg).overlaps();
        if let Some((a, b)) = overlaps.first() {
            println!("{name}: seed {seed} overlaps: {a:?} and {b:?}");
            return seed;
        }
    }
    panic!(
        "{name}: the checker found no violation in {max_seeds} schedules, but the model was broken"
    );
}

#[test]
fn checker_flags_a_hand_made_overlap() {
    let ms = Duration::from_millis;
    let holds = [
        Hold {
            client: 0,
            key: 0,
            start: ms(0),
            end: ms(100),
            token: None,
            slot: 0,
            group: None,
        },
        Hold {
            client: 1,
            key: 0,
            start: ms(100),
            end: ms(200),
            token: None,
            slot: 0,
            group: None,
        },
        Hold {
            client: 2,
            key: 1,
            start: ms(150),
            end: ms(250),
            token: None,
            slot: 0,
            group: None,
        },
        Hold {
            client: 3,
            key: 0,
            start: ms(199),
            end: ms(300),
            token: None,
            slot: 0,
            group: None,
        },
    ];
    let found = check_overlaps(&holds);
    assert_eq!(found.len(), 1);
    assert_eq!((found[0].0.client, found[0].1.client), (1, 3));
}

#[test]
fn checker_lets_readers_and_one_owner_share_a_key_and_no_one_else() {
    let ms = Duration::from_millis;
    let hold = |client, start, end, group| Hold {
        client,
        key: 0,
        start: ms(start),
        end: ms(end),
        token: None,
        slot: 0,
        group,
    };
    // Two readers at once, then one owner's two reentrant holds at once.
    let shared = [
        hold(0, 0, 100, Some(sim::READERS)),
        hold(1, 50, 150, Some(sim::READERS)),
        hold(2, 200, 300, Some(7)),
        hold(3, 250, 350, Some(7)),
    ];
    assert!(check_overlaps(&shared).is_empty());
    // A writer among the readers, another owner beside the first.
    let mut crossed = shared.to_vec();
    crossed.push(hold(4, 90, 120, None));
    crossed.push(hold(5, 340, 400, Some(8)));
    let found: Vec<(usize, usize)> = check_overlaps(&crossed)
        .iter()
        .map(|(first, second)| (first.client, second.client))
        .collect();
    assert_eq!(found, [(0, 4), (1, 4), (3, 5)]);
}

#[test]
fn node_restarted_empty_at_once_breaks_safety() {
    // Out of model: crashed nodes come back at once, without the keys they
    // held, behind a proxy that hides the restart from the clients (seen,
    // a restart makes the client wait a TTL before counting the node:
    // `planted_bugs.rs` checks that this schedule is safe then).
    let cfg = SimConfig {
        behind_proxy: true,
        nodes: 3,
        clients: 4,
        crashes: 12,
        restart_delay: Duration::from_millis(1),
        pauses: 0,
        loss: 0.0,
        extend: false,
        hold_share: (0.9, 1.2),
        ..SimConfig::default()
    };
    find_violation("restart without delay", &cfg, 500);
}

#[test]
fn delayed_restart_keeps_the_same_schedules_safe() {
    // The same crashes with the restart delayed past the TTL stay safe.
    let cfg = SimConfig {
        nodes: 3,
        clients: 4,
        crashes: 12,
        restart_delay: Duration::from_millis(250),
        pauses: 0,
        loss: 0.0,
        extend: false,
        hold_share: (0.9, 1.2),
        ..SimConfig::default()
    };
    for seed in 0..200 {
        let overlaps = run(seed, &cfg).overlaps();
        assert!(overlaps.is_empty(), "seed {seed}: {overlaps:?}");
    }
}

#[test]
fn clock_drift_beyond_the_bound_breaks_safety() {
    // Out of model: node clocks run up to 10% fast while the drift factor
    // allows 1%: keys expire on the nodes while the holder still counts on them.
    let cfg = SimConfig {
        nodes: 3,
        clients: 4,
        clock_rate_bound: 0.10,
        crashes: 0,
        pauses: 0,
        loss: 0.0,
        extend: false,
        hold_share: (1.0, 1.2),
        ..SimConfig::default()
    };
    find_violation("drift beyond bound", &cfg, 500);
}

#[test]
fn clock_jump_forward_breaks_safety() {
    // Out of model: a node's clock jumps forward by a TTL, expiring keys at once.
    let cfg = SimConfig {
        nodes: 3,
        clients: 4,
        crashes: 0,
        pauses: 0,
        loss: 0.0,
        clock_jumps: 10,
        clock_jump: Duration::from_millis(200),
        extend: false,
        hold_share: (0.9, 1.2),
        ..SimConfig::default()
    };
    find_violation("clock jump", &cfg, 500);
}
