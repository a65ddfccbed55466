//! The host's monotonic clock, shared by every process on the machine.
//!
//! Holds recorded by different worker processes are compared by the checker,
//! so they need one time line. `std::time::Instant` reads `CLOCK_MONOTONIC` on
//! Linux, but an `Instant` cannot leave its process; nanoseconds read from
//! `CLOCK_MONOTONIC` directly can. It never jumps (NTP may only slew it), and
//! it keeps running while a process is stopped, which is what a paused
//! client's record must show.

use std::time::{Duration, Instant};

use nix::time::{ClockId, clock_gettime};

/// Nanoseconds on the host's `CLOCK_MONOTONIC`.
pub fn mono_ns() -> u64 {
    let now = clock_gettime(ClockId::CLOCK_MONOTONIC)
        .expect("CLOCK_MONOTONIC exists on every Linux kernel");
    // Both fields are non-negative for CLOCK_MONOTONIC.
    now.tv_sec() as u64 * 1_000_000_000 + now.tv_nsec() as u64
}

/// An `Instant` of this process on the shared clock (both read
/// `CLOCK_MONOTONIC`). The offset between the two is taken from a pair of
/// reads that nothing preempted (the closest of a few tries), so a busy
/// machine cannot shift a converted instant by a scheduling delay.
pub fn instant_ns(at: Instant) -> u64 {
    let mut best: Option<(u64, Instant, u64)> = None;
    for _ in 0..8 {
        let before = mono_ns();
        let now = Instant::now();
        let after = mono_ns();
        let gap = after - before;
        if best.is_none_or(|(g, _, _)| gap < g) {
            best = Some((gap, now, before + gap / 2));
        }
        if gap < 20_000 {
            break;
        }
    }
    let (_, now, ns) = best.expect("at least one try");
    if at >= now {
        ns + nanos(at - now)
    } else {
        ns.saturating_sub(nanos(now - at))
    }
}

/// A duration in nanoseconds, saturating.
pub fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// Nanoseconds as milliseconds, for reports.
pub fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_and_the_shared_clock_agree() {
        let before = mono_ns();
        let converted = instant_ns(Instant::now());
        let after = mono_ns();
        assert!(before <= converted + 1_000 && converted <= after + 1_000);

        let later = Instant::now() + Duration::from_millis(250);
        let delta = instant_ns(later) as i128 - mono_ns() as i128;
        // A preemption between the clock reads can only shorten it.
        assert!((150_000_000..=250_100_000).contains(&delta), "{delta}");
    }
}
