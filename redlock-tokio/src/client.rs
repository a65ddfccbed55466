//! The cheap-to-clone client handle and its builder.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use rand::SeedableRng;
use rand::rngs::StdRng;
use redlock_core::{
    AcquireEvent, Acquisition, AttemptId, Attempts, Command, Config, ConfigError, Key, LockKind,
    LockSpec, LockValue, NodeErrorKind, Release, ReleaseReport, RetryConfig, Settings,
};
use tracing::{Instrument, debug, info, info_span};

use crate::driver::{Timer, complete_in_background, drive, send, spawn_releases};
use crate::guard::{KeepAlive, LockContext, LockGuard};
use crate::node::Node;
use crate::notices::{Notices, Waiter};
use crate::server::{Server, redact};
use crate::{Error, LossReason};
use tokio_util::task::TaskTracker;

/// The default for [`Builder::connect_timeout`].
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

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
    /// Whether a refused release notice was logged (once per client).
    notice_refusal_logged: std::sync::atomic::AtomicBool,
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
        Builder::new(
            urls.into_iter()
                .map(|url| Source::Url(url.as_ref().to_owned()))
                .collect(),
        )
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

    /// Waits until every release this client sends in the background has
    /// been answered or has timed out: those of dropped guards, and of
    /// cancelled or failed acquires. Each takes at most one per-node timeout
    /// once sent.
    ///
    /// Call it before `main` returns. A Tokio runtime that shuts down drops
    /// its tasks, and with them any release not yet sent: a guard dropped
    /// on the way out of `main` (an early `?`, say) would otherwise leave
    /// its lock held until the TTL. The client stays usable afterwards.
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
    /// redlock.shutdown().await; // that release is sent before the runtime goes
    /// result
    /// # }
    /// ```
    pub async fn shutdown(&self) {
        let background = &self.inner.background;
        background.close();
        background.wait().await;
        background.reopen();
    }

    pub(crate) fn background(&self) -> &TaskTracker {
        &self.inner.background
    }

    /// Logs a release's outcome; a refused release notice once per client,
    /// at WARN: the lock is released, but waiters fall back on their timer.
    pub(crate) fn log_release(&self, report: &ReleaseReport) {
        debug!(report = %report, "released");
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
    /// now: 0 until an acquire first had to wait, or with
    /// [`Builder::release_notices`] off; at most one per node.
    pub fn release_notice_connections(&self) -> usize {
        self.inner
            .notices
            .as_ref()
            .map_or(0, |notices| notices.connected())
    }

    pub(crate) fn node_handles(&self) -> &Arc<[Arc<Node>]> {
        &self.inner.nodes
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
    /// fencing token, one attempt or retries.
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
        let mut release = Release::new(settings, key, value.clone(), AttemptId(0), Instant::now());
        async {
            let report = drive(&mut release, &self.inner.nodes, &self.inner.background).await;
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
    /// for fencing on another kind is a [`ConfigError::FencingUnsupported`].
    pub async fn lock_spec(
        &self,
        spec: LockSpec<'_>,
        options: LockOptions,
    ) -> Result<LockGuard, Error> {
        let settings = &self.inner.settings;
        let spec = match (spec, options.fencing) {
            (LockSpec::Exclusive(resource), Some(true)) => LockSpec::Fenced(resource),
            (LockSpec::Exclusive(resource), None) if settings.fencing() => {
                LockSpec::Fenced(resource)
            }
            (LockSpec::Fenced(resource), Some(false)) => LockSpec::Exclusive(resource),
            (LockSpec::Exclusive(_) | LockSpec::Fenced(_), _) | (_, None | Some(false)) => spec,
            (_, Some(true)) => return Err(ConfigError::FencingUnsupported.into()),
        };
        let attempts = options.attempts;
        let ttl = match options.ttl {
            Some(ttl) => settings.ttl(ttl)?,
            None => settings.default_ttl(),
        };
        let rng = StdRng::from_rng(&mut rand::rng());
        let acquisition = Acquisition::with_spec(
            Arc::clone(settings),
            spec,
            ttl,
            attempts,
            Instant::now(),
            rng,
        )?;
        let resource: Arc<[u8]> = match spec {
            LockSpec::Exclusive(resource)
            | LockSpec::Fenced(resource)
            | LockSpec::Read(resource)
            | LockSpec::Write(resource)
            | LockSpec::Reentrant { resource, .. } => resource.into(),
            LockSpec::Multi(resources) => resources.first().copied().unwrap_or_default().into(),
            _ => acquisition.key().as_bytes().into(),
        };
        let span = info_span!(
            "redlock.acquire",
            resource = %acquisition.key(),
            kind = acquisition.kind().name(),
            ttl_ms = ttl.as_millis(),
            retry = matches!(attempts, Attempts::Retry),
            fenced = matches!(spec, LockSpec::Fenced(_)),
        );
        let mut run = AcquireRun {
            nodes: Arc::clone(&self.inner.nodes),
            background: self.inner.background.clone(),
            acquisition,
            finished: false,
            notices: self.inner.notices.clone(),
            settings: Arc::clone(settings),
            waiter: None,
            lock_keys: None,
            attempt_started: Instant::now(),
        };
        let lock = run.run().instrument(span).await?;
        Ok(LockGuard::new(self.clone(), resource, lock))
    }

    async fn acquire(&self, resource: &[u8], options: LockOptions) -> Result<LockGuard, Error> {
        self.lock_spec(LockSpec::Exclusive(resource), options).await
    }
}

/// Options of one acquire, for [`Redlock::lock_with`].
#[derive(Clone, Copy, Debug)]
pub struct LockOptions {
    ttl: Option<Duration>,
    fencing: Option<bool>,
    attempts: Attempts,
}

impl Default for LockOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl LockOptions {
    /// The client's defaults: its TTL, its fencing choice, retries.
    pub fn new() -> Self {
        Self {
            ttl: None,
            fencing: None,
            attempts: Attempts::Retry,
        }
    }

    /// A TTL for this lock (validated like the client's).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Whether this lock comes with a fencing token
    /// ([`LockGuard::fencing_token`]); by default the client's
    /// [`Builder::fencing`] choice. A fenced acquire costs one more round
    /// trip per node and keeps a counter key per resource on every node.
    pub fn fencing(mut self, fencing: bool) -> Self {
        self.fencing = Some(fencing);
        self
    }

    /// One attempt, no retry, as [`Redlock::try_lock`].
    pub fn once(mut self) -> Self {
        self.attempts = Attempts::Once;
        self
    }
}

/// An acquisition being driven. Dropping it before the final event abandons
/// the attempt in flight and sends its releases in the background.
struct AcquireRun {
    nodes: Arc<[Arc<Node>]>,
    /// Where its background releases are tracked.
    background: TaskTracker,
    acquisition: Acquisition<StdRng>,
    finished: bool,
    /// The client's release notices, if on.
    notices: Option<Arc<Notices>>,
    /// For the names of the release channels.
    settings: Arc<Settings>,
    /// Registered for release notices once an attempt failed.
    waiter: Option<Waiter>,
    /// The locked keys (every one for a multi-resource lock), as the first
    /// acquire request carried them.
    lock_keys: Option<(Arc<[Key]>, bool)>,
    /// When the latest attempt's requests were sent: a notice that came
    /// before it was seen by that attempt.
    attempt_started: Instant,
}

impl AcquireRun {
    async fn run(&mut self) -> Result<redlock_core::Lock, Error> {
        let mut in_flight = FuturesUnordered::new();
        let mut timer = Timer::new();
        loop {
            let mut releases = Vec::new();
            while let Some(request) = self.acquisition.poll_request() {
                if matches!(request.command, Command::Withdraw | Command::Release) {
                    releases.push(request);
                } else {
                    if self.notices.is_some()
                        && matches!(
                            request.command,
                            Command::Acquire { .. } | Command::AcquireFenced { .. }
                        )
                    {
                        self.attempt_started = Instant::now();
                        if self.lock_keys.is_none() {
                            let multi = request.kind == LockKind::Multi;
                            self.lock_keys = Some((Arc::clone(&request.keys), multi));
                        }
                    }
                    in_flight.push(send(&self.nodes, request));
                }
            }
            spawn_releases(&self.nodes, releases, &self.background);
            while let Some(event) = self.acquisition.poll_event() {
                match event {
                    AcquireEvent::Acquired(lock) => {
                        self.finished = true;
                        // The lock is ours: let the slow nodes be locked too,
                        // without making the caller wait for them.
                        complete_in_background(std::mem::take(&mut in_flight));
                        debug!(
                            attempts = self.acquisition.attempts(),
                            validity_ms = lock.validity(Instant::now()).as_millis() as u64,
                            votes = %lock.votes(),
                            "lock acquired"
                        );
                        return Ok(lock);
                    }
                    AcquireEvent::AttemptFailed { error, retry_at } => {
                        debug!(
                            error = %error,
                            retry_in_ms = retry_at.saturating_duration_since(Instant::now()).as_millis() as u64,
                            "attempt failed; retrying"
                        );
                        // Only a release can help a lock held by someone
                        // else; nodes that failed do not publish.
                        if error.is_held_by_other() {
                            self.listen_for_releases();
                        }
                    }
                    AcquireEvent::Failed(error) => {
                        self.finished = true;
                        debug!(error = %error, "lock not acquired");
                        return Err(error.into());
                    }
                }
            }
            let Some(at) = self.acquisition.poll_timeout() else {
                // Without a final event the acquisition is attempting or
                // waiting, and both have a timeout.
                panic!("an unfinished acquisition has no timeout");
            };
            // Between attempts (no attempt in flight), a release notice
            // starts the next attempt early. One that comes during an
            // attempt stays in the waiter until then.
            let between_attempts =
                self.waiter.is_some() && self.acquisition.current_attempt().is_none();
            let sleep = timer.until(at);
            tokio::select! {
                Some(reply) = in_flight.next(), if !in_flight.is_empty() => {
                    if let Some(reply) = reply {
                        self.acquisition.handle_reply(reply, Instant::now());
                    }
                }
                () = sleep => {
                    timer.fired();
                    self.acquisition.handle_timeout(Instant::now());
                }
                changed = next_notice(&mut self.waiter), if between_attempts => {
                    match &self.waiter {
                        // Released after the last attempt started: that
                        // attempt may have checked a node just before.
                        Some(waiter) if changed && waiter.released_since(self.attempt_started) => {
                            debug!("release notice; trying again now");
                            self.acquisition.handle_release_notice(Instant::now());
                        }
                        Some(_) if changed => {}
                        // Cannot happen (the waiter keeps its sender), but
                        // never spin on it: fall back to the timer.
                        _ => self.waiter = None,
                    }
                }
            }
        }
    }

    /// Registers for release notices on the lock's channels, once, after
    /// the first attempt that found the lock held: an acquire that gets its
    /// lock at once never touches pub/sub.
    fn listen_for_releases(&mut self) {
        let (Some(notices), None, Some((keys, multi))) =
            (&self.notices, &self.waiter, &self.lock_keys)
        else {
            return;
        };
        let settings = &self.settings;
        // A multi-resource release announces every key it frees; the other
        // kinds announce their first key (the resource's own).
        let count = if *multi { keys.len() } else { 1 };
        let channels = keys[..count]
            .iter()
            .map(|key| settings.release_channel(key))
            .collect();
        self.waiter = Some(notices.wait_for(channels));
    }
}

/// The next event of `waiter`'s channels; never completes without a waiter.
async fn next_notice(waiter: &mut Option<Waiter>) -> bool {
    match waiter {
        Some(waiter) => waiter.changed().await,
        None => std::future::pending().await,
    }
}

impl Drop for AcquireRun {
    fn drop(&mut self) {
        if !self.finished {
            debug!(key = %self.acquisition.key(), "acquire cancelled; releasing the attempt in flight");
            self.acquisition.abandon(Instant::now());
        }
        // After the decision (or the abandon) only releases are queued.
        let releases: Vec<_> = std::iter::from_fn(|| self.acquisition.poll_request()).collect();
        spawn_releases(&self.nodes, releases, &self.background);
    }
}

enum Source {
    Url(String),
    Client(Box<redis::Client>),
}

/// Options for a [`Redlock`] client, made by [`Redlock::builder`] or
/// [`Builder::from_clients`].
///
/// Every option of the core's [`Config`] has a setter; the defaults are the
/// core's. [`build`](Self::build) validates them all at once.
pub struct Builder {
    sources: Vec<Source>,
    config: Config,
    connect_timeout: Duration,
    release_notices: bool,
    #[cfg(feature = "tls")]
    tls: crate::tls::TlsFiles,
}

impl fmt::Debug for Builder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let servers: Vec<String> = self
            .sources
            .iter()
            .map(|source| match source {
                Source::Url(url) => redact(url),
                Source::Client(client) => {
                    crate::server::canonical_name(client.get_connection_info())
                }
            })
            .collect();
        f.debug_struct("Builder")
            .field("servers", &servers)
            .field("config", &self.config)
            .field("connect_timeout", &self.connect_timeout)
            .field("release_notices", &self.release_notices)
            .finish_non_exhaustive()
    }
}

impl Builder {
    fn new(sources: Vec<Source>) -> Self {
        Self {
            sources,
            config: Config::default(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            release_notices: true,
            #[cfg(feature = "tls")]
            tls: crate::tls::TlsFiles::default(),
        }
    }

    /// A builder for clients made elsewhere (custom TLS certificates, RESP3,
    /// ...). Each must point at its own independent master.
    pub fn from_clients(clients: impl IntoIterator<Item = redis::Client>) -> Self {
        Self::new(
            clients
                .into_iter()
                .map(|client| Source::Client(Box::new(client)))
                .collect(),
        )
    }

    /// How long a lock lives on each node unless released or extended.
    /// Default 10 s.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.config.ttl = ttl;
        self
    }

    /// Share of the TTL set aside for clock drift, in `[0, 1)`. Default 0.01.
    pub fn drift_factor(mut self, factor: f64) -> Self {
        self.config.drift_factor = factor;
        self
    }

    /// How long one node may take to answer. Default: 1% of the TTL, between
    /// 10 and 50 ms.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.config.node_timeout = Some(timeout);
        self
    }

    /// Attempts after the first one in [`Redlock::lock`]. Default 10.
    pub fn retry_count(mut self, count: u32) -> Self {
        self.config.retry.count = count;
        self
    }

    /// The fixed part of the wait between attempts. Default 50 ms.
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.config.retry.delay = delay;
        self
    }

    /// The random part of the wait between attempts. Default 150 ms.
    pub fn retry_jitter(mut self, jitter: Duration) -> Self {
        self.config.retry.jitter = jitter;
        self
    }

    /// The whole retry schedule at once.
    pub fn retry(mut self, retry: RetryConfig) -> Self {
        self.config.retry = retry;
        self
    }

    /// An upper bound on a whole [`Redlock::lock`], retries included.
    /// Default: none, only the retry count bounds it.
    pub fn acquire_deadline(mut self, deadline: Duration) -> Self {
        self.config.acquire_deadline = Some(deadline);
        self
    }

    /// Random bytes per lock value (16..=256). Default 20.
    pub fn value_len(mut self, len: usize) -> Self {
        self.config.value_len = len;
        self
    }

    /// Prepended to every resource name to form its key, for example
    /// `"lock:"`. Default empty.
    pub fn key_prefix(mut self, prefix: impl Into<Vec<u8>>) -> Self {
        self.config.key_prefix = prefix.into();
        self
    }

    /// Whether locks come with fencing tokens unless
    /// [`LockOptions::fencing`] says otherwise. Default false.
    pub fn fencing(mut self, fencing: bool) -> Self {
        self.config.fencing = fencing;
        self
    }

    /// How long connecting to one node (TCP, TLS, authentication, loading
    /// the scripts) may take, at build and on every reconnection.
    /// Default [`DEFAULT_CONNECT_TIMEOUT`] (1 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Whether a waiting [`Redlock::lock`] listens for release notices
    /// (pub/sub), so that it tries again the moment the lock is released
    /// instead of at the end of its retry delay. Default true.
    ///
    /// Costs nothing until an acquire has to wait: then one pub/sub
    /// connection per node is opened (and kept, shared by every waiting
    /// acquire of the client and its clones), with one subscription per
    /// resource waited on. A node whose pub/sub connection fails only sends
    /// no notices; acquires never wait for it. See the crate docs,
    /// "Waiting for a lock".
    ///
    /// Off, this client's releases publish no notices either: for an ACL
    /// user without channel rights (Redis 7 grants none by default). With
    /// notices on, a server that refuses the `PUBLISH` still releases the
    /// lock; the client logs that once, at WARN.
    pub fn release_notices(mut self, on: bool) -> Self {
        self.release_notices = on;
        self.config.release_notices = on;
        self
    }

    /// Accept an even number of servers (2, 4, ...). Default false: the
    /// build fails with [`ConfigError::EvenServers`], since an even count is
    /// more often a master left out or listed twice than a choice, and N = 4
    /// tolerates no more failed masters than N = 3 (the quorum is 3).
    pub fn allow_even_nodes(mut self, allow: bool) -> Self {
        self.config.allow_even_nodes = allow;
        self
    }

    /// Trust only the CA certificate(s) in this PEM file for `rediss://`
    /// servers, instead of the built-in public (webpki) roots: for servers
    /// whose certificates come from a private CA. Default: the webpki roots.
    ///
    /// Applies to every server given as a URL, which must then all be
    /// `rediss://`. The file is read at [`build`](Self::build); an unreadable
    /// file or one without a certificate is an [`Error::Config`]
    /// ([`ConfigError::InvalidTls`]). A server whose certificate the CA did
    /// not sign (or not for the host name in its URL) fails the build with
    /// [`Error::Tls`]. For other TLS needs, build the `redis::Client`s
    /// yourself and use [`from_clients`](Self::from_clients).
    #[cfg(feature = "tls")]
    pub fn tls_ca_file(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.tls.ca = Some(path.into());
        self
    }

    /// Present this client certificate (PEM, optionally followed by its
    /// chain) with its private key (PEM: PKCS#8, PKCS#1 or SEC1) to
    /// `rediss://` servers that require one (mutual TLS, `tls-auth-clients
    /// yes`). Default: none.
    ///
    /// Applies to every server given as a URL, as
    /// [`tls_ca_file`](Self::tls_ca_file) does. Both files are read at
    /// [`build`](Self::build); an unreadable file, one without a certificate
    /// or key, or a key that is not the certificate's is an
    /// [`Error::Config`] ([`ConfigError::InvalidTls`]). A server that rejects
    /// the certificate (or wants one when none is set) fails the build with
    /// [`Error::Tls`].
    #[cfg(feature = "tls")]
    pub fn tls_client_cert(
        mut self,
        cert_path: impl Into<std::path::PathBuf>,
        key_path: impl Into<std::path::PathBuf>,
    ) -> Self {
        self.tls.client = Some((cert_path.into(), key_path.into()));
        self
    }

    /// Validates the options and connects to every node in parallel.
    ///
    /// Fails with:
    /// - [`Error::Config`] for an option that cannot work, an unparsable URL
    ///   (reported with its password redacted), two URLs for the same
    ///   server and database ([`ConfigError::DuplicateServer`]) or an even
    ///   number of servers without [`allow_even_nodes`](Self::allow_even_nodes)
    ///   ([`ConfigError::EvenServers`]); nothing is connected then;
    /// - [`Error::Config`] with [`ConfigError::SameServer`], naming both
    ///   addresses, when two of them reach one Redis server (for example
    ///   `redis://localhost:6379` and `redis://127.0.0.1:6379`): each node's
    ///   `run_id` (`INFO server`) is compared once connected. Nodes down at
    ///   build are not checked;
    /// - [`Error::Auth`] when a server rejects the credentials: that is a
    ///   configuration error, and waiting will not fix it;
    /// - [`Error::Tls`] when the TLS handshake with a server is refused
    ///   (its certificate is not trusted, or it wants a client certificate):
    ///   a configuration error too.
    ///
    /// A node that cannot be reached (refused, timed out, not a Redis
    /// server) does **not** fail the build: Redlock works while a majority
    /// is up. It is reconnected in the background with backoff, and counts
    /// as a failed node until then. The build waits at most the
    /// [connect timeout](Self::connect_timeout).
    pub async fn build(self) -> Result<Redlock, Error> {
        #[cfg(feature = "tls")]
        let certificates = self.tls.load()?;
        let mut servers = Vec::with_capacity(self.sources.len());
        for source in self.sources {
            servers.push(match source {
                Source::Url(url) => {
                    let server = Server::from_url(&url)?;
                    #[cfg(feature = "tls")]
                    let server = match &certificates {
                        Some(certificates) => crate::tls::apply(server, certificates)?,
                        None => server,
                    };
                    server
                }
                Source::Client(client) => {
                    #[cfg(feature = "tls")]
                    if certificates.is_some() {
                        return Err(ConfigError::InvalidTls {
                            reason: "a CA or client certificate is set, but it cannot apply to \
                                     clients made elsewhere: give them to redis::Client::build_with_tls"
                                .to_owned(),
                        }
                        .into());
                    }
                    Server::from_client(*client)
                }
            });
        }
        let config = Config {
            servers: servers.iter().map(|s| s.name.clone()).collect(),
            ..self.config
        };
        let settings = Arc::new(config.validate()?);
        if servers.iter().any(Server::is_tls) {
            install_crypto_provider();
        }
        let notices = self.release_notices.then(|| {
            Arc::new(Notices::new(
                servers
                    .iter()
                    .map(|server| (server.name.clone(), server.client.clone())),
                self.connect_timeout,
            ))
        });
        let shown: Vec<String> = servers.iter().map(|s| s.shown.clone()).collect();
        let nodes: Arc<[Arc<Node>]> = servers
            .into_iter()
            .map(|server| Arc::new(Node::new(server.name, server.client, self.connect_timeout)))
            .collect();
        let results = futures::future::join_all(nodes.iter().map(|node| node.connect())).await;
        // Two addresses of one server (`localhost` and `127.0.0.1`, a DNS
        // alias) would count it twice towards the quorum: a server is known
        // by its run_id. Servers unreachable now are not checked.
        let mut run_ids: HashMap<&str, usize> = HashMap::new();
        for (i, result) in results.iter().enumerate() {
            let Ok((_, Some(run_id))) = result else {
                continue;
            };
            if let Some(&first) = run_ids.get(run_id.as_str()) {
                // Dropping the nodes closes their connections.
                return Err(ConfigError::SameServer {
                    first: shown[first].clone(),
                    second: shown[i].clone(),
                }
                .into());
            }
            run_ids.insert(run_id, i);
        }
        let mut auth_failure = None;
        for (node, result) in nodes.iter().zip(results) {
            let result = result.map(|(connection, _)| connection);
            match &result {
                Ok(_) => debug!(node = node.name(), "connected"),
                Err(error) if error.kind == NodeErrorKind::Auth => {
                    auth_failure.get_or_insert_with(|| Error::Auth {
                        server: node.name().to_owned(),
                        error: error.clone(),
                    });
                }
                // A refused TLS handshake is a configuration error too.
                Err(error) if error.kind == NodeErrorKind::Tls => {
                    auth_failure.get_or_insert_with(|| Error::Tls {
                        server: node.name().to_owned(),
                        error: error.clone(),
                    });
                }
                // A master down: what an operator acts on.
                Err(error) => info!(
                    node = node.name(),
                    error = %error,
                    "node unreachable at build; reconnecting in the background"
                ),
            }
            if auth_failure.is_none() {
                node.set_initial(result);
            }
        }
        if let Some(error) = auth_failure {
            // Dropping the nodes ends any reconnection task already started.
            return Err(error);
        }
        let client = Redlock {
            inner: Arc::new(Inner {
                settings,
                nodes,
                notices,
                background: TaskTracker::new(),
                notice_refusal_logged: Default::default(),
            }),
        };
        debug!(
            nodes = client.nodes().len(),
            connected = client.connected_nodes(),
            quorum = client.settings().quorum(),
            "redlock client ready"
        );
        Ok(client)
    }
}

#[cfg(feature = "tls")]
fn install_crypto_provider() {
    // redis builds its rustls configuration from the process-wide default
    // provider. Install ring unless the application installed one already.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[cfg(not(feature = "tls"))]
fn install_crypto_provider() {}
