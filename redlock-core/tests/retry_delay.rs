//! The wait between attempts is `delay + uniform(0, jitter)`: never below
//! the delay, always below delay + jitter, really spread by the jitter (so
//! competing clients fall out of step), and exactly the delay without one.
//! (Written for `make mutants`: only a doctest showed these bounds, and
//! doctests do not run per mutant.)

use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::StdRng;
use redlock_core::{RetryConfig, retry_delay};

const MS: Duration = Duration::from_millis(1);

#[test]
fn waits_lie_between_the_delay_and_the_delay_plus_the_jitter() {
    let retry = RetryConfig::default()
        .count(3)
        .delay(50 * MS)
        .jitter(150 * MS);
    let waits: Vec<Duration> = (0..64)
        .map(|seed| retry_delay(&retry, &mut StdRng::seed_from_u64(seed)))
        .collect();
    for wait in &waits {
        assert!(
            *wait >= retry.delay && *wait < retry.delay + retry.jitter,
            "{wait:?} outside [50 ms, 200 ms)"
        );
    }
    // The jitter is used: 64 seeds do not all draw the same wait, and some
    // draw more than the fixed delay.
    assert!(waits.iter().any(|wait| *wait > retry.delay), "{waits:?}");
    assert!(waits.iter().any(|wait| *wait != waits[0]), "{waits:?}");
}

#[test]
fn without_jitter_the_wait_is_exactly_the_delay() {
    let retry = RetryConfig::default()
        .count(3)
        .delay(80 * MS)
        .jitter(Duration::ZERO);
    for seed in 0..8 {
        assert_eq!(
            retry_delay(&retry, &mut StdRng::seed_from_u64(seed)),
            retry.delay
        );
    }
}
