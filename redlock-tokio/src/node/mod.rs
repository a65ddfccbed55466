//! One Redis master: its long-lived connection, its scripts, and the mapping
//! of redis replies and errors onto the core's `Response` and `NodeError`.
//!
//! Each node keeps one connection that every request shares, so requests to
//! one node are written in the order they are sent: a release sent after an
//! acquire is executed after it. To a plain master it is our own
//! ([`plain`]: requests encoded and answers read by the core's RESP codec);
//! over TLS, the `redis` crate's multiplexed connection. The connection's
//! wire (what writes and reads its socket, [`Wire`]) is polled by the
//! client's driver task, beside the requests it waits for. The connection is made (and
//! every script loaded) eagerly at build, and again by the driver whenever
//! the core asks ([`Output::Connect`](redlock_core::Output::Connect): at
//! once after a break, then with backoff). While a node has no connection, requests
//! to it fail at once with the last connection error, which the core counts
//! as that node's failure; nothing waits for a reconnect.
//!
//! A node may be a whole Redis Cluster: then its connection is the `redis`
//! crate's cluster client, which routes each command by its first key,
//! follows MOVED and ASK, and reconnects to shards by itself. Every script's
//! keys share a hash slot ([`Key::derived`](redlock_core::Key::derived)), so
//! one script runs on one shard. The scripts are loaded on every shard at
//! connect (best effort: a shard down then runs the first request the
//! core sends again in full after its `NOSCRIPT`), and the node's facts
//! are the lowest of its masters'
//! ([`Connected::of_cluster`](redlock_core::Connected::of_cluster)): a
//! plain command goes to a cluster node only if every shard has it.

mod blocking;
mod connect;
mod direct;
mod encode;
mod execute;
mod plain;
mod reply;
pub(crate) mod server;
#[cfg(feature = "tls")]
pub(crate) mod tls;

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::AsyncConnectionConfig;
use redis::cluster::ClusterClient;
use redlock_core::{NodeError, NodeErrorKind};
use tracing::{debug, info};

use crate::sim::Simulation;

use blocking::Blocking;
pub(crate) use blocking::{as_runtime_drops, check_may_block};
use connect::Connection;
pub(crate) use connect::{Connected, Wire};
pub(crate) use plain::Landed;
#[cfg(test)]
pub(crate) use plain::Plain;
pub(crate) use reply::map_error;

enum Link {
    Up {
        connection: Connection,
        generation: u64,
    },
    /// No connection: the driver makes one when the core asks.
    Down { error: NodeError },
}

struct State {
    link: Link,
    generation: u64,
    /// What the last connection found the server to be, and when.
    seen: Option<Seen>,
    /// The wire of the connection made last, until the client's driver
    /// task takes it to poll it ([`take_wire`](Node::take_wire)); dropped
    /// with a connection replaced first.
    wire: Option<Wire>,
}

/// A connection's wire, polled by a driver task ([`Node::take_wire`]).
pub(crate) struct TakenWire {
    node: Arc<Node>,
    /// The connection's, to give it back only to it.
    generation: u64,
    /// `None` once it ended: its connection closed.
    wire: Option<Wire>,
}

impl TakenWire {
    /// The generation of its connection.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// Reads, and hands out the next answer to a tagged request
    /// ([`plain::Io::poll_answer`]); `None` once its connection ended and
    /// every answer is out.
    pub(crate) fn poll_answer(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Landed>> {
        let Some(wire) = self.wire.as_mut() else {
            return std::task::Poll::Ready(None);
        };
        let landed = std::task::ready!(wire.poll_answer(cx));
        if landed.is_none() {
            self.wire = None;
        }
        std::task::Poll::Ready(landed)
    }

    /// Writes what is queued ([`plain::Io::poll_write`]): true when its
    /// connection ended meanwhile.
    pub(crate) fn poll_write(&mut self, cx: &mut std::task::Context<'_>) -> bool {
        self.wire.as_mut().is_some_and(|wire| wire.poll_write(cx))
    }

    /// Whether something is queued on its connection and not yet written.
    pub(crate) fn is_queued(&self) -> bool {
        self.wire.as_ref().is_some_and(|wire| wire.is_queued())
    }
}

impl Drop for TakenWire {
    fn drop(&mut self) {
        let Some(wire) = self.wire.take() else {
            return;
        };
        let mut state = self.node.lock_state();
        let current =
            matches!(state.link, Link::Up { generation, .. } if generation == self.generation);
        if current && state.wire.is_none() {
            state.wire = Some(wire);
        }
    }
}

/// What a connection found its server to be, for the core and for its
/// [`ServerReport`](crate::ServerReport).
struct Seen {
    found: redlock_core::Connected,
    at: std::time::Instant,
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
    /// How many times a connection broke under a request: the driver
    /// tells the core of each break, which asks for a new connection.
    breaks: std::sync::atomic::AtomicU64,
    /// Whether a `NOPERM` was logged at WARN: once per node, since an ACL
    /// user without rights on the waiters' marks meets one on every
    /// release (which the core then sends again without them).
    no_permission_logged: std::sync::atomic::AtomicBool,
    state: Mutex<State>,
    /// The connection of [`send_blocking`](Self::send_blocking), made on
    /// first use: only when a Tokio runtime is gone (or was never there).
    blocking: Mutex<Blocking>,
    /// Set when a blocking release failed to reach the node (down or
    /// paused), so that later ones do not wait for it again; cleared when
    /// the node answers again.
    blocking_gave_up: std::sync::atomic::AtomicBool,
    /// Set in a simulation only: this node's index and the simulation's
    /// connector and RNG ([`Simulation`]).
    simulation: Option<(usize, Simulation)>,
    /// Set by [`close`](Self::close): the client was shut down, and this
    /// node connects no more.
    closed: std::sync::atomic::AtomicBool,
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
    ) -> Self {
        Self {
            name: name.into(),
            client,
            cluster,
            connect_timeout,
            node_timeout,
            breaks: std::sync::atomic::AtomicU64::new(0),
            no_permission_logged: std::sync::atomic::AtomicBool::new(false),
            blocking: Mutex::default(),
            blocking_gave_up: std::sync::atomic::AtomicBool::new(false),
            state: Mutex::new(State {
                link: Link::Down {
                    error: NodeError::new(NodeErrorKind::Connection, "not connected yet"),
                },
                generation: 0,
                seen: None,
                wire: None,
            }),
            simulation: None,
            closed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Closes the node for the client's shutdown, once its driver ended:
    /// its connection is dropped (which ends its wire), and it connects no
    /// more. A request sent from now on fails at
    /// once ([`NodeErrorKind::Connection`]).
    pub(crate) fn close(&self) {
        self.closed
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let mut state = self.lock_state();
        state.link = Link::Down {
            error: NodeError::new(NodeErrorKind::Connection, "the client was shut down"),
        };
        state.wire = None;
    }

    /// The node answered: a blocking release that gave up on it may try
    /// it again.
    pub(crate) fn heard_from(&self) {
        use std::sync::atomic::Ordering;
        if self.blocking_gave_up.load(Ordering::Relaxed) {
            self.blocking_gave_up.store(false, Ordering::Relaxed);
        }
    }

    /// Whether this node is a whole Redis Cluster: each request is routed
    /// on its own, so requests go one by one, never as a pipeline.
    pub(crate) fn is_cluster(&self) -> bool {
        self.cluster.is_some()
    }

    /// How many times a connection broke under a request so far.
    pub(crate) fn breaks(&self) -> u64 {
        self.breaks.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// This node, node `index` of a simulation: connected through its
    /// connector (a plain master only).
    pub(crate) fn simulated(mut self, index: usize, simulation: Simulation) -> Self {
        self.simulation = Some((index, simulation));
        self
    }

    /// A node over `connection`, made elsewhere (a test's in-memory server).
    #[cfg(test)]
    pub(crate) fn over(connection: Plain) -> Arc<Self> {
        let client = redis::Client::open("redis://127.0.0.1:1").expect("a valid URL");
        let node = Arc::new(Self::new(
            "test".to_owned(),
            client,
            None,
            Duration::from_secs(1),
            Duration::from_secs(1),
        ));
        node.set_up(Connected {
            connection: Connection::Plain(connection),
            found: redlock_core::Connected::default(),
            wire: None,
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

    /// Records the outcome of a connection attempt: the eager one made at
    /// build, or one the driver made.
    pub(crate) fn set_link(&self, result: Result<Connected, NodeError>) {
        match result {
            Ok(connection) => self.set_up(connection),
            Err(error) => {
                if let Link::Down { error: last } = &mut self.lock_state().link {
                    *last = error;
                }
            }
        }
    }

    fn set_up(&self, connected: Connected) {
        debug!(node = %self.name, server = %connected.found.facts, "server facts read");
        let mut state = self.lock_state();
        if self.closed.load(std::sync::atomic::Ordering::Relaxed) {
            // Made as the client shut down: dropped.
            return;
        }
        state.generation += 1;
        state.link = Link::Up {
            connection: connected.connection,
            generation: state.generation,
        };
        state.wire = connected.wire;
        state.seen = Some(Seen {
            found: connected.found,
            at: crate::sim::now(),
        });
        drop(state);
    }

    /// The wire of the connection made last, for the client's driver task
    /// to poll; `None` once taken, or where the `redis` crate polls it.
    /// Dropped unfinished (its task ended), it comes back here, for the
    /// next task, while its connection is still the node's.
    pub(crate) fn take_wire(self: &Arc<Self>) -> Option<TakenWire> {
        let state = &mut *self.lock_state();
        let wire = state.wire.take()?;
        Some(TakenWire {
            node: Arc::clone(self),
            generation: state.generation,
            wire: Some(wire),
        })
    }

    /// What the last connection found the server to be, for the core
    /// ([`Client::handle_connected`](redlock_core::Client::handle_connected)).
    pub(crate) fn server(&self) -> redlock_core::Connected {
        let state = self.lock_state();
        state
            .seen
            .as_ref()
            .map(|seen| seen.found.clone())
            .unwrap_or_default()
    }

    /// What the last connection found the server to be.
    pub(crate) fn report(&self) -> crate::ServerReport {
        let state = self.lock_state();
        let seen = state.seen.as_ref();
        let found = seen.map(|seen| &seen.found);
        crate::ServerReport {
            node: self.name.to_string(),
            connected: matches!(state.link, Link::Up { .. }),
            server: found
                .map(|found| found.facts)
                .filter(|facts| facts.version().is_some())
                .map(|facts| facts.to_string()),
            run_ids: found.map(|found| found.run_ids.clone()).unwrap_or_default(),
            uptime: seen.and_then(|seen| Some(seen.found.uptime? + (crate::sim::now() - seen.at))),
            persistence: match seen {
                Some(seen) => match (&seen.found.weak_persistence, seen.found.persistence_read) {
                    (Some(reason), _) => crate::Persistence::Weak(reason.clone()),
                    (None, true) => crate::Persistence::Kept,
                    (None, false) => crate::Persistence::Unknown,
                },
                None => crate::Persistence::Unknown,
            },
            eviction: found.and_then(|found| found.evicting.clone()),
        }
    }

    /// The connection to use and its generation, or the reason there is
    /// none.
    fn connection(&self) -> Result<(Connection, u64), NodeError> {
        match &self.lock_state().link {
            Link::Up {
                connection,
                generation,
            } => Ok((connection.clone(), *generation)),
            Link::Down { error } => Err(Self::down(error)),
        }
    }

    /// The error of a request to this node while it has no connection.
    fn not_connected(&self) -> NodeError {
        match &self.lock_state().link {
            Link::Down { error } => Self::down(error),
            Link::Up { .. } => NodeError::new(
                NodeErrorKind::Connection,
                "the connection ended under the request",
            ),
        }
    }

    fn down(error: &NodeError) -> NodeError {
        NodeError::new(
            error.kind,
            format!("not connected; last error: {}", error.detail),
        )
    }

    /// Drops the connection of `generation` after an error that leaves it
    /// unusable; the driver tells the core, which asks for a new one.
    fn connection_failed(&self, generation: u64, error: &NodeError) {
        let mut state = self.lock_state();
        if matches!(state.link, Link::Up { generation: g, .. } if g == generation) {
            // A master down: what an operator acts on (and `connected` when
            // it is back).
            info!(node = %self.name, error = %error, "connection lost; reconnecting");
            state.link = Link::Down {
                error: error.clone(),
            };
            self.breaks
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// How many requests a TLS connection (the `redis` crate's) queues before a
/// sender has to wait for room; our own connections ([`Plain`]) make no
/// sender wait. Every request must be in its node's queue the moment the core
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

/// How every TLS connection to a plain master is set up.
pub(crate) fn connection_config() -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        // The core applies its own per-node timeout to every request.
        .set_response_timeout(None)
        .set_pipeline_buffer_size(CONNECTION_QUEUE)
}
