//! The cheap-to-clone client handle and its entry points.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redlock_core::{
    AcquireEvent, Attempts, LockSpec, LockValue, Operation, ReleaseReport, Settings,
};
use tracing::{Instrument, debug, info_span};

use crate::builder::Builder;
use crate::driver::{Driver, drive, kind, run};
use crate::handles::guard::LockGuard;
use crate::metrics;
use crate::node::Node;
use crate::{Error, LockRequest, Wait};

/// A Redlock client over N independent Redis masters.
///
/// Cheap to clone (one `Arc`); clones share the connections. Make one per
/// process with [`Redlock::connect`] or [`Redlock::builder`] and pass clones
/// around.
#[derive(Clone)]
pub struct Redlock {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) settings: Arc<Settings>,
    /// How long an acquire waits unless its request says.
    pub(crate) wait: Wait,
    pub(crate) nodes: Arc<[Arc<Node>]>,
    /// The one task that runs the client's core.
    pub(crate) driver: Arc<Driver>,
    /// Whether a refused release notice was logged (once per client).
    pub(crate) notice_refusal_logged: std::sync::atomic::AtomicBool,
    /// The node-labelled metric keys (nothing without the `metrics` feature).
    pub(crate) metrics: metrics::Nodes,
    /// Set in a simulation only: its seeded RNG replaces the OS's.
    pub(crate) simulation: Option<crate::sim::Simulation>,
    /// The live guards, for the shutdown to release.
    pub(crate) guards: crate::handles::guard::Guards,
}

impl Redlock {
    /// A client over connected (or reconnecting) nodes.
    pub(crate) fn new(inner: Inner) -> Self {
        Self {
            inner: Arc::new(inner),
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

    /// The name this client gives the node at `url` in errors, logs and
    /// metrics (`host:port/db`, without credentials), or why the URL cannot
    /// name a node. Nothing is connected.
    ///
    /// ```
    /// use redlock_tokio::Redlock;
    ///
    /// assert_eq!(Redlock::node_name("redis://:secret@127.0.0.1:7001/2")?, "127.0.0.1:7001/2");
    /// assert!(Redlock::node_name("redis:/127.0.0.1:7001").is_err());
    /// # Ok::<(), redlock_tokio::ConfigError>(())
    /// ```
    pub fn node_name(url: &str) -> Result<String, crate::ConfigError> {
        crate::node::server::node_name(url)
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

    /// What the client knows of each server, in node order, from its last
    /// connection to it: what it is, how long it has been up, its run id,
    /// whether it keeps what it acknowledged across a restart, whether it
    /// may evict lock keys ([`ServerReport`](crate::ServerReport)). Sends
    /// nothing. `redlock status` prints it.
    pub fn servers(&self) -> Vec<crate::ServerReport> {
        self.inner.nodes.iter().map(|node| node.report()).collect()
    }

    /// How many nodes have a connection up right now.
    pub fn connected_nodes(&self) -> usize {
        self.inner.nodes.iter().filter(|n| n.is_connected()).count()
    }

    /// The nodes known slow right now (`host:port/db`): each left several
    /// requests in a row unanswered past the per-node timeout (a paused or
    /// stalled master), so new acquires and extensions skip it, but for one
    /// probe every four per-node timeouts, until it answers again.
    /// Releases still go to it. Each change is logged at INFO and, with the
    /// `metrics` feature, is the gauge `redlock_node_slow`.
    pub fn slow_nodes(&self) -> Vec<&str> {
        self.nodes()
            .iter()
            .enumerate()
            .filter(|(index, _)| self.inner.driver.is_slow(*index))
            .map(|(_, name)| name.as_str())
            .collect()
    }

    /// Shuts the client down, and returns once nothing of it runs: every
    /// lock it holds released, every request answered or given up, every
    /// task of the client ended, every connection closed.
    ///
    /// - Live guards are released (behind their keep-alive's extensions,
    ///   on every node) and lost: [`LossReason::Closed`](crate::LossReason::Closed),
    ///   so work under [`run`](crate::LockRequest::run) stops. Leaderships
    ///   are released and lost the same way.
    /// - Acquires (waiting or not), extensions and proclamations end with
    ///   [`Error::Closed`](crate::Error::Closed), having withdrawn what they
    ///   may hold; so does every later one, on this handle and its clones.
    /// - What guards dropped earlier, cancelled acquires and slow nodes left
    ///   to send is delivered first: a release waits for a paused master,
    ///   or for the next connection to a master that is down, at most until
    ///   its lock's keys have expired by themselves (one TTL of that lock
    ///   past the release's deadline).
    ///
    /// You need not call it before `main` returns: a guard alive or dropped
    /// then is still released, on a blocking connection if its runtime has
    /// gone (see [`LockGuard`](crate::LockGuard)). It is the explicit form,
    /// for a service that stops (on `SIGTERM`, say) and wants its locks
    /// free for the next holder at once, and before [`std::process::exit`],
    /// which runs no destructor. [`settled`](Self::settled) waits the same
    /// way but closes nothing.
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
    /// redlock.shutdown().await; // that release has been answered, nothing runs
    /// result
    /// # }
    /// ```
    pub async fn shutdown(&self) {
        let releases = self.inner.guards.close();
        self.inner.driver.close(releases).await;
        for node in self.inner.nodes.iter() {
            node.close();
        }
        // The `redis` crate aborts a connection's task when the connection
        // is dropped; the task ends when the runtime next polls it, which
        // this turn lets happen (a worker of a multi-thread runtime may
        // take it a moment longer).
        tokio::task::yield_now().await;
    }

    /// Waits until everything this client does in the background is done,
    /// as [`shutdown`](Self::shutdown) does, but closes nothing: the
    /// requests of dropped guards, of cancelled or failed acquires and of
    /// slow nodes after a decision have been answered or have passed their
    /// deadline, and every release, withdraw or leave has reached its node
    /// (or its keys have expired by themselves). Live guards, keep-alives
    /// and leaderships go on. For a test that checks the servers between
    /// two steps.
    pub async fn settled(&self) {
        self.inner.driver.settled().await;
    }

    /// The settings, shared.
    pub(crate) fn settings_shared(&self) -> &Arc<Settings> {
        &self.inner.settings
    }

    pub(crate) fn driver(&self) -> &Driver {
        &self.inner.driver
    }

    pub(crate) fn guards(&self) -> &crate::handles::guard::Guards {
        &self.inner.guards
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
        self.inner.driver.notice_links()
    }

    pub(crate) fn node_handles(&self) -> &Arc<[Arc<Node>]> {
        &self.inner.nodes
    }

    pub(crate) fn node_metrics(&self) -> &metrics::Nodes {
        &self.inner.metrics
    }

    /// A lock on `resource`: await it for a [`LockGuard`], or
    /// [`run`](LockRequest::run) work under it. Modifiers choose the TTL,
    /// how long to wait, a fencing token, the kind (fair, read, write,
    /// reentrant) and keep-alive; see [`LockRequest`].
    ///
    /// By default it waits as the client's [`Builder::wait`] says
    /// ([`Wait::Retries`]`(10)`: about 0.5 to 2 s), taking the lock
    /// about one round trip after the holder releases it, and then fails
    /// with an error that says who holds it ([`Error::is_held_by_other`]).
    /// A distributed lock can be held by a client that hangs or crashed,
    /// and a wait without end hides it: ask for [`Wait::Forever`] where
    /// that is what you mean.
    ///
    /// ```no_run
    /// # async fn demo(redlock: redlock_tokio::Redlock) -> Result<(), redlock_tokio::Error> {
    /// let guard = redlock.lock("invoice-42").await?;
    /// // ... work while guard.validity() is left ...
    /// guard.release().await;
    /// # Ok(()) }
    /// ```
    ///
    /// [`Wait::Retries`]: crate::Wait::Retries
    /// [`Wait::Forever`]: crate::Wait::Forever
    pub fn lock(&self, resource: impl AsRef<[u8]>) -> LockRequest {
        LockRequest::new(self.clone(), resource.as_ref().into())
    }

    /// One lock over all of `resources`, taken atomically on each node, or
    /// none of them. It excludes any other lock on any of the resources,
    /// single ones included; resources named twice are locked once. The
    /// same modifiers as [`lock`](Self::lock) but the kind.
    pub fn lock_all<R: AsRef<[u8]>>(
        &self,
        resources: impl IntoIterator<Item = R>,
    ) -> LockRequest<crate::kind::Chosen> {
        let names = resources
            .into_iter()
            .map(|name| name.as_ref().into())
            .collect();
        LockRequest::all(self.clone(), names)
    }

    /// The client's default wait ([`Builder::wait`]).
    pub(crate) fn default_wait(&self) -> Wait {
        self.inner.wait
    }

    /// Releases `value` on `resource` on every node: for a lock taken
    /// elsewhere (another process, a [`LockGuard::forget`]ed guard) whose
    /// value is known. Only that value is deleted; a key held by another
    /// value is left alone. It waits for every node's answer (or its
    /// per-node timeout), for the complete per-node story an operator
    /// wants ([`Releasing::every_node`](crate::Releasing::every_node)).
    pub async fn release_value(
        &self,
        resource: impl AsRef<[u8]>,
        value: &LockValue,
    ) -> ReleaseReport {
        let settings = self.settings();
        let key = settings.key(resource.as_ref());
        let span = info_span!("redlock.release", resource = %key);
        let release = Operation::release_value(settings, key, value.clone(), crate::sim::now());
        async {
            let (report, _) = run::<kind::Release>(release, self).await;
            self.log_release(&report);
            report
        }
        .instrument(span)
        .await
    }

    /// Acquires `spec` with the request's options: the one path of every
    /// acquire.
    pub(crate) async fn acquire(
        &self,
        spec: LockSpec<'_>,
        resource: Arc<[u8]>,
        ttl: Option<Duration>,
        attempts: Attempts,
    ) -> Result<LockGuard, Error> {
        let settings = &self.inner.settings;
        let now = crate::sim::now();
        // Reported once, whatever happens below: a `?` before the first
        // attempt is a `config` outcome, a drop after it a `cancelled` one.
        let mut report = metrics::Acquire::start(metrics::Kind::of_spec(&spec), now);
        // The core refuses (in `with_spec`) keys in different hash slots on
        // a cluster node.
        let ttl = match ttl {
            Some(ttl) => settings.ttl(ttl)?,
            None => settings.default_ttl(),
        };
        let rng = crate::sim::rng(self.inner.simulation.as_ref());
        // Boxed: it moves to the driver and back. The core plans it behind
        // this client's waiters on its channels.
        let acquisition = Operation::acquire(Arc::clone(settings), spec, ttl, attempts, now, rng)?;
        report.sent();
        let span = info_span!(
            "redlock.acquire",
            resource = %acquisition.key().expect("an acquisition has a key"),
            kind = acquisition.lock_kind().map_or("", |kind| kind.name()),
            ttl_ms = ttl.as_millis(),
            retry = !matches!(attempts, Attempts::Once),
            wait_limit_ms = match attempts {
                Attempts::Within(limit) => Some(u64::try_from(limit.as_millis()).unwrap_or(u64::MAX)),
                _ => None,
            },
            fenced = matches!(spec, LockSpec::Fenced(_)),
        );
        async {
            let (event, acquisition) = drive::<kind::Acquire>(acquisition, self).await?;
            let attempts = acquisition.attempts().unwrap_or(0);
            match event {
                AcquireEvent::Acquired(lock) => {
                    report.finish(metrics::Outcome::Granted, attempts);
                    debug!(
                        attempts,
                        validity_ms = lock.validity(crate::sim::now()).as_millis() as u64,
                        votes = %lock.votes(),
                        "lock acquired"
                    );
                    Ok(LockGuard::new(self.clone(), resource, lock))
                }
                AcquireEvent::Failed(error) => {
                    report.finish(metrics::Outcome::of(&error), attempts);
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
}
