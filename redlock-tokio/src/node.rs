//! One Redis master: its long-lived connection, its scripts, and the mapping
//! of redis replies and errors onto the core's `Response` and `NodeError`.
//!
//! Each node keeps one multiplexed connection that every request shares, so
//! requests to one node are written in the order they are sent: a release
//! sent after an acquire is executed after it. The connection is made (and
//! every script loaded) eagerly at build, and again in a background task
//! with backoff whenever it breaks. While a node has no connection, requests
//! to it fail at once with the last connection error, which the core counts
//! as that node's failure; nothing waits for a reconnect.
//!
//! A node may be a whole Redis Cluster: then its connection is the `redis`
//! crate's cluster client, which routes each command by its first key,
//! follows MOVED and ASK, and reconnects to shards by itself. Every script's
//! keys share a hash slot ([`Key::derived`](redlock_core::Key::derived)), so
//! one script runs on one shard. The scripts are loaded on every shard at
//! connect (best effort: a shard down then loads them on its first
//! `NOSCRIPT`), and the node's facts are the lowest of its masters'
//! ([`NodeFacts::lowest`]): a plain command goes to a cluster node only if
//! every shard has it.

use std::borrow::Cow;
use std::fmt;
use std::sync::{Arc, LazyLock, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, ResponsePolicy, RoutingInfo};
use redis::{
    AsyncConnectionConfig, Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, ServerErrorKind,
    Value,
};
use redlock_core::{
    Argument, Call, HealthChange, NodeError, NodeErrorKind, NodeFacts, NodeHealth, NodeId, Reply,
    Request, Response, scripts,
};
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::order::{Order, Ticket};
use crate::sim::Simulation;

/// First wait before reconnecting after a failed attempt; doubles each time.
const RECONNECT_MIN: Duration = Duration::from_millis(50);
/// Longest wait between reconnection attempts.
const RECONNECT_MAX: Duration = Duration::from_secs(2);

/// Every script the core may ask for, with its SHA1, computed once.
struct Script {
    source: &'static str,
    sha: String,
}

static SCRIPTS: LazyLock<[Script; scripts::ALL.len()]> = LazyLock::new(|| {
    scripts::ALL.map(|source| Script {
        source,
        sha: redis::Script::new(source).get_hash().to_owned(),
    })
});

fn sha_of(source: &'static str) -> Cow<'static, str> {
    SCRIPTS
        .iter()
        // The core hands out its own constants: the pointer check is
        // enough, and skips comparing the texts of a dozen scripts.
        .find(|script| std::ptr::eq(script.source, source) || script.source == source)
        .map(|script| Cow::Borrowed(script.sha.as_str()))
        // A command added to the core later: hash its script on the fly.
        .unwrap_or_else(|| Cow::Owned(redis::Script::new(source).get_hash().to_owned()))
}

/// The connection of a node: to one master, or to a whole cluster.
#[derive(Clone)]
enum Connection {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Single(connection) => connection.req_packed_command(cmd),
            Connection::Cluster(connection) => connection.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Single(connection) => connection.req_packed_commands(cmd, offset, count),
            Connection::Cluster(connection) => connection.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Single(connection) => connection.get_db(),
            Connection::Cluster(connection) => connection.get_db(),
        }
    }
}

/// A connection made, and what its server turned out to be.
pub(crate) struct Connected {
    connection: Connection,
    /// Read from `INFO server` on this connection: after a reconnect the
    /// server may be another version (upgraded, replaced), so the facts go
    /// with the connection, never with the node.
    facts: NodeFacts,
}

enum Link {
    Up {
        connection: Connection,
        facts: NodeFacts,
        generation: u64,
    },
    Down {
        error: NodeError,
        /// The background reconnection, if one was started. It ends early
        /// when its runtime shuts down; a finished one is started again.
        reconnecting: Option<JoinHandle<()>>,
    },
}

struct State {
    link: Link,
    generation: u64,
}

/// One Redis master.
pub(crate) struct Node {
    name: Arc<str>,
    client: redis::Client,
    /// Set for a node that is a Redis Cluster; `client` is then unused here.
    cluster: Option<ClusterClient>,
    connect_timeout: Duration,
    /// The per-node timeout: how long a blocking release waits for an answer.
    node_timeout: Duration,
    /// How long a release that met a broken connection waits for the next
    /// one ([`resend_later`](Self::resend_later)): the client's default TTL.
    patience: Duration,
    /// Told when a connection is made, for releases waiting to be sent again.
    connected: tokio::sync::Notify,
    /// Releases waiting to be sent again on this node, at most [`RESENDS`].
    resends: std::sync::atomic::AtomicUsize,
    /// Whether a `NOPERM` was logged at WARN: once per node, since an ACL
    /// user without rights on the waiters' marks meets one on every
    /// release (which the core then sends again without them).
    no_permission_logged: std::sync::atomic::AtomicBool,
    state: Mutex<State>,
    /// The order of the requests sent, per lock key.
    order: Order,
    /// The connection of [`send_blocking`](Self::send_blocking), made on
    /// first use: only when a Tokio runtime is gone (or was never there).
    blocking: Mutex<Blocking>,
    /// Set in a simulation only: this node's index and the simulation's
    /// connector and RNG ([`Simulation`]).
    simulation: Option<(usize, Simulation)>,
    /// What the core knows of this node's recent answers: whether new
    /// requests still go to it ([`admit`](Self::admit)).
    health: Mutex<NodeHealth>,
}

/// A plain blocking connection, for releases sent when no runtime can send
/// them (at process exit, or a guard dropped outside a runtime).
#[derive(Default)]
struct Blocking {
    connection: Option<Box<dyn redis::ConnectionLike + Send>>,
    /// Set when a connection or a request failed: the node is down or
    /// paused, and every later blocking release would wait for it again.
    gave_up: bool,
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Node")
            .field("name", &self.name)
            .field("connected", &self.is_connected())
            .finish()
    }
}

impl Node {
    pub(crate) fn new(
        name: String,
        client: redis::Client,
        cluster: Option<ClusterClient>,
        connect_timeout: Duration,
        node_timeout: Duration,
        patience: Duration,
    ) -> Self {
        Self {
            name: name.into(),
            client,
            cluster,
            connect_timeout,
            node_timeout,
            patience,
            connected: tokio::sync::Notify::new(),
            resends: std::sync::atomic::AtomicUsize::new(0),
            no_permission_logged: std::sync::atomic::AtomicBool::new(false),
            blocking: Mutex::default(),
            state: Mutex::new(State {
                link: Link::Down {
                    error: NodeError::new(NodeErrorKind::Connection, "not connected yet"),
                    reconnecting: None,
                },
                generation: 0,
            }),
            order: Order::default(),
            simulation: None,
            health: Mutex::new(NodeHealth::new(NodeId(0), node_timeout * 4)),
        }
    }

    /// This node with the core's health record for it (node `index` of the
    /// client's settings).
    pub(crate) fn with_health(mut self, health: NodeHealth) -> Self {
        self.health = Mutex::new(health);
        self
    }

    fn health(&self) -> std::sync::MutexGuard<'_, NodeHealth> {
        // Every update of the record is one call of the core's, which
        // cannot leave it half-written.
        self.health
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether the core sends `request` to this node now (see
    /// [`NodeHealth::admit`]).
    pub(crate) fn admit(&self, request: &Request, now: Instant) -> bool {
        self.health().admit(request, now)
    }

    /// Whether this node is known slow.
    pub(crate) fn is_slow(&self) -> bool {
        self.health().is_slow()
    }

    /// The node answered a request at `now`.
    pub(crate) fn answered(&self, now: Instant) {
        let change = self.health().handle_answer(now);
        self.health_changed(change);
    }

    /// A request to this node passed its deadline unanswered at `now`.
    pub(crate) fn overdue(&self, now: Instant) {
        let change = self.health().handle_overdue(now);
        self.health_changed(change);
    }

    fn health_changed(&self, change: Option<HealthChange>) {
        match change {
            Some(HealthChange::Slow { .. }) => {
                info!(
                    node = %self.name,
                    "node known slow: {} requests in a row unanswered past their timeout; \
                     new acquires skip it, one probe every {} ms, until it answers",
                    redlock_core::SLOW_AFTER,
                    self.health().probe_every().as_millis()
                );
                crate::metrics::node_slow(&self.name, true);
            }
            Some(HealthChange::Trusted { after, .. }) => {
                info!(
                    node = %self.name,
                    slow_ms = after.as_millis() as u64,
                    "node answers again; trusted"
                );
                crate::metrics::node_slow(&self.name, false);
            }
            _ => {}
        }
    }

    /// This node, node `index` of a simulation: connected through its
    /// connector (a plain master only).
    pub(crate) fn simulated(mut self, index: usize, simulation: Simulation) -> Self {
        self.simulation = Some((index, simulation));
        self
    }

    /// A node over `connection`, made elsewhere (a test's in-memory server).
    #[cfg(test)]
    pub(crate) fn over(connection: MultiplexedConnection) -> Arc<Self> {
        let client = redis::Client::open("redis://127.0.0.1:1").expect("a valid URL");
        let node = Arc::new(Self::new(
            "test".to_owned(),
            client,
            None,
            Duration::from_secs(1),
            Duration::from_secs(1),
            Duration::from_secs(1),
        ));
        node.set_up(Connected {
            connection: Connection::Single(connection),
            facts: NodeFacts::default(),
        });
        node
    }

    /// The canonical address, `host:port/db` (`cluster:host:port,...` for
    /// a cluster node).
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Whether a connection is up (as far as the last request could tell).
    pub(crate) fn is_connected(&self) -> bool {
        matches!(self.lock_state().link, Link::Up { .. })
    }

    fn lock_state(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is a plain value replaced in one assignment: a panic
        // elsewhere cannot leave it half-written.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Connects and loads the scripts, within the connect timeout, and reads
    /// what the server is ([`NodeFacts`], from `INFO server`: the core picks
    /// each request's command by them). Also returns the server's `run_id`
    /// (from the same reply), which tells two addresses of one server apart
    /// from two servers; `None` when the server does not say (INFO refused by
    /// an ACL, a Redis-compatible server), which also leaves the facts
    /// unknown: scripts only.
    ///
    /// A cluster node answers with the `run_id` of every master that
    /// answered, so that a server listed twice (in two cluster nodes, or as
    /// a plain node and a shard) is found.
    pub(crate) async fn connect(&self) -> Result<(Connected, Vec<String>), NodeError> {
        if let Some(cluster) = &self.cluster {
            return self.connect_cluster(cluster).await;
        }
        let config = connection_config().set_connection_timeout(Some(self.connect_timeout));
        let attempt = async {
            let connection = match &self.simulation {
                None => self
                    .client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await
                    .map_err(|err| map_error(&err))?,
                Some((index, simulation)) => self
                    .connect_simulated(*index, simulation, config.clone())
                    .await
                    .map_err(|err| map_error(&err))?,
            };
            // Sent together on the multiplexed connection, so one round trip
            // loads them all, and steady state is one EVALSHA per request.
            // (Separate commands rather than a pipeline, whose errors lose
            // their code, such as NOAUTH.)
            let loads = SCRIPTS.iter().map(|script| {
                let mut connection = connection.clone();
                async move {
                    redis::cmd("SCRIPT")
                        .arg("LOAD")
                        .arg(script.source)
                        .query_async::<String>(&mut connection)
                        .await
                }
            });
            let info = {
                let mut connection = connection.clone();
                async move {
                    redis::cmd("INFO")
                        .arg("server")
                        .query_async::<String>(&mut connection)
                        .await
                }
            };
            let (shas, info) =
                futures::future::join(futures::future::try_join_all(loads), info).await;
            let shas: Vec<String> = shas.map_err(|err| map_error(&err))?;
            let info = info.ok();
            let run_id = info.as_deref().and_then(run_id);
            let facts = info
                .as_deref()
                .map(NodeFacts::from_info)
                .unwrap_or_default();
            let expected: Vec<&str> = SCRIPTS.iter().map(|s| s.sha.as_str()).collect();
            if shas != expected {
                return Err(NodeError::new(
                    NodeErrorKind::Protocol,
                    "SCRIPT LOAD returned other SHA1 digests than the scripts have \
                     (is this a Redis server?)",
                ));
            }
            Ok((
                Connected {
                    connection: Connection::Single(connection),
                    facts,
                },
                run_id.into_iter().collect(),
            ))
        };
        match tokio::time::timeout(self.connect_timeout, attempt).await {
            Ok(result) => result,
            Err(_) => Err(NodeError::new(
                NodeErrorKind::Connection,
                format!(
                    "no working connection within the connect timeout of {} ms",
                    self.connect_timeout.as_millis()
                ),
            )),
        }
    }

    /// The connection of [`connect`](Self::connect) in a simulation: over
    /// the stream its connector gives, with its connection queue if it sets
    /// one.
    async fn connect_simulated(
        &self,
        index: usize,
        simulation: &Simulation,
        config: AsyncConnectionConfig,
    ) -> redis::RedisResult<MultiplexedConnection> {
        let stream = simulation.connect(index).await?;
        let config = match simulation.queue() {
            Some(requests) => config.set_pipeline_buffer_size(requests),
            None => config,
        };
        let (connection, driver) = MultiplexedConnection::new_with_config(
            self.client.get_connection_info().redis_settings(),
            stream,
            config,
        )
        .await?;
        tokio::spawn(driver);
        Ok(connection)
    }

    /// [`connect`](Self::connect) for a cluster node: the cluster client
    /// reads the slot map from a seed; the scripts are loaded on every node
    /// and `INFO server` read from every master.
    async fn connect_cluster(
        &self,
        cluster: &ClusterClient,
    ) -> Result<(Connected, Vec<String>), NodeError> {
        let attempt = async {
            let connection = cluster
                .get_async_connection()
                .await
                .map_err(|err| map_error(&err))?;
            let loads = SCRIPTS.iter().map(|script| {
                let mut connection = connection.clone();
                async move {
                    let mut load = redis::cmd("SCRIPT");
                    load.arg("LOAD").arg(script.source);
                    // Every node, replicas too: a failover then finds the
                    // scripts in place.
                    connection
                        .route_command(
                            load,
                            RoutingInfo::MultiNode((
                                MultipleNodeRoutingInfo::AllNodes,
                                Some(ResponsePolicy::AllSucceeded),
                            )),
                        )
                        .await
                }
            });
            let info = {
                let mut connection = connection.clone();
                async move {
                    let mut info = redis::cmd("INFO");
                    info.arg("server");
                    connection
                        .route_command(
                            info,
                            RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None)),
                        )
                        .await
                }
            };
            let (loads, info) = futures::future::join(futures::future::join_all(loads), info).await;
            if let Some(Err(err)) = loads.into_iter().find(Result::is_err) {
                // A shard down: it loads them on its first NOSCRIPT.
                debug!(node = %self.name, error = %map_error(&err), "scripts not loaded on every shard");
            }
            let infos: Vec<String> = match info {
                Ok(Value::Map(answers)) => answers
                    .into_iter()
                    .filter_map(|(_, answer)| redis::from_redis_value::<String>(answer).ok())
                    .collect(),
                _ => Vec::new(),
            };
            // Scripts only unless every master said what it is.
            let facts = if infos.is_empty() {
                NodeFacts::default()
            } else {
                NodeFacts::lowest(infos.iter().map(|info| NodeFacts::from_info(info)))
            };
            let run_ids = infos.iter().filter_map(|info| run_id(info)).collect();
            Ok((
                Connected {
                    connection: Connection::Cluster(connection),
                    facts,
                },
                run_ids,
            ))
        };
        match tokio::time::timeout(self.connect_timeout, attempt).await {
            Ok(result) => result,
            Err(_) => Err(NodeError::new(
                NodeErrorKind::Connection,
                format!(
                    "no working cluster connection within the connect timeout of {} ms",
                    self.connect_timeout.as_millis()
                ),
            )),
        }
    }

    /// Records the outcome of the eager connection attempt made at build.
    /// A failure starts the background reconnection.
    pub(crate) fn set_initial(self: &Arc<Self>, result: Result<Connected, NodeError>) {
        match result {
            Ok(connection) => self.set_up(connection),
            Err(error) => {
                let mut state = self.lock_state();
                let reconnecting = self.spawn_reconnect(Some(RECONNECT_MIN));
                state.link = Link::Down {
                    error,
                    reconnecting,
                };
            }
        }
    }

    fn set_up(&self, connected: Connected) {
        debug!(node = %self.name, server = %connected.facts, "server facts read");
        let mut state = self.lock_state();
        state.generation += 1;
        state.link = Link::Up {
            connection: connected.connection,
            facts: connected.facts,
            generation: state.generation,
        };
        drop(state);
        self.connected.notify_waiters();
    }

    /// The connection to use, its server's facts and its generation, or
    /// the reason there is none.
    fn connection(self: &Arc<Self>) -> Result<(Connection, NodeFacts, u64), NodeError> {
        let mut state = self.lock_state();
        match &mut state.link {
            Link::Up {
                connection,
                facts,
                generation,
            } => Ok((connection.clone(), *facts, *generation)),
            Link::Down {
                error,
                reconnecting,
            } => {
                let error = NodeError::new(
                    error.kind,
                    format!("not connected; last error: {}", error.detail),
                );
                if reconnecting.as_ref().is_none_or(JoinHandle::is_finished) {
                    // The reconnection task ended with its runtime (or never
                    // started): start one on the caller's runtime.
                    *reconnecting = self.spawn_reconnect(None);
                }
                Err(error)
            }
        }
    }

    /// Drops the connection of `generation` after an error that leaves it
    /// unusable, and starts reconnecting.
    fn connection_failed(self: &Arc<Self>, generation: u64, error: &NodeError) {
        let mut state = self.lock_state();
        if matches!(state.link, Link::Up { generation: g, .. } if g == generation) {
            // A master down: what an operator acts on (and `connected` when
            // it is back).
            info!(node = %self.name, error = %error, "connection lost; reconnecting in the background");
            let reconnecting = self.spawn_reconnect(None);
            state.link = Link::Down {
                error: error.clone(),
                reconnecting,
            };
        }
    }

    /// Starts the reconnection loop on the current Tokio runtime, if any.
    fn spawn_reconnect(self: &Arc<Self>, first_delay: Option<Duration>) -> Option<JoinHandle<()>> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        Some(runtime.spawn(reconnect(Arc::downgrade(self), first_delay)))
    }

    /// Runs one request as the core says for this connection's server
    /// ([`Request::call`]): a plain command, or `EVALSHA` of its script, and
    /// returns the reply marked with what was sent. On `NOSCRIPT` (the node
    /// lost its script cache: `SCRIPT FLUSH`, or a restart behind a proxy
    /// that kept our connection) the script is loaded again, and the request
    /// sent once more unless a later request for the same lock key was sent
    /// to this node meanwhile ([`Order`]): commands for one key take effect
    /// in the order they were issued.
    ///
    /// No timeout here: the caller applies the request's deadline.
    pub(crate) async fn execute(self: &Arc<Self>, request: &Request) -> Reply {
        let (mut connection, facts, generation) = match self.connection() {
            Ok(link) => link,
            Err(error) => return Reply::to(request, Err(error)),
        };
        // A cluster connection keeps no order between requests (each is
        // routed on its own, and MOVED, ASK and TRYAGAIN send it again
        // later): a request for a key waits until the one before it on this
        // node has been answered or given up ([`Order::turn`]).
        let _turn = match self.cluster {
            Some(_) => Some(self.order.turn(request.key()).await),
            None => None,
        };
        let call = request.call(&facts);
        let result = match call {
            Call::Script(script) => {
                self.evalsha(&mut connection, generation, request, script)
                    .await
            }
            Call::Native(native) => {
                let command = plain(native.words(request));
                let result = self
                    .order
                    .send_plain(request.key(), command.query_async::<Value>(&mut connection))
                    .await;
                self.finish(request, generation, result)
            }
        };
        Reply::via(request, call, result)
    }

    async fn evalsha(
        self: &Arc<Self>,
        connection: &mut Connection,
        generation: u64,
        request: &Request,
        script: &'static str,
    ) -> Result<Response, NodeError> {
        let sha = sha_of(script);
        let call = evalsha(&sha, request);
        // Every request carries the lock key first.
        let key = &request.keys[0];
        let mut ticket = None;
        let first = self
            .order
            .send(key, &mut ticket, call.query_async::<Value>(connection))
            .await;
        let result = match (first, ticket) {
            (Err(err), Some(ticket))
                if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) =>
            {
                // Boxed: the rare path would otherwise more than double
                // the size of every request's future (allocated per request,
                // past the allocator's fast sizes).
                Box::pin(self.reload(connection, request, script, &call, ticket)).await?
            }
            (first, _) => first,
        };
        self.finish(request, generation, result)
    }

    /// After `NOSCRIPT`: loads `script` and sends `call` again, unless a
    /// later request for its key was sent meanwhile (then the request
    /// fails, and the script is loaded for the requests to come).
    async fn reload(
        &self,
        connection: &mut Connection,
        request: &Request,
        script: &'static str,
        call: &Cmd,
        mut ticket: Ticket<'_>,
    ) -> Result<Result<Value, RedisError>, NodeError> {
        let command = request.command;
        // The load and the request go out back to back, so nothing
        // queued after them runs between the two.
        let mut loading = connection.clone();
        let mut load = redis::cmd("SCRIPT");
        load.arg("LOAD").arg(script);
        let load = load.query_async::<String>(&mut loading);
        let again = call.query_async::<Value>(connection);
        match self
            .order
            .resend(&mut ticket, futures::future::join(load, again))
            .await
        {
            Some((_, again)) => {
                debug!(node = %self.name, command = command.name(), "NOSCRIPT: script loaded and request sent again");
                Ok(again)
            }
            None => {
                // Load the script for the requests to come all the same;
                // this one failed.
                let load = redis::cmd("SCRIPT")
                    .arg("LOAD")
                    .arg(script)
                    .query_async::<String>(connection)
                    .await;
                if let Err(err) = load {
                    return Err(map_error(&err));
                }
                debug!(node = %self.name, command = command.name(), "NOSCRIPT: not sent again, a later request for the key was sent already");
                Err(NodeError::new(
                    NodeErrorKind::Server,
                    "NOSCRIPT: the node's script cache was flushed; the request \
                     was not sent again, to keep the key's commands in order",
                ))
            }
        }
    }

    /// The node's answer as a `Response`; an error that leaves the
    /// connection unusable starts the reconnection.
    fn finish(
        self: &Arc<Self>,
        request: &Request,
        generation: u64,
        result: Result<Value, RedisError>,
    ) -> Result<Response, NodeError> {
        let command = request.command;
        match result {
            Ok(value) => {
                let response = map_value(value);
                if let Response::Other(text) = &response {
                    // No script returns a status or a map: not a Redis
                    // server, or not the script we loaded.
                    warn!(node = %self.name, command = command.name(), answer = %text, "unexpected answer from node");
                }
                Ok(response)
            }
            Err(err) => {
                let error = map_error(&err);
                // A cluster connection reconnects to its shards by itself:
                // one shard down must not cut the node off from the others.
                if err.is_unrecoverable_error() && self.cluster.is_none() {
                    self.connection_failed(generation, &error);
                } else if error.kind == NodeErrorKind::NoPermission {
                    self.not_permitted(request, &error);
                } else if is_anomaly(error.kind) {
                    warn!(node = %self.name, command = command.name(), error = %error, "node refused the request");
                }
                Err(error)
            }
        }
    }

    /// Logs a `NOPERM` at WARN once per node, then at DEBUG: an ACL user
    /// without rights on the waiters' marks meets one on every release
    /// (refused whole and sent again without them).
    fn not_permitted(&self, request: &Request, error: &NodeError) {
        let command = request.command.name();
        if self
            .no_permission_logged
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            debug!(node = %self.name, command, error = %error, "not permitted");
            return;
        }
        warn!(node = %self.name, command, error = %error,
            "the server refused a key or channel to this ACL user (logged once per node); \
             a release whose waiters' marks are refused costs a round trip or a notice more: \
             give the user the pattern ~{{<prefix>* as well");
    }
}

/// Node errors worth a WARN: the node is up but refused or garbled the
/// request (an error reply, a key of another type, credentials, garbage),
/// which retrying will not fix. A node down or slow is reported once by its
/// connection instead, at INFO.
fn is_anomaly(kind: NodeErrorKind) -> bool {
    matches!(
        kind,
        NodeErrorKind::Server
            | NodeErrorKind::Protocol
            | NodeErrorKind::WrongType
            | NodeErrorKind::Auth
    )
}

/// How many requests a node's connection queues before a sender has to wait
/// for room. Every request must be in its node's queue the moment the core
/// emits it (the per-node order, see [`driver::send`](crate::driver::send)):
/// a sender that waited for room would queue its request whenever its task
/// is next polled, possibly after a request emitted later (a release
/// overtaking its acquire). The `redis` crate's default of 50 was reached by
/// a few dozen tasks on one client; this many is reached only by a master
/// that stopped reading for a while under heavy load. The queue takes no
/// memory until used, and bounds what a stalled master can make the client
/// hold (about 200 bytes a request); past it the order may break, and a key
/// then left behind expires at its TTL.
pub(crate) const CONNECTION_QUEUE: usize = 1 << 16;

/// How every connection to a plain master is set up.
pub(crate) fn connection_config() -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        // The core applies its own per-node timeout to every request.
        .set_response_timeout(None)
        .set_pipeline_buffer_size(CONNECTION_QUEUE)
}

impl Node {
    /// Sends `request` (a release or a withdraw) over a plain blocking
    /// connection and waits for the answer, at most one connect timeout plus
    /// one per-node timeout: for when no Tokio runtime can send it (its
    /// runtime shut down with the request unsent, or there never was one).
    /// The answer is not read: whoever would act on it is gone, and a
    /// release is safe to repeat (it deletes only our value). A node that
    /// fails here is not tried again by later blocking releases, so that a
    /// process exiting with many locks waits for a dead node once.
    pub(crate) fn send_blocking(&self, request: &Request) {
        // The full script, never the plain `DELIFEQ`: our value may be
        // marked as waited for, which only the script deletes, and nobody
        // reads this answer to send the script after it
        // (`redlock_core::waited`). In full: a new connection may meet an
        // empty script cache, and there is no time for a NOSCRIPT round
        // trip.
        let command = script_call("EVAL", request.script(), request);
        let mut blocking = self.blocking.lock().unwrap_or_else(PoisonError::into_inner);
        if blocking.gave_up {
            return;
        }
        let sent = (|| -> redis::RedisResult<()> {
            let connection = match &mut blocking.connection {
                Some(connection) => connection,
                none => none.insert(self.connect_blocking()?),
            };
            command.query::<Value>(connection.as_mut()).map(drop)
        })();
        match sent {
            Ok(()) => {
                debug!(node = %self.name, command = request.command.name(), "sent with a blocking connection")
            }
            Err(err)
                if err.is_timeout()
                    || err.is_io_error()
                    || err.is_connection_dropped()
                    || err.is_connection_refusal() =>
            {
                info!(node = %self.name, error = %map_error(&err), "no blocking release on this node; its key expires at its TTL");
                blocking.connection = None;
                blocking.gave_up = true;
            }
            // An error reply (a key of another type, say): the node is up.
            Err(err) => {
                debug!(node = %self.name, error = %map_error(&err), "blocking release refused")
            }
        }
    }

    /// Sends `request` (a release or a withdraw that met a broken
    /// connection) again once the node has a connection, within
    /// [`patience`](Self::patience): the node may have run the acquire it
    /// undoes before the connection broke (a master that restarted with its
    /// data, a connection cut by a proxy). Sending it again is safe: it
    /// removes only our value. A runtime that shuts down first drops the
    /// task, and the request goes out on a blocking connection instead
    /// ([`send_blocking`](Self::send_blocking)): so a runtime that drops the
    /// node's connection while a release waits for its answer still sends
    /// it. At most [`RESENDS`] wait per node; past that, a key left expires
    /// at its TTL.
    pub(crate) fn resend_later(self: &Arc<Self>, request: Request) {
        use std::sync::atomic::Ordering;
        if self.resends.fetch_add(1, Ordering::Relaxed) >= RESENDS {
            self.resends.fetch_sub(1, Ordering::Relaxed);
            return;
        }
        let resend = Resend {
            node: Arc::clone(self),
            request: Some(request),
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(resend.run());
        }
        // Else `resend` is dropped here: sent on a blocking connection.
    }

    fn connect_blocking(&self) -> redis::RedisResult<Box<dyn redis::ConnectionLike + Send>> {
        if let Some((index, simulation)) = &self.simulation {
            return simulation.blocking(*index);
        }
        if let Some(cluster) = &self.cluster {
            let connection = cluster.get_connection()?;
            connection.set_read_timeout(Some(self.node_timeout))?;
            connection.set_write_timeout(Some(self.node_timeout))?;
            return Ok(Box::new(connection));
        }
        let connection = self
            .client
            .get_connection_with_timeout(self.connect_timeout)?;
        connection.set_read_timeout(Some(self.node_timeout))?;
        connection.set_write_timeout(Some(self.node_timeout))?;
        Ok(Box::new(connection))
    }
}

/// Releases waiting to be sent again on one node, at most.
const RESENDS: usize = 4_096;

/// A release waiting for its node's next connection; dropped before it was
/// answered, it is sent on a blocking connection.
struct Resend {
    node: Arc<Node>,
    request: Option<Request>,
}

impl Resend {
    async fn run(mut self) {
        let deadline = tokio::time::Instant::now() + self.node.patience;
        while let Some(request) = self.request.clone() {
            let connected = self.node.connected.notified();
            let mut connected = std::pin::pin!(connected);
            connected.as_mut().enable();
            if !self.node.is_connected()
                && tokio::time::timeout_at(deadline, connected).await.is_err()
            {
                break;
            }
            let reply = self.node.execute(&request).await;
            match reply.result {
                Err(error)
                    if error.kind == NodeErrorKind::Connection
                        && tokio::time::Instant::now() < deadline =>
                {
                    // Not again at once: a cluster node stays "connected"
                    // while one shard is down.
                    tokio::time::sleep(self.node.node_timeout).await;
                }
                _ => {
                    debug!(node = %self.node.name, command = request.command.name(), "sent again after a reconnect");
                    break;
                }
            }
        }
        self.request = None;
    }
}

impl Drop for Resend {
    fn drop(&mut self) {
        if let Some(request) = self.request.take() {
            self.node.send_blocking(&request);
        }
        self.node
            .resends
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

async fn reconnect(node: Weak<Node>, first_delay: Option<Duration>) {
    let mut backoff = RECONNECT_MIN;
    let mut rng = node.upgrade().and_then(|node| {
        node.simulation
            .as_ref()
            .map(|(_, simulation)| simulation.rng())
    });
    let mut jittered = move |delay| jittered(delay, rng.as_mut());
    if let Some(delay) = first_delay {
        tokio::time::sleep(jittered(delay)).await;
    }
    loop {
        // Hold the node only while trying, so that dropping the client ends
        // this task at its next wake-up.
        let Some(strong) = node.upgrade() else {
            return;
        };
        match strong.connect().await {
            Ok((connected, _)) => {
                info!(node = %strong.name, "connected");
                strong.set_up(connected);
                return;
            }
            Err(error) => {
                debug!(node = %strong.name, error = %error, retry_in_ms = backoff.as_millis() as u64, "reconnection failed");
                let mut state = strong.lock_state();
                if let Link::Down { error: last, .. } = &mut state.link {
                    *last = error;
                }
            }
        }
        drop(strong);
        tokio::time::sleep(jittered(backoff)).await;
        backoff = (backoff * 2).min(RECONNECT_MAX);
    }
}

/// The `run_id` line of an `INFO server` reply: 40 hex characters, random
/// per server process.
fn run_id(info: &str) -> Option<String> {
    info.lines()
        .find_map(|line| line.trim().strip_prefix("run_id:"))
        .map(str::to_owned)
        .filter(|id| !id.is_empty())
}

/// `delay` minus up to a quarter, so that many clients do not reconnect in
/// step; drawn from `rng` in a simulation.
fn jittered(delay: Duration, rng: Option<&mut rand::rngs::StdRng>) -> Duration {
    use rand::RngExt;
    let quarter = u64::try_from(delay.as_micros() / 4).unwrap_or(u64::MAX);
    let cut = match rng {
        Some(rng) => rng.random_range(0..=quarter),
        None => rand::random_range(0..=quarter),
    };
    delay - Duration::from_micros(cut)
}

/// The plain command of `words` (name first), sized up front as
/// [`evalsha`] is.
fn plain(words: Vec<Argument<'_>>) -> redis::Cmd {
    let bytes = words
        .iter()
        .map(|word| match word {
            Argument::Bytes(bytes) => bytes.len(),
            Argument::Int(_) => 20,
        })
        .sum();
    let mut command = redis::Cmd::with_capacity(words.len(), bytes);
    for word in words {
        match word {
            Argument::Bytes(bytes) => command.arg(bytes),
            Argument::Int(number) => command.arg(number),
        };
    }
    command
}

fn evalsha(sha: &str, request: &Request) -> redis::Cmd {
    script_call("EVALSHA", sha, request)
}

/// `EVALSHA sha` or `EVAL source` (`verb`, `script`) for `request`.
fn script_call(verb: &str, script: &str, request: &Request) -> redis::Cmd {
    // Sized up front: growing the command's buffers argument by argument
    // (reallocating at 8, 16, 32, ... bytes) cost more than all the rest of
    // building it.
    let arguments = request.arguments().count();
    let bytes = verb.len()
        + script.len()
        + 3 // the key count
        + request.keys.iter().map(|key| key.as_bytes().len()).sum::<usize>()
        + request
            .arguments()
            .map(|argument| match argument {
                Argument::Bytes(bytes) => bytes.len(),
                Argument::Int(_) => 20,
            })
            .sum::<usize>();
    let mut call = redis::Cmd::with_capacity(3 + request.keys.len() + arguments, bytes);
    call.arg(verb).arg(script).arg(request.keys.len());
    for key in request.keys.iter() {
        call.arg(key.as_bytes());
    }
    for argument in request.arguments() {
        match argument {
            Argument::Bytes(bytes) => call.arg(bytes),
            Argument::Int(number) => call.arg(number),
        };
    }
    call
}

/// A script's return value as the core's `Response`.
pub(crate) fn map_value(value: Value) -> Response {
    match value {
        Value::Int(n) => Response::Int(n),
        Value::BulkString(bytes) => Response::Data(bytes),
        Value::Nil => Response::Nil,
        Value::Array(items) => Response::Array(items.into_iter().map(map_value).collect()),
        Value::Okay => Response::Other("status OK".to_owned()),
        Value::SimpleString(text) => Response::Other(format!("status {text}")),
        other => Response::Other(format!("{other:?}")),
    }
}

/// A redis error as the core's `NodeError`, classified by what the caller can do.
pub(crate) fn map_error(err: &RedisError) -> NodeError {
    if let Some(detail) = tls_rejection(err) {
        return NodeError::new(NodeErrorKind::Tls, detail);
    }
    let code = err.code().unwrap_or_default();
    let kind = match err.kind() {
        ErrorKind::AuthenticationFailed => NodeErrorKind::Auth,
        // An error reply: the core classifies it by its code.
        _ if err.code().is_some() => NodeErrorKind::from_error_code(code),
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType => NodeErrorKind::Protocol,
        ErrorKind::Server(_) | ErrorKind::Extension => NodeErrorKind::Server,
        ErrorKind::Io => NodeErrorKind::Connection,
        // Client-side errors (TLS setup, invalid configuration, ...): the node
        // cannot be used through this connection.
        _ => NodeErrorKind::Connection,
    };
    let detail = match (err.code(), err.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_owned(),
        _ if kind == NodeErrorKind::Protocol => {
            // Parse errors list every unexpected byte on lines of their own.
            let text = err.to_string();
            let first = text.lines().next().unwrap_or_default();
            format!("{first} (is this a Redis server?)")
        }
        // redis' own text ("Password authentication failed -
        // AuthenticationFailed") says the kind twice; one cause, once.
        _ if kind == NodeErrorKind::Auth => {
            "wrong password or unknown user (the server refused AUTH)".to_owned()
        }
        _ => err.to_string(),
    };
    NodeError::new(kind, tidy(&detail))
}

/// A node's words fit for a one-line report: without the script noise Redis
/// appends to errors raised inside a script (` script: <sha1>, on
/// @user_script:1.`, the `user_script:1: ` prefix), on one line, and cut at
/// [`DETAIL_MAX`] characters.
fn tidy(detail: &str) -> String {
    let mut text = detail.to_owned();
    if let Some(at) = text.find(" script: ") {
        let sha = &text[at + " script: ".len()..];
        if sha.len() >= 40 && sha.as_bytes()[..40].iter().all(u8::is_ascii_hexdigit) {
            text.truncate(at);
        }
    }
    // "ERR user_script:1: Script attempted ...", and any other script
    // position ("@user_script:12: ").
    while let Some(at) = text.find("user_script:") {
        let start = if text[..at].ends_with('@') {
            at - 1
        } else {
            at
        };
        let rest = &text[at + "user_script:".len()..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let mut end = at + "user_script:".len() + digits;
        for tail in [": ", ":", "."] {
            if text[end..].starts_with(tail) {
                end += tail.len();
                break;
            }
        }
        text.replace_range(start..end, "");
    }
    let mut text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.chars().count() > DETAIL_MAX {
        text = text.chars().take(DETAIL_MAX - 1).collect();
        text.push('…');
    }
    text
}

/// The longest node error detail kept, in characters.
const DETAIL_MAX: usize = 160;

/// What rustls said, when `err` is a TLS handshake that either side refused
/// (an untrusted or unsuitable certificate, a missing client certificate):
/// a configuration error. A server that does not speak TLS at all (garbage
/// instead of a handshake) is not one of these: it counts as unreachable.
#[cfg(feature = "tls")]
fn tls_rejection(err: &RedisError) -> Option<String> {
    use rustls::Error as Tls;
    use std::error::Error as _;

    type Shared = Arc<dyn std::error::Error + Send + Sync>;

    // redis keeps the cause in an Arc and returns the Arc as the source.
    let mut cause: &(dyn std::error::Error + 'static) = err.source()?;
    if let Some(shared) = cause.downcast_ref::<Shared>() {
        cause = shared.as_ref();
    }
    // rustls errors come either directly (building the TLS configuration)
    // or inside the io::Error of the handshake or of a later read.
    let tls = cause.downcast_ref::<Tls>().or_else(|| {
        cause
            .downcast_ref::<std::io::Error>()?
            .get_ref()?
            .downcast_ref::<Tls>()
    })?;
    match tls {
        Tls::InvalidCertificate(_)
        | Tls::NoCertificatesPresented
        | Tls::UnsupportedNameType
        | Tls::PeerIncompatible(_)
        | Tls::InconsistentKeys(_)
        | Tls::AlertReceived(_) => Some(tls.to_string()),
        _ => None,
    }
}

#[cfg(not(feature = "tls"))]
fn tls_rejection(_: &RedisError) -> Option<String> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shas_match_redis_script() {
        for script in SCRIPTS.iter() {
            assert_eq!(script.sha.len(), 40);
            assert_eq!(sha_of(script.source), script.sha);
        }
    }

    #[test]
    fn values_map_to_responses() {
        assert_eq!(map_value(Value::Int(1)), Response::Int(1));
        assert_eq!(map_value(Value::Nil), Response::Nil);
        assert_eq!(
            map_value(Value::BulkString(b"abc".to_vec())),
            Response::Data(b"abc".to_vec())
        );
        assert!(matches!(map_value(Value::Okay), Response::Other(_)));
        assert_eq!(
            map_value(Value::Array(vec![Value::Int(1), Value::Int(7)])),
            Response::Array(vec![Response::Int(1), Response::Int(7)])
        );
        assert!(matches!(map_value(Value::Map(vec![])), Response::Other(_)));
    }

    #[test]
    fn errors_map_to_kinds() {
        let io = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(map_error(&io).kind, NodeErrorKind::Connection);
        let auth = RedisError::from((
            ErrorKind::AuthenticationFailed,
            "Password authentication failed",
        ));
        assert_eq!(map_error(&auth).kind, NodeErrorKind::Auth);
        let shown = map_error(&auth).to_string();
        assert_eq!(
            shown,
            "authentication failed: wrong password or unknown user (the server refused AUTH)"
        );
        let parse = RedisError::from((ErrorKind::Parse, "garbage"));
        assert_eq!(map_error(&parse).kind, NodeErrorKind::Protocol);
        let wrongtype =
            redis::make_extension_error("WRONGTYPE".into(), Some("Operation against a key".into()));
        assert_eq!(map_error(&wrongtype).kind, NodeErrorKind::WrongType);
        let noauth =
            redis::make_extension_error("NOAUTH".into(), Some("Authentication required.".into()));
        assert_eq!(map_error(&noauth).kind, NodeErrorKind::Auth);
        let oom = redis::make_extension_error("OOM".into(), Some("command not allowed".into()));
        assert_eq!(map_error(&oom).kind, NodeErrorKind::Server);
    }

    #[test]
    fn run_id_is_read_from_info_server() {
        let info = "# Server\r\nredis_version:7.0.15\r\n\
                    run_id:79163465ae2b4b3b9ab2214e418355116108fae7\r\ntcp_port:6379\r\n";
        assert_eq!(
            run_id(info).as_deref(),
            Some("79163465ae2b4b3b9ab2214e418355116108fae7")
        );
        assert_eq!(run_id("# Server\r\nredis_version:7.0.15\r\n"), None);
    }

    #[test]
    fn script_noise_is_stripped_from_node_errors() {
        // As Redis 7 words errors raised inside a script.
        let wrongtype = redis::make_extension_error(
            "WRONGTYPE".into(),
            Some(
                "Operation against a key holding the wrong kind of value script: \
                 30066d0618efaa6f4d54a3824876d45cb637d4f7, on @user_script:1."
                    .into(),
            ),
        );
        assert_eq!(
            map_error(&wrongtype).detail,
            "WRONGTYPE Operation against a key holding the wrong kind of value"
        );
        let script = redis::make_extension_error(
            "ERR".into(),
            Some(
                "user_script:1: Script attempted to access nonexistent global variable 'foo' \
                 script: be8e79a153b67c7996be1e272cc18cdc0e67b346, on @user_script:1."
                    .into(),
            ),
        );
        assert_eq!(
            map_error(&script).detail,
            "ERR Script attempted to access nonexistent global variable 'foo'"
        );
        let long = redis::make_extension_error("ERR".into(), Some("x\ny ".repeat(200)));
        let detail = map_error(&long).detail;
        assert!(detail.chars().count() <= DETAIL_MAX, "{detail}");
        assert!(!detail.contains('\n'), "{detail}");
    }

    #[cfg(feature = "tls")]
    #[test]
    fn refused_handshakes_are_tls_errors_but_a_server_without_tls_is_unreachable() {
        use std::io;
        let handshake = |error: rustls::Error| {
            RedisError::from(io::Error::new(io::ErrorKind::InvalidData, error))
        };
        let unknown_ca = handshake(rustls::Error::InvalidCertificate(
            rustls::CertificateError::UnknownIssuer,
        ));
        let error = map_error(&unknown_ca);
        assert_eq!(error.kind, NodeErrorKind::Tls);
        assert!(error.detail.contains("UnknownIssuer"), "{error}");
        let no_client_cert = handshake(rustls::Error::AlertReceived(
            rustls::AlertDescription::CertificateRequired,
        ));
        assert_eq!(map_error(&no_client_cert).kind, NodeErrorKind::Tls);
        let plain_server = handshake(rustls::Error::InvalidMessage(
            rustls::InvalidMessage::InvalidContentType,
        ));
        assert_eq!(map_error(&plain_server).kind, NodeErrorKind::Connection);
    }
}
