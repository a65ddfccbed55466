//! The reconnection backoff: doubling up to its cap, each wait cut by at
//! most a quarter drawn from the caller's generator, back to the start on
//! reset.

use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::StdRng;
use redlock_core::Backoff;

const MIN: Duration = Duration::from_millis(100);
const MAX: Duration = Duration::from_millis(700);

/// The waits before jitter: 100, 200, 400, then the cap of 700.
const FULL: [u64; 6] = [100, 200, 400, 700, 700, 700];

#[test]
fn waits_double_up_to_the_cap_each_cut_by_at_most_a_quarter() {
    for seed in 0..200 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut backoff = Backoff::new(MIN, MAX);
        for full in FULL {
            let full = Duration::from_millis(full);
            let wait = backoff.next(&mut rng);
            assert!(wait <= full, "seed {seed}: {wait:?} over {full:?}");
            assert!(
                wait >= full * 3 / 4,
                "seed {seed}: {wait:?} cut more than a quarter of {full:?}"
            );
        }
    }
}

#[test]
fn the_cut_is_random_not_fixed() {
    let mut rng = StdRng::seed_from_u64(1);
    let waits: std::collections::BTreeSet<Duration> = (0..50)
        .map(|_| Backoff::new(MIN, MAX).next(&mut rng))
        .collect();
    assert!(waits.len() > 10, "{waits:?}");
}

#[test]
fn the_same_seed_gives_the_same_waits() {
    let waits = |seed| {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut backoff = Backoff::reconnect();
        (0..10).map(|_| backoff.next(&mut rng)).collect::<Vec<_>>()
    };
    assert_eq!(waits(7), waits(7));
    assert_ne!(waits(7), waits(8));
}

#[test]
fn reset_starts_again_from_the_first_wait() {
    let mut rng = StdRng::seed_from_u64(3);
    let mut backoff = Backoff::new(MIN, MAX);
    for _ in 0..5 {
        backoff.next(&mut rng);
    }
    backoff.reset();
    assert!(backoff.next(&mut rng) <= MIN);
    assert!(backoff.next(&mut rng) > MIN);
}

#[test]
fn a_cap_below_the_first_wait_keeps_the_first_wait() {
    let mut rng = StdRng::seed_from_u64(5);
    let mut backoff = Backoff::new(MAX, MIN);
    for _ in 0..4 {
        let wait = backoff.next(&mut rng);
        assert!(wait <= MAX && wait >= MAX * 3 / 4, "{wait:?}");
    }
}

#[test]
fn the_reconnection_backoff_runs_from_50_ms_to_2_s() {
    let mut rng = StdRng::seed_from_u64(9);
    let mut backoff = Backoff::reconnect();
    assert!(backoff.next(&mut rng) <= Duration::from_millis(50));
    let last = (0..10).map(|_| backoff.next(&mut rng)).last().unwrap();
    assert!(
        last <= Duration::from_secs(2) && last >= Duration::from_millis(1_500),
        "{last:?}"
    );
}
