//! The cheap-to-clone client handle and its entry points.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::StdRng;
use redlock_core::{
    AcquireEvent, Acquisition, Attempts, LockSpec, LockValue, Release, ReleaseReport, RoundId,
    Settings,
};
use tracing::{Instrument, debug, info_span};

use crate::KeepAlive;
use crate::builder::Builder;
use crate::driver::drive;
use crate::guard::{LockContext, LockGuard};
use crate::metrics;
use crate::node::Node;
use crate::notices::Notices;
use crate::options::LockOptions;
use crate::{Error, LossReason};
use tokio_util::task::TaskTracker;

/// A Redlock client over N independent Redis masters.
///
/// Cheap to clone (one `Arc`); clones share the connections. Make one per
/// process with [`Redlock::connect`] or [`Redlock::builder`] and pass clones
/// around.
#[derive(Clone)]
pub struct Redlock {
    inner: Arc<Inner>,
}

struct Inner {
    settings: Arc<Settings>,
    nodes: Arc<[Arc<Node>]>,
    /// Release notices for waiting acquires; `None` when switched off.
    notices: Option<Arc<Notices>>,
    /// The releases sent in the background, for [`Redlock::shutdown`].
    background: TaskTracker,
    /// Requests in flight when their operation finished, completed in one
    /// task ([`complete_in_background`](crate::driver::complete_in_background)).
    drain: crate::drain::Drain,
    /// Releases and withdraws past their deadline, waiting for their nodes,
    /// of operations on another runtime than the drain's.
    late: TaskTracker,
    /// Whether a refused release notice was logged (once per client).
    notice_refusal_logged: std::sync::atomic::AtomicBool,
    /// The node-labelled metric keys (nothing without the `metrics` feature).
    metrics: metrics::Nodes,
    /// Set in a simulation only: its seeded RNG replaces the OS's.
    simulation: Option<crate::sim::Simulation>,
}

impl Redlock {
    /// A client over connected (or reconnecting) nodes.
    pub(crate) fn new(
        settings: Arc<Settings>,
        nodes: Arc<[Arc<Node>]>,
        notices: Option<Arc<Notices>>,
        metrics: metrics::Nodes,
        simulation: Option<crate::sim::Simulation>,
    ) -> Self {
        let patience = settings.default_ttl().as_duration();
        Self {
            inner: Arc::new(Inner {
                settings,
                nodes,
                notices,
                background: TaskTracker::new(),
                drain: crate::drain::Drain::new(patience),
                late: TaskTracker::new(),
                notice_refusal_logged: Default::default(),
                metrics,
                simulation,
            }),
        }
    }
}

impl fmt::Debug for Redlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redlock")
            .field("nodes", &self.inner.nodes)
            .field("settings", &self.inner.settings)
            .finish()
    }
}

impl Redlock {
    /// Connects to these servers with every option at its default
    /// (10 s TTL, 10 retries 50..200 ms apart).
    ///
    /// Same as `Redlock::builder(urls).build()`; see [`Builder::build`] for
    /// what fails the build and what does not.
    pub async fn connect<I, S>(urls: I) -> Result<Self, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self::builder(urls).build().await
    }

    /// A builder for these servers: `redis://[user:password@]host[:port][/db]`,
    /// or `rediss://...` for TLS, one URL per independent master.
    pub fn builder<I, S>(urls: I) -> Builder
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Builder::from_urls(urls)
    }

    /// The validated settings (node names, quorum, TTL, timeouts, ...).
    pub fn settings(&self) -> &Settings {
        &self.inner.settings
    }

    /// The nodes' canonical addresses (`host:port/db`), in the order the
    /// votes in errors use.
    pub fn nodes(&self) -> &[String] {
        self.inner.settings.nodes()
    }

    /// How many nodes have a connection up right now.
    pub fn connected_nodes(&self) -> usize {
        self.inner.nodes.iter().filter(|n| n.is_connected()).count()
    }

    /// Waits until every request this client sends in the background has
    /// been answered or has reached its deadline (those of dropped guards,
    /// of cancelled or failed acquires, of slow nodes after a decision),
    /// then up to one more per-node timeout for releases still queued on a
    /// node that has not answered them yet (a paused master): they stay
    /// queued after that, and reach the node if it comes back while the
    /// process runs.
    ///
    /// You need not call it before `main` returns: a guard alive or dropped
    /// then is still released, on a blocking connection if its runtime has
    /// gone (see [`LockGuard`](crate::LockGuard)). It is the explicit form,
    /// for a program that wants its releases answered before it goes on, or
    /// before it calls [`std::process::exit`], which runs no destructor. The
    /// client stays usable afterwards.
    ///
    /// ```no_run
    /// # async fn work() -> Result<(), Box<dyn std::error::Error>> { Ok(()) }
    /// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
    /// let redlock = redlock_tokio::Redlock::connect(["redis://127.0.0.1:6379"]).await?;
    /// let result = async {
    ///     let _guard = redlock.lock("nightly-report").await?;
    ///     work().await // an error drops the guard: released in the background
    /// }
    /// .await;
    /// redlock.shutdown().await; // that release has been answered
    /// result
    /// # }
    /// ```
    pub async fn shutdown(&self) {
        let background = &self.inner.background;
        background.close();
        background.wait().await;
        background.reopen();
        let drain = &self.inner.drain;
        drain.settled().await;
        let late = &self.inner.late;
        late.close();
        let _ = tokio::time::timeout(
            self.inner.settings.node_timeout(),
            futures::future::join(late.wait(), drain.idle()),
        )
        .await;
        late.reopen();
    }

    /// The simulation this client runs in, if any (see [`crate::sim`]).
    pub(crate) fn simulation(&self) -> Option<&crate::sim::Simulation> {
        self.inner.simulation.as_ref()
    }

    pub(crate) fn background(&self) -> &TaskTracker {
        &self.inner.background
    }

    pub(crate) fn drain(&self) -> &crate::drain::Drain {
        &self.inner.drain
    }

    pub(crate) fn late(&self) -> &TaskTracker {
        &self.inner.late
    }

    /// Logs a release's outcome; a refused release notice once per client,
    /// at WARN: the lock is released, but waiters fall back on their timer.
    pub(crate) fn log_release(&self, report: &ReleaseReport) {
        debug!(report = %report, "released");
        metrics::released(report);
        if report.notices_refused() > 0
            && !self
                .inner
                .notice_refusal_logged
                .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            tracing::warn!(
                nodes = report.notices_refused(),
                "a server refused to publish a release notice (an ACL user without channel rights?); \
                 locks are still released, waiters retry on their timer; switch notices off with \
                 Builder::release_notices(false)"
            );
        }
    }

    /// How many nodes have a release-notice (pub/sub) connection up right
    /// now, one whose subscriptions the node accepted: 0 until an acquire
    /// first had to wait, with [`Builder::release_notices`] off, or on a
    /// node that refuses `SUBSCRIBE`; at most one per node.
    pub fn release_notice_connections(&self) -> usize {
        self.inner
            .notices
            .as_ref()
            .map_or(0, |notices| notices.connected())
    }

    pub(crate) fn notices(&self) -> Option<&Arc<Notices>> {
        self.inner.notices.as_ref()
    }

    pub(crate) fn node_handles(&self) -> &Arc<[Arc<Node>]> {
        &self.inner.nodes
    }

    pub(crate) fn node_metrics(&self) -> &metrics::Nodes {
        &self.inner.metrics
    }

    /// One attempt to acquire the lock on `resource` with the default TTL.
    ///
    /// Fails at once when another owner holds it
    /// ([`Error::is_held_by_other`]) or when too few nodes answer.
    ///
    /// Cancel-safe: dropping the future releases whatever the attempt may
    /// have set on the nodes, in the background.
    pub async fn try_lock(&self, resource: impl AsRef<[u8]>) -> Result<LockGuard, Error> {
        self.acquire(resource.as_ref(), LockOptions::new().once())
            .await
    }

    /// Acquires the lock on `resource` with options for this call: TTL,
    /// fencing token, one attempt, retries, or retries for at most a given
    /// time ([`LockOptions::wait_at_most`]).
    ///
    /// ```no_run
    /// # async fn demo(redlock: redlock_tokio::Redlock) -> Result<(), redlock_tokio::Error> {
    /// use std::time::Duration;
    /// use redlock_tokio::LockOptions;
    ///
    /// let guard = redlock
    ///     .lock_with("ledger", LockOptions::new().ttl(Duration::from_secs(30)).fencing(true))
    ///     .await?;
    /// let token = guard.fencing_token().expect("asked for one");
    /// // Send `token` with every write; the ledger rejects tokens lower than one it saw.
    /// # let _ = token;
    /// # Ok(()) }
    /// ```
    pub async fn lock_with(
        &self,
        resource: impl AsRef<[u8]>,
        options: LockOptions,
    ) -> Result<LockGuard, Error> {
        self.acquire(resource.as_ref(), options).await
    }

    /// [`try_lock`](Self::try_lock) with a TTL for this lock.
    pub async fn try_lock_with_ttl(
        &self,
        resource: impl AsRef<[u8]>,
        ttl: Duration,
    ) -> Result<LockGuard, Error> {
        self.acquire(resource.as_ref(), LockOptions::new().ttl(ttl).once())
            .await
    }

    /// Acquires the lock on `resource` with the default TTL, retrying after
    /// a random delay as configured, until the retry count or the acquire
    /// deadline runs out.
    ///
    /// What it waits for by default: the first attempt and
    /// [`Builder::retry_count`](crate::Builder::retry_count) retries (10,
    /// 50..200 ms apart: about 0.5 to 2 s), and it takes the lock at once
    /// when the holder releases it in that time (release notices start
    /// attempts without using up the count). So a lock held for longer is
    /// an error to handle, as with redsync's `Lock` (32 tries), and unlike
    /// Redisson's `lock()` or [`tokio::sync::Mutex::lock`], which wait for
    /// ever: a distributed lock can be held by a client that hangs or
    /// crashed, and a wait without end hides it. For a wait of a given
    /// length use [`LockOptions::wait_at_most`] (Redisson's
    /// `tryLock(waitTime, leaseTime)`: waited out to the limit), for no
    /// limit `wait_at_most(Duration::MAX)`, and for no wait
    /// [`try_lock`](Self::try_lock). With an
    /// [acquire deadline](crate::Builder::acquire_deadline), the deadline
    /// is waited out too, while retries are left.
    ///
    /// Cancel-safe: dropping the future (for example in
    /// `tokio::time::timeout`) releases whatever the attempt in flight may
    /// have set on the nodes, in the background.
    pub async fn lock(&self, resource: impl AsRef<[u8]>) -> Result<LockGuard, Error> {
        self.acquire(resource.as_ref(), LockOptions::new()).await
    }

    /// [`lock`](Self::lock) with a TTL for this lock.
    pub async fn lock_with_ttl(
        &self,
        resource: impl AsRef<[u8]>,
        ttl: Duration,
    ) -> Result<LockGuard, Error> {
        self.acquire(resource.as_ref(), LockOptions::new().ttl(ttl))
            .await
    }

    /// Runs `work` while holding the lock on `resource`, kept alive with
    /// [`KeepAlive::default`], and releases it at the end.
    ///
    /// `work` gets a [`LockContext`]: the lock's fencing token, value and
    /// validity (refreshed by every extension), and its loss signal. If the
    /// lock is lost, the `work` future is dropped (cancelled at its current
    /// `.await`) and the result is [`Error::LockLost`]. The lock is released
    /// in every case before this returns (or in the background if this
    /// future is itself dropped).
    ///
    /// Dropping `work` stops it only at an `.await`: code between two
    /// awaits, or a blocking call, runs to its next `.await` first. Check
    /// [`LockContext::is_lost`] or [`LockContext::validity`] (or keep steps
    /// short) in long synchronous sections.
    ///
    /// ```no_run
    /// # async fn demo(redlock: redlock_tokio::Redlock) -> Result<(), redlock_tokio::Error> {
    /// let rows = redlock
    ///     .with_lock("nightly-report", async |lock| {
    ///         println!("holding {} for {:?}", lock.key(), lock.validity());
    ///         // ... long work; dropped at an `.await` if the lock is lost ...
    ///         42
    ///     })
    ///     .await?;
    /// # let _ = rows;
    /// # Ok(()) }
    /// ```
    pub async fn with_lock<F, Fut, T>(
        &self,
        resource: impl AsRef<[u8]>,
        work: F,
    ) -> Result<T, Error>
    where
        F: FnOnce(LockContext) -> Fut,
        Fut: Future<Output = T>,
    {
        self.with_lock_kept_alive(resource, KeepAlive::default(), work)
            .await
    }

    /// [`with_lock`](Self::with_lock) with other keep-alive options.
    pub async fn with_lock_kept_alive<F, Fut, T>(
        &self,
        resource: impl AsRef<[u8]>,
        keep_alive: KeepAlive,
        work: F,
    ) -> Result<T, Error>
    where
        F: FnOnce(LockContext) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.lock(resource).await?;
        let key = guard.key().clone();
        let kept = guard.keep_alive(keep_alive);
        let context = kept.context();
        let outcome: Result<T, LossReason> = tokio::select! {
            biased;
            reason = kept.lost() => Err(reason),
            value = work(context) => Ok(value),
        };
        let report = kept.release().await;
        debug!(key = %key, report = %report, "released after with_lock");
        outcome.map_err(|reason| Error::LockLost { key, reason })
    }

    /// Releases `value` on `resource` on every node: for a lock taken
    /// elsewhere (another process, a [`LockGuard::forget`]ed guard) whose
    /// value is known. Only that value is deleted; a key held by another
    /// value is left alone.
    pub async fn release_value(
        &self,
        resource: impl AsRef<[u8]>,
        value: &LockValue,
    ) -> ReleaseReport {
        let settings = self.settings();
        let key = settings.key(resource.as_ref());
        let span = info_span!("redlock.release", resource = %key);
        let mut release = Release::new(settings, key, value.clone(), RoundId(0), crate::sim::now());
        async {
            let report = drive(&mut release, self).await;
            self.log_release(&report);
            report
        }
        .instrument(span)
        .await
    }

    /// A read lock on `resource`: many readers may hold it at once, and no
    /// writer while they do. Retries per the client's policy.
    ///
    /// Writers are not starved: a writer that finds readers holds new readers
    /// off while it retries, so it waits only for the readers already in (see
    /// [`LockSpec::Read`]). Extend, keep-alive and release work as for a plain
    /// lock; each reader has its own value, so one never releases another.
    pub async fn read_lock(&self, resource: impl AsRef<[u8]>) -> Result<LockGuard, Error> {
        self.lock_spec(LockSpec::Read(resource.as_ref()), LockOptions::new())
            .await
    }

    /// The write lock of the read-write lock on `resource`: excludes readers
    /// and other writers. Retries per the client's policy.
    pub async fn write_lock(&self, resource: impl AsRef<[u8]>) -> Result<LockGuard, Error> {
        self.lock_spec(LockSpec::Write(resource.as_ref()), LockOptions::new())
            .await
    }

    /// A reentrant lock on `resource` for `owner`: the same owner id may take
    /// it again while holding it (from any task or process), and each guard
    /// releases only its own acquisition; the lock is free once all are
    /// released or expired. Pass an explicit owner id (async tasks move
    /// between threads, so there is no implicit "current owner"). The
    /// acquisitions are recorded on the nodes, so they survive a client
    /// restart only if the owner id does.
    pub async fn lock_reentrant(
        &self,
        resource: impl AsRef<[u8]>,
        owner: &str,
    ) -> Result<LockGuard, Error> {
        let spec = LockSpec::Reentrant {
            resource: resource.as_ref(),
            owner,
        };
        self.lock_spec(spec, LockOptions::new()).await
    }

    /// One lock over all of `resources`, taken atomically on each node, or
    /// none of them. It excludes any other lock on any of the resources,
    /// including single ones. Resources named twice are locked once.
    pub async fn lock_all<R: AsRef<[u8]>>(&self, resources: &[R]) -> Result<LockGuard, Error> {
        let names: Vec<&[u8]> = resources.iter().map(AsRef::as_ref).collect();
        self.lock_spec(LockSpec::Multi(&names), LockOptions::new())
            .await
    }

    /// Acquires any kind of lock ([`LockSpec`]) with options for this call.
    /// The client's default fencing applies to exclusive locks only; asking
    /// for fencing on another kind is a
    /// [`ConfigError::FencingUnsupported`](crate::ConfigError::FencingUnsupported)
    /// (the choice is the core's: [`Settings::fencing_choice`]).
    pub async fn lock_spec(
        &self,
        spec: LockSpec<'_>,
        options: LockOptions,
    ) -> Result<LockGuard, Error> {
        let settings = &self.inner.settings;
        let now = crate::sim::now();
        // Reported once, whatever happens below: a `?` before the first
        // attempt is a `config` outcome, a drop after it a `cancelled` one.
        let mut report = metrics::Acquire::start(metrics::Kind::of_spec(&spec), now);
        // The core's choices: fairness, fencing, and (in `with_spec`) the
        // refusal of keys in different hash slots on a cluster node.
        let spec = settings.fair_choice(spec, options.fair)?;
        let spec = settings.fencing_choice(spec, options.fencing)?;
        let attempts = options.attempts;
        let ttl = match options.ttl {
            Some(ttl) => settings.ttl(ttl)?,
            None => settings.default_ttl(),
        };
        let rng = match &self.inner.simulation {
            None => StdRng::from_rng(&mut rand::rng()),
            Some(simulation) => simulation.rng(),
        };
        let mut acquisition =
            Acquisition::with_spec(Arc::clone(settings), spec, ttl, attempts, now, rng)?;
        // First come, first served: behind this client's waiters (the core's
        // WaitQueue rule; try_lock is not held back).
        if let Some(notices) = self.notices() {
            notices.queue_behind(&mut acquisition, now);
        }
        report.sent();
        let resource: Arc<[u8]> = match spec {
            LockSpec::Exclusive(resource)
            | LockSpec::Fenced(resource)
            | LockSpec::Read(resource)
            | LockSpec::Write(resource)
            | LockSpec::Reentrant { resource, .. }
            | LockSpec::Fair(resource) => resource.into(),
            LockSpec::Multi(resources) => resources.first().copied().unwrap_or_default().into(),
            _ => acquisition.key().as_bytes().into(),
        };
        let span = info_span!(
            "redlock.acquire",
            resource = %acquisition.key(),
            kind = acquisition.kind().name(),
            ttl_ms = ttl.as_millis(),
            retry = !matches!(attempts, Attempts::Once),
            wait_limit_ms = match attempts {
                Attempts::Within(limit) => Some(u64::try_from(limit.as_millis()).unwrap_or(u64::MAX)),
                _ => None,
            },
            fenced = matches!(spec, LockSpec::Fenced(_)),
        );
        async {
            match drive(&mut acquisition, self).await {
                AcquireEvent::Acquired(lock) => {
                    report.finish(metrics::Outcome::Granted, acquisition.attempts());
                    debug!(
                        attempts = acquisition.attempts(),
                        validity_ms = lock.validity(crate::sim::now()).as_millis() as u64,
                        votes = %lock.votes(),
                        "lock acquired"
                    );
                    Ok(LockGuard::new(self.clone(), resource, lock))
                }
                AcquireEvent::Failed(error) => {
                    report.finish(metrics::Outcome::of(&error), acquisition.attempts());
                    debug!(error = %error, "lock not acquired");
                    Err(error.into())
                }
                AcquireEvent::AttemptFailed { .. } => {
                    unreachable!("a failed attempt is never an acquisition's final event")
                }
            }
        }
        .instrument(span)
        .await
    }

    async fn acquire(&self, resource: &[u8], options: LockOptions) -> Result<LockGuard, Error> {
        self.lock_spec(LockSpec::Exclusive(resource), options).await
    }
}
