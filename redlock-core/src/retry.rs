//! The retry schedule: a fixed delay plus uniform random jitter.

use std::time::Duration;

use rand_core::Rng;

use crate::RetryConfig;

/// The wait before the next attempt: `delay + uniform(0, jitter)`, drawn from
/// the caller's RNG so that tests can replay it.
///
/// ```
/// use std::time::Duration;
/// use rand::{SeedableRng, rngs::StdRng};
/// use redlock_core::{RetryConfig, retry_delay};
///
/// let retry = RetryConfig { count: 3, delay: Duration::from_millis(50), jitter: Duration::from_millis(150) };
/// let wait = retry_delay(&retry, &mut StdRng::seed_from_u64(7));
/// assert!(wait >= Duration::from_millis(50) && wait < Duration::from_millis(200));
/// ```
pub fn retry_delay<R: Rng + ?Sized>(retry: &RetryConfig, rng: &mut R) -> Duration {
    let jitter_us = u64::try_from(retry.jitter.as_micros()).unwrap_or(u64::MAX);
    let extra = if jitter_us == 0 {
        0
    } else {
        // The modulo bias is below 2^-40 for any jitter under a year.
        rng.next_u64() % jitter_us
    };
    retry.delay.saturating_add(Duration::from_micros(extra))
}
