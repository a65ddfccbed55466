//! When an acquisition tries again: its attempt count, the retry delay
//! (a fixed delay plus uniform random jitter), the overall deadline, and
//! what it heard of releases since its current attempt started.

use std::time::{Duration, Instant};

use rand_core::Rng;

use crate::{Key, RetryConfig, Settings};

/// How many attempts an acquisition ([`Operation::acquire`](crate::Operation::acquire)) may make, and
/// for how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Attempts {
    /// One attempt, no retry (a `try_lock`).
    Once,
    /// The first attempt and up to [`RetryConfig::count`](crate::RetryConfig::count)
    /// retries, within the acquire deadline if one is set
    /// ([`Settings::acquire_deadline`]).
    Retry,
    /// The first attempt and up to this many retries on the retry timer,
    /// with no time limit: the call's own count, in place of the settings'
    /// [`RetryConfig::count`](crate::RetryConfig::count) and
    /// [`Settings::acquire_deadline`]. Attempts that release notices bring
    /// forward do not use up the count.
    Retries(u32),
    /// Retries for at most this long after the first attempt started,
    /// however many attempts that takes: this call's own deadline, in place
    /// of [`Settings::acquire_deadline`], and the retry count does not
    /// apply (as Redisson's `tryLock(waitTime, leaseTime)`). The retry
    /// delays are the settings'.
    ///
    /// The limit is waited out: the acquisition never gives up before it.
    /// When the next retry would start past it, the last one is moved to
    /// start one attempt's time (the per-node timeout, twice for a fenced
    /// lock) before the limit, and after that the acquisition still listens
    /// for release notices until the limit, each of which starts an
    /// attempt at once.
    ///
    /// The limit is hard, like the acquire deadline: a quorum counted at or
    /// after it is released, and the acquisition ends with
    /// [`AcquireError::DeadlineExceeded`](crate::AcquireError::DeadlineExceeded)
    /// naming this limit. A limit that takes the deadline past what
    /// `Instant` can represent (`Duration::MAX`) means no time limit: the
    /// acquisition retries until it gets the lock or a permanent error.
    /// Zero is refused by [`Operation::acquire`](crate::Operation::acquire)
    /// ([`ConfigError::ZeroDeadline`](crate::ConfigError::ZeroDeadline)).
    Within(Duration),
}

/// The attempts of one acquisition.
#[cfg_attr(feature = "model-check", derive(Clone))]
#[derive(Debug)]
pub(crate) struct Retries {
    max: u32,
    /// Attempts started, extra ones after release notices included.
    started: u32,
    /// Attempts that count against `max` (the first and the retries).
    counted: u32,
    deadline: Option<Instant>,
    /// The limit the deadline was set from, for the error that reports it.
    limit: Option<Duration>,
}

/// What follows a failed attempt.
pub(crate) enum Next {
    /// Wait for the next attempt until then (listening for release
    /// notices); at the overall deadline, the wait ends the acquisition.
    Retry(Instant),
    /// Every attempt was made.
    OutOfAttempts,
}

impl Retries {
    pub(crate) fn new(settings: &Settings, attempts: Attempts, now: Instant) -> Self {
        let (max, limit) = match attempts {
            Attempts::Once => (1, None),
            Attempts::Retry => (
                settings.retry().count.saturating_add(1),
                settings.acquire_deadline(),
            ),
            Attempts::Retries(count) => (count.saturating_add(1), None),
            // The time is the bound; a count that never runs out.
            Attempts::Within(limit) => (u32::MAX, Some(limit)),
        };
        Self {
            max,
            started: 0,
            counted: 1,
            // Past what the clock can represent: no deadline at all.
            deadline: limit.and_then(|limit| now.checked_add(limit)),
            limit,
        }
    }

    /// The limit the deadline comes from: the call's own or the settings'.
    pub(crate) fn limit(&self) -> Option<Duration> {
        self.limit
    }

    /// Whether this is a one-attempt acquisition (a `try_lock`).
    pub(crate) fn limit_is_once(&self) -> bool {
        self.max == 1 && self.limit.is_none()
    }

    /// Attempts started so far.
    pub(crate) fn started(&self) -> u32 {
        self.started
    }

    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    pub(crate) fn is_past_deadline(&self, now: Instant) -> bool {
        self.deadline.is_some_and(|deadline| now >= deadline)
    }

    /// The first attempt was withdrawn before anything was sent: the
    /// acquisition waits for its turn first, and its first attempt comes
    /// from a notice or the timer.
    pub(crate) fn unstart(&mut self) {
        self.started = 0;
        self.counted = 0;
    }

    /// An attempt starts.
    pub(crate) fn start(&mut self) {
        self.started += 1;
    }

    /// The scheduled retry is due: it counts against the limit.
    pub(crate) fn count_scheduled(&mut self) {
        self.counted += 1;
    }

    /// After a failed attempt at `now`; `scheduled` is the retry an extra
    /// attempt (after a release notice) jumped ahead of, and `attempt` how
    /// long an attempt may take (its rounds' per-node timeouts).
    pub(crate) fn after_failure<R: Rng + ?Sized>(
        &mut self,
        scheduled: Option<Instant>,
        now: Instant,
        attempt: Duration,
        retry: &RetryConfig,
        rng: &mut R,
    ) -> Next {
        if let Some(until) = scheduled {
            if until > now {
                // Back to the retry that was scheduled anyway.
                return Next::Retry(until);
            }
            // The scheduled retry's time passed while the extra attempt ran:
            // the extra attempt took its place and uses it up, so notices
            // can never keep an acquisition retrying past its count.
            self.counted += 1;
        }
        if self.counted >= self.max {
            return Next::OutOfAttempts;
        }
        let until = now + retry_delay(retry, rng);
        match self.deadline {
            // A deadline is waited out, never given up on early: a release
            // can come at any moment before it. The last retry starts in
            // time to end by the deadline (if that is still ahead); after
            // it, only release notices start attempts, and the wait ends
            // at the deadline.
            Some(deadline) if until >= deadline => Next::Retry(
                deadline
                    .checked_sub(attempt)
                    .filter(|&last| last > now)
                    .unwrap_or(deadline),
            ),
            _ => Next::Retry(until),
        }
    }
}

/// What an acquisition heard of releases since its current attempt started.
#[cfg_attr(feature = "model-check", derive(Clone))]
#[derive(Debug)]
pub(crate) struct Notices {
    /// Whether to ask for notices at all ([`Settings::release_notices`]).
    pub(crate) wanted: bool,
    /// Asked for already (with [`Machine::poll_listen`]), or queued.
    pub(crate) asked: bool,
    /// Channels to hand out at the next `poll_listen`.
    pub(crate) listen: Option<Vec<Key>>,
    /// When the current attempt started: notices before it were seen by it.
    /// `None` while the acquisition waits behind its client's waiters
    /// without having attempted ([`Acquisition::queue_behind`](crate::Acquisition::queue_behind)):
    /// it saw nothing, so every notice counts, also one replayed from
    /// before it queued (the waiter ahead, told it, may have left without
    /// attempting; the model check of the hub found the stranded waiter).
    pub(crate) since: Option<Instant>,
    /// Per node: a release notice came from it since.
    pub(crate) heard: Vec<bool>,
    /// The channels were subscribed (again) since: releases before that
    /// were not heard.
    pub(crate) subscribed: bool,
    /// A holder of this client released the lock since
    /// ([`Notice::HandedOver`](crate::Notice::HandedOver)).
    pub(crate) handed_over: bool,
}

impl Notices {
    pub(crate) fn new(settings: &Settings, now: Instant) -> Self {
        Self {
            wanted: settings.release_notices(),
            asked: false,
            listen: None,
            since: Some(now),
            heard: vec![false; settings.node_names().len()],
            subscribed: false,
            handed_over: false,
        }
    }

    /// Whether the lock may have been released after the current attempt
    /// started: notices came from more nodes than failed attempts can free
    /// while another client holds a quorum (N - quorum + 1: 2 of 3, 3 of 5),
    /// or the channels were newly subscribed, or a holder of this client
    /// released it (its release runs on each node before our next
    /// attempt). Failed attempts release what
    /// they set, and those releases publish too; counting single notices
    /// let each clean-up wake every other waiter, whose failing attempts
    /// cleaned up in turn: a storm of attempts for as long as the lock was
    /// held. A real release frees a quorum at once.
    pub(crate) fn released(&self, quorum: usize) -> bool {
        let threshold = self.heard.len() - quorum + 1;
        self.subscribed
            || self.handed_over
            || self.heard.iter().filter(|&&heard| heard).count() >= threshold
    }

    pub(crate) fn restart(&mut self, now: Instant) {
        self.since = Some(now);
        self.heard.fill(false);
        self.subscribed = false;
        self.handed_over = false;
    }
}

/// The wait before the next attempt: `delay + uniform(0, jitter)`, drawn from
/// the caller's RNG so that tests can replay it.
///
/// ```
/// use std::time::Duration;
/// use rand::{SeedableRng, rngs::StdRng};
/// use redlock_core::{RetryConfig, retry_delay};
///
/// let retry = RetryConfig::default()
///     .delay(Duration::from_millis(50))
///     .jitter(Duration::from_millis(150));
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

/// The wait before each attempt to reconnect to a node: `min` after the
/// first failure, doubled after each further one up to `max`, less a random
/// part of up to a quarter so that many clients cut off together do not
/// come back in step. Sans-IO like the rest of the core: the caller sleeps,
/// and hands in the random generator (seeded in a simulation).
///
/// ```
/// use std::time::Duration;
/// use rand::{SeedableRng, rngs::StdRng};
/// use redlock_core::Backoff;
///
/// let mut rng = StdRng::seed_from_u64(7);
/// let mut backoff = Backoff::reconnect();
/// let first = backoff.next(&mut rng);
/// assert!(first <= Duration::from_millis(50) && first >= Duration::from_micros(37_500));
/// let second = backoff.next(&mut rng);
/// assert!(second <= Duration::from_millis(100) && second >= Duration::from_millis(75));
/// backoff.reset();
/// assert!(backoff.next(&mut rng) <= Duration::from_millis(50));
/// ```
#[cfg_attr(not(feature = "simulation"), allow(unreachable_pub))]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    next: Duration,
}

#[cfg_attr(not(feature = "simulation"), allow(unreachable_pub))]
impl Backoff {
    /// From `min`, doubling up to `max` (`max` below `min` counts as `min`).
    pub fn new(min: Duration, max: Duration) -> Self {
        Self {
            min,
            max: max.max(min),
            next: min,
        }
    }

    /// The reconnection backoff of the client's nodes and release-notice
    /// connections: 50 ms, doubling up to 2 s.
    pub fn reconnect() -> Self {
        Self::new(Duration::from_millis(50), Duration::from_secs(2))
    }

    /// The next wait, drawn from `rng`; the one after is twice as long, up
    /// to the maximum.
    pub fn next<R: Rng + ?Sized>(&mut self, rng: &mut R) -> Duration {
        let delay = self.next;
        self.next = delay.saturating_mul(2).min(self.max);
        let quarter = u64::try_from(delay.as_micros() / 4).unwrap_or(u64::MAX);
        // The modulo bias is below 2^-40 for any delay under a year.
        let cut = rng.next_u64() % quarter.saturating_add(1);
        delay - Duration::from_micros(cut)
    }

    /// Back to the first wait: a connection was made.
    pub fn reset(&mut self) {
        self.next = self.min;
    }
}
