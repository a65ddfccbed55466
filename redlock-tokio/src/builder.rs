//! Building a client: options, validation, connecting to every node.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redlock_core::{Config, ConfigError, NodeErrorKind, WeakPersistence};
use tracing::{debug, warn};

use crate::node::Node;
use crate::node::server::{Server, redact};
use crate::sim::Simulation;
use crate::{Error, Redlock, Wait};

/// The default for [`Builder::connect_timeout`].
pub(crate) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Options for a [`Redlock`] client, made by [`Redlock::builder`]: the
/// client-wide defaults, each settable here once. What one lock may
/// override (its TTL, how long it waits) is a modifier of its
/// [`LockRequest`](crate::LockRequest). [`build`](Self::build) validates
/// every option at once.
pub struct Builder {
    urls: Vec<String>,
    wait: Wait,
    config: Config,
    connect_timeout: Duration,
    release_notices: bool,
    require_connected: usize,
    simulation: Option<Simulation>,
    #[cfg(feature = "tls")]
    tls: crate::node::tls::TlsFiles,
}

impl fmt::Debug for Builder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nodes: Vec<String> = self.urls.iter().map(|url| redact(url)).collect();
        f.debug_struct("Builder")
            .field("nodes", &nodes)
            .field("wait", &self.wait)
            .field("config", &self.config)
            .field("connect_timeout", &self.connect_timeout)
            .field("release_notices", &self.release_notices)
            .field("require_connected", &self.require_connected)
            .finish_non_exhaustive()
    }
}

/// Setters of [`Builder`]: each sets one field and returns the builder.
macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident($arg:ident: $ty:ty) => $($field:ident).+ = $value:expr;)*) => {
        $($(#[$doc])* pub fn $name(mut self, $arg: $ty) -> Self {
            self.$($field).+ = $value;
            self
        })*
    };
}

impl Builder {
    /// A builder for these URLs ([`Redlock::builder`]).
    pub(crate) fn from_urls<I, S>(urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self {
            urls: urls
                .into_iter()
                .map(|url| url.as_ref().to_owned())
                .collect(),
            wait: Wait::default(),
            config: Config::default(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            release_notices: true,
            require_connected: 0,
            simulation: None,
            #[cfg(feature = "tls")]
            tls: crate::node::tls::TlsFiles::default(),
        }
    }

    setters! {
        /// How long a lock lives on each node unless released or extended.
        /// Default 10 s.
        ttl(ttl: Duration) => config.ttl = ttl;
        /// Share of the TTL set aside for clock drift, in `[0, 1)`. Default 0.01.
        drift_factor(factor: f64) => config.drift_factor = factor;
        /// How long one node may take to answer. Default: 1% of the TTL, between
        /// 10 and 50 ms.
        node_timeout(timeout: Duration) => config.node_timeout = Some(timeout);
        /// How long an acquire waits for a lock held by someone else, unless
        /// its request says otherwise ([`LockRequest::wait`](crate::LockRequest::wait)).
        /// Default [`Wait::Retries`]`(10)`: the first attempt and 10 retries,
        /// about 0.5 to 2 s.
        wait(wait: Wait) => wait = wait;
        /// The fixed part of the wait between attempts. Default 50 ms.
        retry_delay(delay: Duration) => config.retry.delay = delay;
        /// The random part of the wait between attempts. Default 150 ms.
        retry_jitter(jitter: Duration) => config.retry.jitter = jitter;
        /// Random bytes per lock value (16..=256). Default 20.
        value_len(len: usize) => config.value_len = len;
        /// Prepended to every resource name to form its key, for example
        /// `"lock:"`. Default empty.
        key_prefix(prefix: impl Into<Vec<u8>>) => config.key_prefix = prefix.into();
        /// How long connecting to one node (TCP, TLS, authentication, loading
        /// the scripts) may take, at build and on every reconnection.
        /// Default 1 s.
        connect_timeout(timeout: Duration) => connect_timeout = timeout;
        /// Whether plain commands may replace scripts where a node's server has
        /// them (default true): an exclusive acquire as `SET key value NX PX
        /// ttl GET` (Redis >= 7.0, Valkey), a release as `DELIFEQ key value`
        /// (Valkey >= 9.0); the core picks them per node from what the server
        /// reported at connect. Off, every request is a script: for ACL users
        /// allowed `EVALSHA` but not `SET` or `DELIFEQ`.
        native_commands(on: bool) => config.native_commands = on;
        /// Whether a server's vote counts only once its append-only file
        /// has the write (default false): each batch of grants,
        /// extensions, tokens and proclamations a node is sent ends with
        /// `WAITAOF 1 0 <node timeout>`, and a vote whose write the AOF
        /// did not have in time fails ([`NodeErrorKind::NotOnDisk`](redlock_core::NodeErrorKind::NotOnDisk)):
        /// a crash of that server then cannot lose a lock the client counted.
        /// Needs Redis 7.2 or later, or Valkey, with `appendonly yes` and
        /// `appendfsync always`; any other server fails the build with
        /// [`ConfigError::NoWaitAof`] (under `everysec` Valkey 9.1.2
        /// confirmed writes it had not synced). Under load it costs much
        /// of the throughput: a `WAITAOF` holds its connection on the
        /// server until the sync, so batches no longer share one.
        /// Plain masters only: a Redis Cluster node is refused. See
        /// `docs/durability.md`.
        wait_for_aof(on: bool) => config.wait_for_aof = on;
    }

    /// Whether a waiting [`Redlock::lock`] listens for release notices
    /// (pub/sub), so that it tries again the moment the lock is released
    /// instead of at the end of its retry delay. Default true.
    ///
    /// Costs nothing until an acquire has to wait: then one pub/sub
    /// connection per node is opened (and kept, shared by every waiting
    /// acquire of the client and its clones), with one subscription per
    /// resource waited on. A node whose pub/sub connection fails only sends
    /// no notices; acquires never wait for it. See the guide,
    /// `docs/waiting.md`.
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

    /// Runs the client in a simulation: plain masters are reached through
    /// its connector instead of TCP, randomness comes from its seed. For
    /// the `tests` crate's client sim (feature `simulation`).
    #[cfg(feature = "simulation")]
    pub fn simulation(mut self, simulation: Simulation) -> Self {
        self.simulation = Some(simulation);
        self
    }

    setters! {
        /// How many servers must be reachable when the client is built;
        /// fewer fail the build with [`Error::Unreachable`], naming each
        /// server missing and why. Default 0: the client is built with
        /// whatever answers and connects to the others in the background,
        /// and each server missing is logged at WARN. A count above the
        /// number of servers means every one: `require_connected(usize::MAX)`
        /// for a service that must not start without the redundancy it was
        /// deployed with.
        require_connected(count: usize) => require_connected = count;
        /// Accept servers that may evict keys under memory pressure (a
        /// `maxmemory-policy` other than `noeviction`). Default false: the
        /// build fails with [`ConfigError::EvictingServer`] naming the server
        /// and its policy, since a lock key evicted is granted to another
        /// client while its holder still counts that server. A server
        /// reached only later (down at build) is logged at WARN at each
        /// connection if it may evict (the core's
        /// [`HealthChange::MayEvict`](redlock_core::HealthChange::MayEvict)).
        allow_eviction(allow: bool) => config.allow_eviction = allow;
        /// What a server that may lose locks when it restarts means (no
        /// AOF, or `appendfsync` other than `always`, read at every
        /// connection:
        /// [`Connected::weak_persistence`](redlock_core::Connected::weak_persistence)). Default
        /// [`WeakPersistence::Warn`]: one WARN per server, naming what it
        /// lacks and the fix. [`WeakPersistence::Refuse`] fails the build with
        /// [`ConfigError::WeakPersistence`]; [`WeakPersistence::Accept`] says
        /// nothing (tests, servers whose loss the TTL covers).
        weak_persistence(policy: WeakPersistence) => config.weak_persistence = policy;
        /// Accept an even number of servers (2, 4, ...). Default false: the
        /// build fails with [`ConfigError::EvenNodes`], since an even count is
        /// more often a master left out or listed twice than a choice, and N = 4
        /// tolerates no more failed masters than N = 3 (the quorum is 3).
        allow_even_nodes(allow: bool) => config.allow_even_nodes = allow;
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
    /// [`Error::Tls`].
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
    ///   server and database ([`ConfigError::DuplicateNode`]) or an even
    ///   number of servers without [`allow_even_nodes`](Self::allow_even_nodes)
    ///   ([`ConfigError::EvenNodes`]); nothing is connected then;
    /// - [`Error::Config`] with [`ConfigError::SameServer`], naming both
    ///   addresses, when two of them reach one Redis server (for example
    ///   `redis://localhost:6379` and `redis://127.0.0.1:6379`): each node's
    ///   `run_id` (`INFO server`) is compared once connected. Nodes down at
    ///   build are not checked;
    /// - [`Error::Auth`] when a server rejects the credentials: that is a
    ///   configuration error, and waiting will not fix it;
    /// - [`Error::Tls`] when the TLS handshake with a server is refused
    ///   (its certificate is not trusted, or it wants a client certificate):
    ///   a configuration error too;
    /// - [`Error::Config`] with [`ConfigError::InvalidNode`] for a node whose
    ///   host name does not exist (a typo such as `127.0.0.l`): such a node
    ///   could never count, and the client would be one failure from losing
    ///   its quorum. A lookup that fails for a while (the resolver
    ///   unreachable) counts as a node down instead.
    ///
    /// A node that cannot be reached (refused, timed out, not a Redis
    /// server) does **not** fail the build: Redlock works while a majority
    /// is up. It is reconnected in the background with backoff, and counts
    /// as a failed node until then. The build waits at most the
    /// [connect timeout](Self::connect_timeout).
    pub async fn build(self) -> Result<Redlock, Error> {
        #[cfg(feature = "tls")]
        let certificates = self.tls.load()?;
        let mut servers = Vec::with_capacity(self.urls.len());
        for url in &self.urls {
            let server = Server::from_url(url)?;
            #[cfg(feature = "tls")]
            let server = match &certificates {
                Some(certificates) => crate::node::tls::apply(server, certificates)?,
                None => server,
            };
            servers.push(server);
        }
        if self.simulation.is_none() {
            unknown_hosts(&servers, self.connect_timeout).await?;
        }
        let mut config = self.config;
        config.nodes = servers.iter().map(|s| s.name.clone()).collect();
        // Which nodes are clusters is the adapter's to know (it reaches
        // them); what that forbids (a lock's keys in two slots) is the core's.
        let clusters = servers
            .iter()
            .enumerate()
            .filter(|(_, server)| server.cluster.is_some());
        // Who this client is to the masters: its waiters' marks and its
        // releases carry it (the core's `Settings::with_client_tag`).
        let mut rng = crate::sim::rng(self.simulation.as_ref());
        let settings = Arc::new(
            config
                .validate()?
                .with_cluster_nodes(clusters.map(|(index, _)| redlock_core::NodeId(index)))
                .with_client_tag(redlock_core::LockValue::random(&mut rng, 8)),
        );
        crate::metrics::describe();
        let metrics = crate::metrics::Nodes::new(settings.nodes().iter().map(String::as_str));
        if servers.iter().any(Server::is_tls) {
            install_crypto_provider();
        }
        // Opened only when the core asks: never with release notices off.
        let notices = Arc::new(crate::driver::NoticeNodes::new(
            servers
                .iter()
                .map(|server| (server.name.clone(), server.client.clone())),
            self.connect_timeout,
            metrics.clone(),
            self.simulation.as_ref(),
        ));
        let shown: Vec<String> = servers.iter().map(|s| s.shown.clone()).collect();
        let mut nodes = Vec::with_capacity(servers.len());
        for (index, server) in servers.into_iter().enumerate() {
            let cluster = match server.cluster {
                Some(seeds) => Some(
                    crate::node::server::cluster_client(seeds, self.connect_timeout).map_err(
                        |err| ConfigError::InvalidNode {
                            node: server.shown.clone(),
                            reason: err.to_string(),
                        },
                    )?,
                ),
                None => None,
            };
            let mut node = Node::new(
                server.name,
                server.client,
                cluster,
                self.connect_timeout,
                settings.node_timeout(),
            );
            if let Some(simulation) = &self.simulation {
                node = node.simulated(index, simulation.clone());
            }
            nodes.push(Arc::new(node));
        }
        let nodes: Arc<[Arc<Node>]> = nodes.into();
        let results = futures::future::join_all(nodes.iter().map(|node| node.connect())).await;
        // Which of them the client takes is the core's to say.
        let found: Vec<(&str, Option<&redlock_core::Connected>)> = shown
            .iter()
            .zip(&results)
            .map(|(name, result)| (name.as_str(), result.as_ref().ok().map(|c| &c.found)))
            .collect();
        settings.check_servers(&found)?;
        let mut auth_failure = None;
        let mut unreachable = Vec::new();
        for (node, result) in nodes.iter().zip(results) {
            match &result {
                Ok(_) => debug!(node = node.name(), "connected"),
                Err(error) if error.kind == NodeErrorKind::Auth => {
                    auth_failure.get_or_insert_with(|| Error::Auth {
                        node: node.name().to_owned(),
                        error: error.clone(),
                    });
                }
                // A refused TLS handshake is a configuration error too.
                Err(error) if error.kind == NodeErrorKind::Tls => {
                    auth_failure.get_or_insert_with(|| Error::Tls {
                        node: node.name().to_owned(),
                        error: error.clone(),
                    });
                }
                // A master down: what an operator acts on, and the client
                // one failure closer to losing its quorum.
                Err(error) => {
                    unreachable.push((node.name().to_owned(), error.clone()));
                }
            }
            if auth_failure.is_none() {
                node.set_link(result);
            }
        }
        if let Some(error) = auth_failure {
            // Dropping the nodes ends any reconnection task already started.
            return Err(error);
        }
        let required = self.require_connected.min(nodes.len());
        let connected = nodes.len() - unreachable.len();
        if connected < required {
            return Err(Error::Unreachable {
                connected,
                required,
                unreachable,
            });
        }
        for (node, error) in &unreachable {
            warn!(
                node = %node,
                error = %error,
                connected,
                nodes = nodes.len(),
                quorum = settings.quorum(),
                "server unreachable at build: the client runs without it and connects in the \
                 background (Builder::require_connected refuses to start so)"
            );
        }
        let driver = crate::driver::Driver::new(
            Arc::clone(&settings),
            Arc::clone(&nodes),
            notices,
            self.simulation.clone(),
        );
        // The core hears now what each connection found (and says what a
        // server that may lose locks means), and connects to the nodes
        // down at once.
        driver.start_now();
        let client = Redlock::new(crate::handles::client::Inner {
            driver,
            settings,
            wait: self.wait,
            nodes,
            notice_refusal_logged: Default::default(),
            metrics,
            simulation: self.simulation,
            guards: Default::default(),
        });
        debug!(
            nodes = client.nodes().len(),
            connected = client.connected_nodes(),
            quorum = client.settings().quorum(),
            "redlock client ready"
        );
        Ok(client)
    }
}

/// Refuses a node whose host name does not exist: a typo (`127.0.0.l`)
/// is a configuration error, not a node down, which would leave the client
/// one failure from losing its quorum without a word. A lookup that fails
/// for a while (the resolver unreachable, `EAI_AGAIN`), or that takes
/// longer than the connect timeout, counts as a node down: it is retried
/// with the reconnections.
async fn unknown_hosts(servers: &[Server], patience: Duration) -> Result<(), ConfigError> {
    let lookups = servers.iter().filter_map(|server| {
        let (host, port) = server.host_to_resolve()?;
        Some(async move {
            let lookup = tokio::net::lookup_host((host.as_str(), port));
            match tokio::time::timeout(patience, lookup).await {
                Ok(Err(error)) if !error.to_string().contains("Temporary failure") => {
                    Err(ConfigError::InvalidNode {
                        node: server.shown.clone(),
                        reason: format!("host {host} does not resolve: {error}"),
                    })
                }
                _ => Ok(()),
            }
        })
    });
    futures::future::try_join_all(lookups).await.map(drop)
}

#[cfg(feature = "tls")]
fn install_crypto_provider() {
    // redis builds its rustls configuration from the process-wide default
    // provider. Install ring unless the application installed one already.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[cfg(not(feature = "tls"))]
fn install_crypto_provider() {}
