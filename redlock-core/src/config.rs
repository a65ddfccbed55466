//! Options, their defaults, and the one place they are validated.
//!
//! [`Config`] is a plain struct with public fields and a [`Default`]. Nothing in
//! it is trusted until [`Config::validate`] turns it into [`Settings`], which every
//! state machine of this crate takes. A bad value is therefore a [`ConfigError`]
//! at build time, never a panic or a surprising lock later.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::error::ConfigError;

mod keys;
mod servers;
pub(crate) use keys::{held_keys, release_channel, release_channels};
pub use servers::Connected;

use crate::Ttl;
use crate::limits::{MAX_TTL_MS, MAX_VALUE_LEN, MIN_VALIDITY, MIN_VALUE_LEN};

/// Everything that can be configured, before validation.
///
/// ```
/// use std::time::Duration;
/// use redlock_core::Config;
///
/// let settings = Config::new(["a:6379", "b:6379", "c:6379"])
///     .ttl(Duration::from_secs(5))
///     .validate()
///     .expect("a valid configuration");
/// assert_eq!(settings.quorum(), 2);
/// // The per-node timeout is derived from the TTL: 1% of it, between 10 and 50 ms.
/// assert_eq!(settings.node_timeout(), Duration::from_millis(50));
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Config {
    /// One name per node: an independent Redis master, used to tell nodes apart in errors
    /// and logs, and to reject duplicates. The adapter passes a canonical form
    /// (host, port, database) without credentials.
    ///
    /// Use an odd number: with an even N the quorum N/2+1 tolerates no more
    /// failures than N-1 nodes would, so the extra node is wasted. An even
    /// number is refused ([`ConfigError::EvenNodes`]) unless
    /// [`allow_even_nodes`](Self::allow_even_nodes) is set.
    pub nodes: Vec<String>,
    /// Accept an even number of nodes (2, 4, ...). Default false: an even
    /// count is more often a mistake (a node left out or listed twice) than
    /// a choice, and it buys no fault tolerance over one node fewer.
    pub allow_even_nodes: bool,
    /// How long a lock is held on each node unless released or extended
    /// (`PX` in milliseconds; sub-millisecond parts are dropped). Default 10 s.
    pub ttl: Duration,
    /// Share of the TTL allowed for clock drift between the client and the nodes,
    /// in `[0, 1)`. Default 0.01, as in the reference implementations. The
    /// validity of a lock is `ttl - elapsed - (ttl * drift_factor + 2 ms)`.
    pub drift_factor: f64,
    /// How long one node may take to answer before it counts as failed. `None`
    /// derives it from the TTL: 1% of it, clamped to `[10 ms, 50 ms]`, and never
    /// more than half the TTL. Must be non-zero and below the TTL.
    pub node_timeout: Option<Duration>,
    /// How a blocking acquire retries after a failed attempt.
    pub retry: RetryConfig,
    /// An upper bound on a whole blocking acquire, retries included. `None`: only
    /// the retry count bounds it. While retries are left, it is waited out: an
    /// acquire whose next retry would start past it makes a last attempt
    /// timed to end by it and listens for release notices until it. The
    /// bound is hard: no lock is handed out at or
    /// after it, also when a quorum's answers are only counted then (they came
    /// in with the timer, or the caller was late); such a lock is released.
    pub acquire_deadline: Option<Duration>,
    /// Random bytes in each lock value (sent hex-encoded). Default 20, as the
    /// spec suggests; at least 16.
    pub value_len: usize,
    /// Prepended to every resource name to form the Redis key, to keep locks in
    /// their own namespace (for example `b"lock:"`). Default empty.
    pub key_prefix: Vec<u8>,
    /// Whether a release publishes a release notice on `<key>\0released`, so
    /// that clients waiting for the lock try again at once. Default true.
    /// Off, releases publish nothing: for ACL users without channel rights
    /// (Redis 7 grants none by default), or when nobody waits with notices.
    /// A notice the server refuses never fails the release (see
    /// [`ReleaseReport::notices_refused`](crate::ReleaseReport::notices_refused)).
    pub release_notices: bool,
    /// Whether plain commands may replace scripts on servers that have them
    /// (`SET NX PX GET` acquires, `DELIFEQ` withdraws: see
    /// [`native`](crate::native)). Default true. Off, every request is a
    /// script: for ACL users allowed `EVALSHA` but not `SET` or `DELIFEQ`,
    /// or to compare the two.
    pub native_commands: bool,
    /// Whether a node's vote counts only once its append-only file has the
    /// write: every grant, extension, restore, token and proclamation is
    /// followed on its node by `WAITAOF` ([`waitaof`](crate::waitaof)), and
    /// a node whose AOF did not have it in time fails the vote
    /// ([`NodeErrorKind::NotOnDisk`](crate::NodeErrorKind::NotOnDisk)).
    /// Default false. Servers must have `WAITAOF`, AOF on and `appendfsync
    /// always` ([`Connected::no_waitaof`](crate::Connected::no_waitaof)), under which
    /// each answer already follows the sync: the check holds if a server's
    /// setting is changed while connected, at the cost of the sync no
    /// longer being shared between batches (see `docs/durability.md`).
    pub wait_for_aof: bool,
    /// Whether the client takes servers that may evict lock keys under
    /// memory pressure (a `maxmemory-policy` other than `noeviction`):
    /// refused at start ([`ConfigError::EvictingServer`]) and said at each
    /// connection otherwise ([`HealthChange::MayEvict`](crate::HealthChange::MayEvict)).
    /// Default false.
    pub allow_eviction: bool,
    /// What the client does with a server that may lose the locks it
    /// granted when it restarts ([`WeakPersistence`]). Default
    /// [`WeakPersistence::Warn`].
    pub weak_persistence: WeakPersistence,
}

/// What a client does with a server that may lose the locks it granted
/// when it restarts (no AOF, or `appendfsync` other than `always`:
/// [`Connected::weak_persistence`](crate::Connected::weak_persistence)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum WeakPersistence {
    /// Said once per server ([`HealthChange::MayLoseLocks`](crate::HealthChange::MayLoseLocks)),
    /// naming what it lacks.
    #[default]
    Warn,
    /// Refused at start ([`ConfigError::WeakPersistence`]); a server
    /// reached only later is said once, as with `Warn`.
    Refuse,
    /// Nothing is said.
    Accept,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            nodes: Vec::new(),
            allow_even_nodes: false,
            ttl: Duration::from_secs(10),
            drift_factor: 0.01,
            node_timeout: None,
            retry: RetryConfig::default(),
            acquire_deadline: None,
            value_len: 20,
            key_prefix: Vec::new(),
            release_notices: true,
            native_commands: true,
            wait_for_aof: false,
            allow_eviction: false,
            weak_persistence: WeakPersistence::Warn,
        }
    }
}

/// The retry schedule of a blocking acquire.
///
/// After a failed attempt the client waits `delay + uniform(0, jitter)` before
/// the next one, so that competing clients fall out of step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryConfig {
    /// Retries: attempts on the retry timer after the first one, so a call
    /// makes up to `1 + count` attempts (11 by default). An attempt that a
    /// release notice brings forward does not use up a retry (unless it ends
    /// after the retry it jumped ahead of), so a contended call may report
    /// more attempts than `1 + count` ([`AcquireError::attempts`](crate::AcquireError::attempts)).
    /// Default 10.
    pub count: u32,
    /// The fixed part of the wait between attempts. Default 50 ms.
    pub delay: Duration,
    /// The random part of the wait between attempts. Default 150 ms, so waits are
    /// spread over 50..200 ms as in the reference clients.
    pub jitter: Duration,
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self {
            count: 10,
            delay: Duration::from_millis(50),
            jitter: Duration::from_millis(150),
        }
    }
}

impl RetryConfig {
    /// Sets [`count`](Self::count).
    #[must_use]
    pub fn count(mut self, count: u32) -> Self {
        self.count = count;
        self
    }

    /// Sets [`delay`](Self::delay).
    #[must_use]
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Sets [`jitter`](Self::jitter).
    #[must_use]
    pub fn jitter(mut self, jitter: Duration) -> Self {
        self.jitter = jitter;
        self
    }
}

impl Config {
    /// A configuration for these nodes with every other option at its
    /// default; the methods below set one option each.
    pub fn new<I, S>(nodes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            nodes: nodes.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }

    /// Sets [`allow_even_nodes`](Self::allow_even_nodes).
    #[must_use]
    pub fn allow_even_nodes(mut self, allow: bool) -> Self {
        self.allow_even_nodes = allow;
        self
    }

    /// Sets [`ttl`](Self::ttl).
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Sets [`drift_factor`](Self::drift_factor).
    #[must_use]
    pub fn drift_factor(mut self, factor: f64) -> Self {
        self.drift_factor = factor;
        self
    }

    /// Sets [`node_timeout`](Self::node_timeout).
    #[must_use]
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = Some(timeout);
        self
    }

    /// Sets [`retry`](Self::retry).
    #[must_use]
    pub fn retry(mut self, retry: RetryConfig) -> Self {
        self.retry = retry;
        self
    }

    /// Sets [`acquire_deadline`](Self::acquire_deadline).
    #[must_use]
    pub fn acquire_deadline(mut self, deadline: Duration) -> Self {
        self.acquire_deadline = Some(deadline);
        self
    }

    /// Sets [`value_len`](Self::value_len).
    #[must_use]
    pub fn value_len(mut self, len: usize) -> Self {
        self.value_len = len;
        self
    }

    /// Sets [`key_prefix`](Self::key_prefix).
    #[must_use]
    pub fn key_prefix(mut self, prefix: impl Into<Vec<u8>>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// Sets [`release_notices`](Self::release_notices).
    #[must_use]
    pub fn release_notices(mut self, on: bool) -> Self {
        self.release_notices = on;
        self
    }

    /// Sets [`native_commands`](Self::native_commands).
    #[must_use]
    pub fn native_commands(mut self, on: bool) -> Self {
        self.native_commands = on;
        self
    }

    /// Sets [`wait_for_aof`](Self::wait_for_aof).
    #[must_use]
    pub fn wait_for_aof(mut self, on: bool) -> Self {
        self.wait_for_aof = on;
        self
    }

    /// Sets [`allow_eviction`](Self::allow_eviction).
    #[must_use]
    pub fn allow_eviction(mut self, allowed: bool) -> Self {
        self.allow_eviction = allowed;
        self
    }

    /// Sets [`weak_persistence`](Self::weak_persistence).
    #[must_use]
    pub fn weak_persistence(mut self, policy: WeakPersistence) -> Self {
        self.weak_persistence = policy;
        self
    }

    /// Checks every option once and returns the settings the state machines use.
    pub fn validate(self) -> Result<Settings, ConfigError> {
        if self.nodes.is_empty() {
            return Err(ConfigError::NoNodes);
        }
        let mut seen = BTreeSet::new();
        for node in &self.nodes {
            if !seen.insert(node.as_str()) {
                return Err(ConfigError::DuplicateNode { node: node.clone() });
            }
        }
        // After duplicates: a node listed twice is the likelier cause of
        // an even count, and the more useful message.
        if self.nodes.len().is_multiple_of(2) && !self.allow_even_nodes {
            return Err(ConfigError::EvenNodes {
                count: self.nodes.len(),
            });
        }
        if !(0.0..1.0).contains(&self.drift_factor) || self.drift_factor.is_nan() {
            return Err(ConfigError::DriftFactor {
                factor: self.drift_factor,
            });
        }
        if !(MIN_VALUE_LEN..=MAX_VALUE_LEN).contains(&self.value_len) {
            return Err(ConfigError::ValueLength {
                len: self.value_len,
            });
        }
        if let Some(deadline) = self.acquire_deadline
            && deadline.is_zero()
        {
            return Err(ConfigError::ZeroDeadline);
        }
        let mut settings = Settings {
            nodes: self.nodes.into(),
            ttl: Ttl(0),
            drift_factor: self.drift_factor,
            node_timeout: Duration::ZERO,
            explicit_node_timeout: self.node_timeout,
            retry: self.retry,
            acquire_deadline: self.acquire_deadline,
            value_len: self.value_len,
            key_prefix: self.key_prefix.into(),
            release_notices: self.release_notices,
            native_commands: self.native_commands,
            wait_for_aof: self.wait_for_aof,
            allow_eviction: self.allow_eviction,
            weak_persistence: self.weak_persistence,
            cluster_nodes: std::sync::Arc::from([]),
            client_tag: None,
        };
        settings.node_timeout = match self.node_timeout {
            Some(timeout) => timeout,
            None => derived_node_timeout(self.ttl),
        };
        settings.ttl = settings.ttl(self.ttl)?;
        Ok(settings)
    }
}

fn derived_node_timeout(ttl: Duration) -> Duration {
    (ttl / 100)
        .clamp(Duration::from_millis(10), Duration::from_millis(50))
        .min(ttl / 2)
}

/// A client's configuration once checked: its nodes and quorum, default
/// TTL, per-node timeout, drift allowance and retry schedule.
///
/// Made by [`Config::validate`] (the Tokio client's builder does it for
/// you); read it from the client (`Redlock::settings()`) to learn, for
/// example, the quorum or the per-node timeout it settled on. Cheap to share:
/// every lock of a client refers to the same one.
#[derive(Clone, Debug)]
pub struct Settings {
    nodes: std::sync::Arc<[String]>,
    ttl: Ttl,
    drift_factor: f64,
    node_timeout: Duration,
    explicit_node_timeout: Option<Duration>,
    retry: RetryConfig,
    acquire_deadline: Option<Duration>,
    value_len: usize,
    key_prefix: std::sync::Arc<[u8]>,
    release_notices: bool,
    native_commands: bool,
    wait_for_aof: bool,
    allow_eviction: bool,
    weak_persistence: WeakPersistence,
    /// The nodes that are each a Redis Cluster, in order (see
    /// [`with_cluster_nodes`](Self::with_cluster_nodes)).
    cluster_nodes: std::sync::Arc<[usize]>,
    /// This client, to the masters (see [`with_client_tag`](Self::with_client_tag)).
    client_tag: Option<crate::LockValue>,
}

impl Settings {
    /// These settings for nodes of which `nodes` are each a Redis Cluster
    /// (told by the adapter, which knows how it reaches each node). A
    /// cluster runs a script only on keys of one hash slot, so every
    /// acquisition on such settings refuses a lock whose keys are in
    /// different slots before anything is sent ([`ConfigError::CrossSlot`]):
    /// such a lock could at best be held on part of that node.
    #[must_use]
    pub fn with_cluster_nodes(mut self, nodes: impl IntoIterator<Item = crate::NodeId>) -> Self {
        let mut clusters: Vec<usize> = nodes
            .into_iter()
            .map(|node| node.0)
            .filter(|&node| node < self.nodes.len())
            .collect();
        clusters.sort_unstable();
        clusters.dedup();
        self.cluster_nodes = clusters.into();
        self
    }

    /// Whether `node` is a Redis Cluster ([`with_cluster_nodes`](Self::with_cluster_nodes)):
    /// its connection keeps no order between requests, so the
    /// [`Client`](crate::Client) sends it one request per lock key at a time.
    pub(crate) fn is_cluster(&self, node: crate::NodeId) -> bool {
        self.cluster_nodes.binary_search(&node.0).is_ok()
    }

    /// Refuses `keys` (one lock's keys) if they are in different hash slots
    /// and a node is a Redis Cluster ([`with_cluster_nodes`](Self::with_cluster_nodes)).
    pub(crate) fn check_slots(&self, keys: &[crate::Key]) -> Result<(), ConfigError> {
        let (Some(&node), Some(first)) = (self.cluster_nodes.first(), keys.first()) else {
            return Ok(());
        };
        match keys.iter().find(|key| key.slot() != first.slot()) {
            Some(other) => Err(ConfigError::CrossSlot {
                node: self.nodes[node].clone(),
                first: first.clone(),
                first_slot: first.slot(),
                second: other.clone(),
                second_slot: other.slot(),
            }),
            None => Ok(()),
        }
    }

    machinery_fn! {
        /// The command that releases a held lock of `kind`: [`Command::Release`](crate::Command::Release), which
        /// publishes a release notice, or with
        /// [`Config::release_notices`] off [`Command::Withdraw`](crate::Command::Withdraw), which does not.
        /// A fair lock's release is always a `Release`: a `Withdraw` keeps the
        /// waiter's place in the queues (a lost attempt does), and the holder's
        /// place at the head would hold every waiter back until it expired.
        fn release_command(&self, kind: &crate::LockKind) -> crate::Command {
            if self.release_notices || matches!(kind, crate::LockKind::Fair { .. }) {
                crate::Command::Release
            } else {
                crate::Command::Withdraw
            }
        }
    }

    /// The node names, in the order that [`NodeId`](crate::NodeId) indexes.
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }

    pub(crate) fn node_names(&self) -> std::sync::Arc<[String]> {
        self.nodes.clone()
    }

    /// Number of nodes, N.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Whether releases publish notices and waiting acquires listen for them
    /// ([`Config::release_notices`]).
    pub fn release_notices(&self) -> bool {
        self.release_notices
    }

    /// Whether plain commands may replace scripts
    /// ([`Config::native_commands`]).
    pub fn native_commands(&self) -> bool {
        self.native_commands
    }

    /// Whether votes count only once the node's AOF has the write
    /// ([`Config::wait_for_aof`]).
    pub fn wait_for_aof(&self) -> bool {
        self.wait_for_aof
    }

    /// Whether servers that may evict lock keys are taken
    /// ([`Config::allow_eviction`]).
    pub fn allow_eviction(&self) -> bool {
        self.allow_eviction
    }

    /// What is done with servers that may lose locks when they restart
    /// ([`Config::weak_persistence`]).
    pub fn weak_persistence(&self) -> WeakPersistence {
        self.weak_persistence
    }

    /// Votes needed to hold a lock: N/2 + 1.
    pub fn quorum(&self) -> usize {
        crate::quorum::quorum(self.nodes.len())
    }

    /// The TTL used when a call does not name one.
    pub fn default_ttl(&self) -> Ttl {
        self.ttl
    }

    /// The per-node timeout: how long one node may take before it counts as failed.
    pub fn node_timeout(&self) -> Duration {
        self.node_timeout
    }

    /// The drift factor (share of the TTL set aside for clock drift).
    pub fn drift_factor(&self) -> f64 {
        self.drift_factor
    }

    /// The drift allowance for a TTL: `ttl * drift_factor + 2 ms`.
    pub fn drift(&self, ttl: Ttl) -> Duration {
        crate::quorum::drift(ttl, self.drift_factor)
    }

    /// The retry schedule of blocking acquires.
    pub fn retry(&self) -> RetryConfig {
        self.retry
    }

    /// The overall bound on a blocking acquire, if any.
    pub fn acquire_deadline(&self) -> Option<Duration> {
        self.acquire_deadline
    }

    /// Random bytes per lock value.
    pub fn value_len(&self) -> usize {
        self.value_len
    }

    /// The prefix of every key.
    pub fn key_prefix(&self) -> &[u8] {
        &self.key_prefix
    }

    /// Validates a TTL for use with these settings.
    ///
    /// Rejected: zero, one so small that drift leaves no validity, one not longer
    /// than the per-node timeout, one that leaves less than [`MIN_VALIDITY`]
    /// after the drift and one per-node timeout, one beyond [`MAX_TTL_MS`]
    /// (30 days).
    pub fn ttl(&self, ttl: Duration) -> Result<Ttl, ConfigError> {
        let millis = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        if millis == 0 {
            return Err(ConfigError::ZeroTtl);
        }
        if millis > MAX_TTL_MS {
            return Err(ConfigError::TtlTooLarge { ttl });
        }
        let checked = Ttl(millis);
        let drift = self.drift(checked);
        if drift >= checked.as_duration() {
            return Err(ConfigError::TtlBelowDrift { ttl, drift });
        }
        // With a derived timeout, a per-call TTL shorter than the default one
        // gets its own derived timeout rather than an error.
        let timeout = self.node_timeout_for(checked);
        if timeout.is_zero() {
            return Err(ConfigError::ZeroNodeTimeout);
        }
        if timeout >= checked.as_duration() {
            return Err(ConfigError::NodeTimeoutNotBelowTtl {
                node_timeout: timeout,
                ttl,
            });
        }
        if checked.as_duration() < drift + timeout + MIN_VALIDITY {
            return Err(ConfigError::TtlTooShort {
                ttl,
                drift,
                node_timeout: timeout,
            });
        }
        Ok(checked)
    }

    machinery_fn! {
        /// The per-node timeout of every release: [`Operation::release`](crate::Operation::release),
        /// [`Operation::release_value`](crate::Operation::release_value) for a value known from elsewhere,
        /// and the clean-up after a failed or abandoned acquire attempt. It is the
        /// client's [`node_timeout`](Self::node_timeout), whatever the lock's TTL.
        ///
        /// Why one rule, and not `node_timeout_for` the
        /// lock's TTL: a release protects no validity, so there is nothing to
        /// gain from cutting it short, while a node cut short keeps the key until
        /// its TTL; and a value released by hand comes without its TTL, so a
        /// TTL-derived timeout could not be applied to it. Releasing the same lock
        /// through its guard or by its value then waits for a slow node alike.
        fn release_timeout(&self) -> Duration {
            self.node_timeout
        }
    }

    machinery_fn! {
        /// The per-node timeout for requests carrying this TTL.
        fn node_timeout_for(&self, ttl: Ttl) -> Duration {
            match self.explicit_node_timeout {
                Some(timeout) => timeout,
                None => self
                    .node_timeout
                    .min(derived_node_timeout(ttl.as_duration())),
            }
        }
    }
}
