//! The keep-alive schedule: when to extend a held lock, and when it is lost.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::ops::machine::Machine;
use crate::{ExtendError, Extended, Extension, Lock, Reply, Request, Settings, Ttl};

/// The shortest pause before retrying an extension that found no quorum.
const MIN_RETRY_PAUSE: Duration = Duration::from_millis(10);

/// How a kept-alive lock is extended: `KeepAlive::default()` (extend at
/// half the TTL, without limit) and its two setters, for example
/// `KeepAlive::default().extend_when_left(0.3).max_extensions(10)`.
/// `#[non_exhaustive]`, so new options can come without breaking callers.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct KeepAlive {
    extend_when_left: f64,
    max_extensions: Option<u64>,
    /// Set for a leader's term: extend this long after each (re)start,
    /// whatever the share (a long lease with a short renew deadline).
    every: Option<Duration>,
}

impl KeepAlive {
    /// Extend when the validity left drops to this share of the TTL.
    /// Default 0.5: a 10 s lock is extended about every 5 s. Values are
    /// clamped to `[0.05, 0.95]`; the lead is also at least two per-node
    /// timeouts, so an extension has time to finish.
    #[must_use]
    pub fn extend_when_left(mut self, share: f64) -> Self {
        self.extend_when_left = share;
        self
    }

    /// Extend `period` after the lock's last (re)start, still no later
    /// than two per-node timeouts before its validity ends: a leader's
    /// term renews every retry period, however long its lease.
    pub(crate) fn every(mut self, period: Duration) -> Self {
        self.every = Some(period);
        self
    }

    /// Stop extending after this many extensions; the lock is then lost
    /// when its validity runs out ([`LossReason::ExtensionLimit`]).
    /// Default: extend until released.
    #[must_use]
    pub fn max_extensions(mut self, count: u64) -> Self {
        self.max_extensions = Some(count);
        self
    }
}

impl Default for KeepAlive {
    fn default() -> Self {
        Self {
            extend_when_left: 0.5,
            max_extensions: None,
            every: None,
        }
    }
}

/// Why a lock was lost: any guard's, kept alive or not ([`Expired`](Self::Expired)
/// is the one a guard without keep-alive can have).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum LossReason {
    /// The validity ran out while nothing kept the lock alive (a guard
    /// without keep-alive, past its TTL).
    #[error("the lock's validity ran out")]
    Expired,
    /// An extension failed: another owner holds the key on a majority, our
    /// value was released (or lost) on a majority, the validity ran out before an extension could count (a slow or paused
    /// client), or too few nodes answered until the validity ran out.
    #[error("{0}")]
    ExtendFailed(ExtendError),
    /// The configured number of extensions was reached and the validity then
    /// ran out.
    #[error("the validity ran out after the maximum of {extensions} extension(s)")]
    ExtensionLimit {
        /// Extensions made.
        extensions: u64,
    },
    /// The client was shut down, which released the lock.
    #[error("the client was shut down, which released the lock")]
    Closed,
}

/// What a [`KeepAliveSchedule`] asks of its driver.
#[cfg_attr(not(feature = "simulation"), allow(unreachable_pub))]
#[derive(Clone, Debug, PartialEq)]
pub enum KeepAliveEvent {
    /// Extend the lock to `ttl` now ([`Operation::extend`](crate::Operation::extend)), drive the extension,
    /// and feed its result to [`KeepAliveSchedule::handle_extended`] or
    /// [`KeepAliveSchedule::handle_failed`].
    Extend {
        /// The TTL to extend to: the lock's own.
        ttl: Ttl,
    },
    /// The extension limit is reached: no more extensions; the lock is lost
    /// when its validity ends ([`LossReason::ExtensionLimit`]).
    LimitReached {
        /// Extensions made.
        extensions: u64,
    },
    /// The lock can no longer be counted on; the schedule is over.
    Lost(LossReason),
}

#[derive(Clone, Debug)]
enum State {
    /// Waiting to start the next extension at this instant.
    Due(Instant),
    /// An extension is running; its result comes through `handle_*`.
    Extending,
    /// No more extensions: at the end of the validity, the lock is lost
    /// for this reason.
    Ending(LossReason),
    /// Lost; nothing more to do.
    Done,
}

/// When to extend a held lock, retry a failed extension, or give it up.
///
/// The schedule holds no lock and sends nothing: it tells its driver when to
/// run an extension ([`Operation::extend`](crate::Operation::extend), driven like any round) and decides
/// from each result what comes next:
///
/// - An extension starts when the validity left drops to
///   [`KeepAlive::extend_when_left`] share of the TTL, but never later than two
///   per-node timeouts before the validity ends (so the round has time to
///   finish) and never earlier than 90% into a fresh validity (so large
///   leads cannot make it spin).
/// - An extension that failed only because too few nodes answered
///   ([`ExtendError::NoQuorum`]: nothing is known to be gone) is retried
///   after a per-node timeout (at least 10 ms) while validity is left; the
///   loss is reported when the validity ends. Any other failure is a loss
///   at once.
/// - After [`KeepAlive::max_extensions`], nothing is extended; the lock is
///   lost when its validity ends.
///
/// # Calling order
///
/// 1. Drain [`poll_event`](Self::poll_event). On
///    [`KeepAliveEvent::Extend`], run the extension and feed its result to
///    [`handle_extended`](Self::handle_extended) (after [`Lock::apply`]) or
///    [`handle_failed`](Self::handle_failed) (also when `Lock::extend`
///    itself refused); on [`KeepAliveEvent::Lost`], stop.
/// 2. Otherwise wait until [`poll_timeout`](Self::poll_timeout) (`None`
///    while an extension runs) and call
///    [`handle_timeout`](Self::handle_timeout), then go back to 1.
///
/// ```
/// # use std::{sync::Arc, time::{Duration, Instant}};
/// # use rand::{SeedableRng, rngs::StdRng};
/// # use redlock_core::*;
/// # let settings = Arc::new(Config::new(["n1"]).validate()?);
/// # let t0 = Instant::now();
/// # let mut acquire = Acquisition::new(settings.clone(), b"job", settings.default_ttl(),
/// #     Attempts::Once, t0, StdRng::seed_from_u64(1));
/// # let request = acquire.poll_request().unwrap();
/// # acquire.handle_reply(Reply::to(&request, Ok(Response::Int(1))), t0);
/// # let Some(AcquireEvent::Acquired(mut lock)) = acquire.poll_event() else { panic!() };
/// let mut schedule = KeepAliveSchedule::new(&lock, KeepAlive::default());
/// assert_eq!(schedule.poll_event(), None);
/// // A 10 s lock is extended when about 5 s of validity are left.
/// let due = schedule.poll_timeout().unwrap();
/// assert!(lock.valid_until() - due == Duration::from_secs(5));
/// schedule.handle_timeout(due);
/// let Some(KeepAliveEvent::Extend { ttl }) = schedule.poll_event() else { panic!() };
/// let mut extension = lock.extend(ttl, due).expect("validity is left");
/// let request = extension.poll_request().unwrap();
/// extension.handle_reply(Reply::to(&request, Ok(Response::Int(1))), due);
/// let extended = extension.poll_event().unwrap().expect("extended");
/// lock.apply(&extended);
/// schedule.handle_extended(&extended, due);
/// assert!(schedule.poll_timeout().unwrap() > due + Duration::from_secs(4));
/// # Ok::<(), ConfigError>(())
/// ```
#[cfg_attr(not(feature = "simulation"), allow(unreachable_pub))]
#[derive(Clone, Debug)]
pub struct KeepAliveSchedule {
    settings: Arc<Settings>,
    share: f64,
    every: Option<Duration>,
    max_extensions: Option<u64>,
    ttl: Ttl,
    valid_until: Instant,
    extensions: u64,
    state: State,
    /// The last failed extension since the last one that counted.
    failed: Option<ExtendError>,
    events: VecDeque<KeepAliveEvent>,
}

#[cfg_attr(not(feature = "simulation"), allow(unreachable_pub))]
impl KeepAliveSchedule {
    /// The schedule for `lock` as it stands (its TTL, validity and the
    /// extensions it has had, which count towards the limit).
    pub fn new(lock: &Lock, options: KeepAlive) -> Self {
        let share = if options.extend_when_left.is_finite() {
            options.extend_when_left.clamp(0.05, 0.95)
        } else {
            KeepAlive::default().extend_when_left
        };
        let mut schedule = Self {
            settings: lock.settings().clone(),
            share,
            every: options.every,
            max_extensions: options.max_extensions,
            ttl: lock.ttl(),
            valid_until: lock.valid_until(),
            extensions: lock.extensions(),
            state: State::Done,
            failed: None,
            events: VecDeque::new(),
        };
        schedule.plan();
        schedule
    }

    #[cfg(feature = "simulation")]
    /// Successful extensions of the lock so far, including those before the
    /// schedule started.
    pub fn extensions(&self) -> u64 {
        self.extensions
    }

    #[cfg(feature = "simulation")]
    /// The end of the lock's validity, as the last extension left it.
    pub fn valid_until(&self) -> Instant {
        self.valid_until
    }

    #[cfg(feature = "simulation")]
    /// Whether the schedule is over (the lock was lost).
    pub fn is_done(&self) -> bool {
        matches!(self.state, State::Done)
    }

    /// The next thing to do, if any.
    pub fn poll_event(&mut self) -> Option<KeepAliveEvent> {
        self.events.pop_front()
    }

    /// When to call [`handle_timeout`](Self::handle_timeout): when the next
    /// extension is due, or when the validity of a lock that is no longer
    /// extended ends. `None` while an extension runs and once done.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.state {
            State::Due(at) => Some(at),
            State::Ending(_) => Some(self.valid_until),
            State::Extending | State::Done => None,
        }
    }

    /// Advances time: starts an extension that is due, or reports the loss
    /// of a lock whose validity ended.
    pub fn handle_timeout(&mut self, now: Instant) {
        match &self.state {
            State::Due(at) if now >= *at => {
                self.state = State::Extending;
                self.events
                    .push_back(KeepAliveEvent::Extend { ttl: self.ttl });
            }
            State::Ending(reason) if now >= self.valid_until => {
                let reason = reason.clone();
                self.lose(reason);
            }
            _ => {}
        }
    }

    /// Feeds a successful extension (already applied to the lock): plans the
    /// next one.
    pub fn handle_extended(&mut self, extended: &Extended, now: Instant) {
        if !matches!(self.state, State::Extending) {
            return;
        }
        self.ttl = extended.ttl;
        self.valid_until = extended.valid_until;
        self.extensions += 1;
        self.failed = None;
        self.plan();
        self.handle_timeout(now);
    }

    /// Feeds a failed extension: retried later while validity is left if it
    /// only lacked answers, otherwise the lock is lost.
    pub fn handle_failed(&mut self, error: ExtendError, now: Instant) {
        if !matches!(self.state, State::Extending) {
            return;
        }
        if error.loses_lock() {
            self.lose(LossReason::ExtendFailed(error));
            return;
        }
        let pause = self.node_timeout().max(MIN_RETRY_PAUSE);
        let retry_at = now + pause;
        self.failed = Some(error.clone());
        self.state = if retry_at < self.valid_until {
            State::Due(retry_at)
        } else {
            // No time for another round: the lock stands, unconfirmed,
            // until its validity ends.
            State::Ending(LossReason::ExtendFailed(error))
        };
        self.handle_timeout(now);
    }

    fn node_timeout(&self) -> Duration {
        self.settings.node_timeout_for(self.ttl)
    }

    /// Why the lock is lost if its validity ends now: no more extensions
    /// (the limit, or a failure with no time left to retry), else the
    /// last failed extension since one counted, else plain expiry. What
    /// [`Standing`](crate::Standing) reads from the events.
    pub(crate) fn ending(&self) -> LossReason {
        match (&self.state, &self.failed) {
            (State::Ending(reason), _) => reason.clone(),
            (_, Some(error)) => LossReason::ExtendFailed(error.clone()),
            (_, None) => LossReason::Expired,
        }
    }

    /// Plans the next extension after the lock's last (re)start.
    fn plan(&mut self) {
        if let Some(max) = self.max_extensions
            && self.extensions >= max
        {
            let extensions = self.extensions;
            self.events
                .push_back(KeepAliveEvent::LimitReached { extensions });
            self.state = State::Ending(LossReason::ExtensionLimit { extensions });
            return;
        }
        let ttl = self.ttl.as_duration();
        // A freshly extended lock is valid for `span`; extending no later
        // than 90% into it keeps the schedule from spinning with large leads.
        let span = ttl.saturating_sub(self.settings.drift(self.ttl));
        let lead = match self.every {
            // A period is never zero (`ElectionTiming` checks it).
            Some(every) => span.saturating_sub(every).max(self.node_timeout() * 2),
            None => ttl
                .mul_f64(self.share)
                .max(self.node_timeout() * 2)
                .min(span.mul_f64(0.9)),
        };
        let due = self
            .valid_until
            .checked_sub(lead)
            .unwrap_or(self.valid_until);
        self.state = State::Due(due);
    }

    fn lose(&mut self, reason: LossReason) {
        self.state = State::Done;
        self.events.push_back(KeepAliveEvent::Lost(reason));
    }
}

/// What a lock kept alive ([`Operation::keep_alive`](crate::Operation::keep_alive)) reports.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum KeptLockEvent {
    /// An extension counted; the kept lock has it already. Apply it to
    /// any copy of the lock the driver keeps ([`Lock::apply`]).
    Extended(Extended),
    /// An extension failed, or could not start
    /// ([`Operation::extend`](crate::Operation::extend) refused). When only too few nodes answered
    /// ([`ExtendError::NoQuorum`]) it is retried while validity is left;
    /// otherwise [`Lost`](Self::Lost) follows.
    ExtendFailed(ExtendError),
    /// The extension limit is reached: no more extensions; the lock is lost
    /// when its validity ends.
    LimitReached {
        /// Extensions made.
        extensions: u64,
    },
    /// The lock can no longer be counted on. Last event.
    Lost(LossReason),
}

/// A held lock kept alive, as one `Machine`: the `KeepAliveSchedule`
/// decides when to extend, and each extension ([`Operation::extend`](crate::Operation::extend)) runs inside
/// this machine, so a driver runs the whole keep-alive with the same loop as
/// every other machine: its `poll_timeout` is the
/// instant the next extension is due (or, while one runs, that extension's
/// own deadline), and its requests are the extensions' requests.
///
/// It never ends on its own while extensions succeed; its final event is
/// [`KeptLockEvent::Lost`]. A driver that stops earlier (the lock is being
/// released) simply drops it: requests in flight then are extends, which
/// change nothing once the release that follows them is sent.
///
/// ```
/// # use std::{sync::Arc, time::{Duration, Instant}};
/// # use rand::{SeedableRng, rngs::StdRng};
/// # use redlock_core::*;
/// # let settings = Arc::new(Config::new(["n1"]).validate()?);
/// # let t0 = Instant::now();
/// # let mut acquire = Acquisition::new(settings.clone(), b"job", settings.default_ttl(),
/// #     Attempts::Once, t0, StdRng::seed_from_u64(1));
/// # let request = acquire.poll_request().unwrap();
/// # acquire.handle_reply(Reply::to(&request, Ok(Response::Int(1))), t0);
/// # let Some(AcquireEvent::Acquired(lock)) = acquire.poll_event() else { panic!() };
/// let mut kept = KeptLock::new(lock, KeepAlive::default().max_extensions(1));
/// // Nothing to send until the extension is due, about 5 s before the end.
/// assert_eq!(kept.poll_request(), None);
/// let due = kept.poll_timeout().unwrap();
/// kept.handle_timeout(due);
/// let request = kept.poll_request().expect("the extension's request");
/// kept.handle_reply(Reply::to(&request, Ok(Response::Int(1))), due);
/// assert!(matches!(kept.poll_event(), Some(KeptLockEvent::Extended(_))));
/// assert!(matches!(kept.poll_event(), Some(KeptLockEvent::LimitReached { extensions: 1 })));
/// // No more extensions: the lock is lost when its validity ends.
/// let end = kept.poll_timeout().unwrap();
/// assert_eq!(end, kept.lock().valid_until());
/// kept.handle_timeout(end);
/// assert!(matches!(kept.poll_event(), Some(KeptLockEvent::Lost(LossReason::ExtensionLimit { .. }))));
/// assert!(kept.is_done());
/// # Ok::<(), ConfigError>(())
/// ```
#[cfg_attr(feature = "model-check", derive(Clone))]
#[derive(Debug)]
#[cfg_attr(not(feature = "simulation"), allow(unreachable_pub))]
pub struct KeptLock {
    lock: Lock,
    schedule: KeepAliveSchedule,
    extension: Option<Extension>,
    requests: VecDeque<Request>,
    events: VecDeque<KeptLockEvent>,
    done: bool,
}

#[cfg_attr(not(feature = "simulation"), allow(unreachable_pub))]
impl KeptLock {
    /// Keeps `lock` alive with `options`, from the state the lock is in.
    pub fn new(lock: Lock, options: KeepAlive) -> Self {
        let schedule = KeepAliveSchedule::new(&lock, options);
        let mut this = Self {
            lock,
            schedule,
            extension: None,
            requests: VecDeque::new(),
            events: VecDeque::new(),
            done: false,
        };
        // A limit of zero is reached at once.
        this.advance(None);
        this
    }

    /// The lock, with every extension so far applied.
    pub fn lock(&self) -> &Lock {
        &self.lock
    }

    /// The release of the lock as it stands, in a round of its own (a
    /// late answer to it is never taken for an extension's).
    pub(crate) fn release(&mut self, now: Instant) -> crate::Release {
        self.lock.release(now)
    }

    #[cfg(feature = "simulation")]
    /// The lock, given back (to release it).
    pub fn into_lock(self) -> Lock {
        self.lock
    }

    /// Does what the schedule asks: starts an extension, or reports.
    /// `now` is `None` only at construction, where the schedule asks for
    /// nothing but a limit already reached.
    fn advance(&mut self, now: Option<Instant>) {
        while let Some(event) = self.schedule.poll_event() {
            match event {
                KeepAliveEvent::Extend { ttl } => {
                    let now = now.expect("the schedule asks for an extension only at a time");
                    match self.lock.extend(ttl, now) {
                        Ok(extension) => {
                            self.extension = Some(extension);
                            self.take_requests();
                        }
                        Err(error) => {
                            self.events
                                .push_back(KeptLockEvent::ExtendFailed(error.clone()));
                            self.schedule.handle_failed(error, now);
                        }
                    }
                }
                KeepAliveEvent::LimitReached { extensions } => {
                    self.events
                        .push_back(KeptLockEvent::LimitReached { extensions });
                }
                KeepAliveEvent::Lost(reason) => {
                    self.done = true;
                    self.events.push_back(KeptLockEvent::Lost(reason));
                }
            }
        }
    }

    /// Whether the lock's validity has ended by `now`: then it is lost,
    /// whatever runs, for the reason the schedule knew at its end
    /// ([`KeepAliveSchedule::ending`]), so that a driver that comes late
    /// (a stalled runtime, a paused process) tells the loss a holder
    /// already read from its own clock ([`Standing`](crate::Standing)). An
    /// extension still running then could only fail (it counts only
    /// within the validity) and is dropped; requests queued before stay.
    fn ends(&mut self, now: Instant) -> bool {
        if self.done || now < self.lock.valid_until() {
            return self.done;
        }
        self.extension = None;
        self.done = true;
        self.events
            .push_back(KeptLockEvent::Lost(self.schedule.ending()));
        true
    }

    /// Moves the running extension's requests to this machine's queue, and
    /// its result, once decided, to the schedule.
    fn take_requests(&mut self) {
        let Some(extension) = &mut self.extension else {
            return;
        };
        while let Some(request) = extension.poll_request() {
            self.requests.push_back(request);
        }
    }

    fn finish_extension(&mut self, now: Instant) {
        self.take_requests();
        let Some(extension) = &mut self.extension else {
            return;
        };
        let Some(result) = extension.poll_event() else {
            return;
        };
        self.extension = None;
        match result {
            Ok(extended) => {
                self.lock.apply(&extended);
                self.schedule.handle_extended(&extended, now);
                self.events.push_back(KeptLockEvent::Extended(extended));
            }
            Err(error) => {
                self.events
                    .push_back(KeptLockEvent::ExtendFailed(error.clone()));
                self.schedule.handle_failed(error, now);
            }
        }
        self.advance(Some(now));
    }
}

impl Machine for KeptLock {
    type Event = KeptLockEvent;

    fn poll_request(&mut self) -> Option<Request> {
        self.requests.pop_front()
    }

    fn poll_event(&mut self) -> Option<KeptLockEvent> {
        self.events.pop_front()
    }

    /// The running extension's deadline, else when the schedule wants
    /// something (the next extension, or the end of the validity of a lock
    /// no longer extended). `None` once lost.
    fn poll_timeout(&self) -> Option<Instant> {
        if self.done {
            return None;
        }
        match &self.extension {
            Some(extension) => extension.poll_timeout(),
            None => self.schedule.poll_timeout(),
        }
    }

    fn handle_reply(&mut self, reply: Reply, now: Instant) {
        if self.ends(now) {
            return;
        }
        // A reply of an extension that has ended belongs to no round
        // running now: ignored, like every late reply.
        if let Some(extension) = &mut self.extension {
            extension.handle_reply(reply, now);
            self.finish_extension(now);
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.ends(now) {
            return;
        }
        match &mut self.extension {
            Some(extension) => {
                extension.handle_timeout(now);
                self.finish_extension(now);
            }
            None => {
                self.schedule.handle_timeout(now);
                self.advance(Some(now));
            }
        }
    }

    fn is_done(&self) -> bool {
        self.done
    }
}
