//! The quorum: N simulated masters, the clients wired to them, and a
//! handle on each node.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::FutureExt;
use redlock_tokio::sim::Simulation;
use tokio::io::DuplexStream;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::history::History;
use crate::server::{Blocking, Server, Shared, Tap};

/// N simulated masters in memory, and the clients wired to them. Cheap to
/// clone: every clone is the same quorum.
#[derive(Clone)]
pub struct Quorum {
    inner: Arc<Inner>,
}

struct Inner {
    seed: u64,
    nodes: Vec<Arc<Server>>,
    shared: Arc<Shared>,
    clients: AtomicUsize,
}

impl std::fmt::Debug for Quorum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Quorum")
            .field("nodes", &self.inner.nodes.len())
            .field("seed", &self.inner.seed)
            .finish_non_exhaustive()
    }
}

/// How to make a [`Quorum`]: [`Quorum::builder`].
#[derive(Clone, Default)]
pub struct QuorumBuilder {
    nodes: usize,
    seed: u64,
    valkey: bool,
    buffers: Vec<usize>,
    tap: Option<Arc<dyn Tap>>,
}

impl std::fmt::Debug for QuorumBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuorumBuilder")
            .field("nodes", &self.nodes)
            .field("seed", &self.seed)
            .field("valkey", &self.valkey)
            .finish_non_exhaustive()
    }
}

/// The in-memory stream's buffer each way, in bytes.
const BUFFER: usize = 64 * 1024;

impl QuorumBuilder {
    /// How many nodes (default 3). Zero nodes make a quorum whose clients
    /// fail to build ([`redlock_tokio::Error::Config`]).
    #[must_use]
    pub fn nodes(mut self, nodes: usize) -> Self {
        self.nodes = nodes;
        self
    }

    /// The seed of every random choice: lock values, retry jitter, the
    /// nodes' own draws (default 0). The same seed and the same test give
    /// the same run.
    #[must_use]
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Whether the nodes answer as Valkey 9.1.2 (with `DELIFEQ` and
    /// `SET ... IFEQ`, which a client with native commands uses) instead of
    /// Redis 7.0.15 (default false).
    #[must_use]
    pub fn valkey(mut self, on: bool) -> Self {
        self.valkey = on;
        self
    }

    /// Per node, the in-memory stream's buffer each way (the project's
    /// client sim: small ones make a paused node push back).
    #[doc(hidden)]
    #[must_use]
    pub fn buffers(mut self, bytes: Vec<usize>) -> Self {
        self.buffers = bytes;
        self
    }

    /// Where every command goes as it runs (the project's client sim).
    #[doc(hidden)]
    #[must_use]
    pub fn tap(mut self, tap: Arc<dyn Tap>) -> Self {
        self.tap = Some(tap);
        self
    }

    /// The quorum, its clock starting now (on the runtime's clock: make it
    /// inside the test).
    pub fn build(self) -> Quorum {
        let shared = Arc::new(Shared {
            start: Instant::now(),
            events: Mutex::new(Vec::new()),
            tap: self.tap,
        });
        let nodes = (0..self.nodes)
            .map(|i| {
                let buffer = self.buffers.get(i).copied().unwrap_or(BUFFER);
                Server::new(i, self.seed, buffer, self.valkey, Arc::clone(&shared))
            })
            .collect();
        Quorum {
            inner: Arc::new(Inner {
                seed: self.seed,
                nodes,
                shared,
                clients: AtomicUsize::new(0),
            }),
        }
    }
}

impl Quorum {
    /// `nodes` Redis masters, seed 0.
    pub fn new(nodes: usize) -> Self {
        Self::builder().nodes(nodes).build()
    }

    /// A quorum of 3 nodes, seed 0, as Redis, to change.
    pub fn builder() -> QuorumBuilder {
        QuorumBuilder {
            nodes: 3,
            ..QuorumBuilder::default()
        }
    }

    /// A client builder wired to the nodes: set the TTL and options as
    /// usual, then [`build`](redlock_tokio::Builder::build) it. Each
    /// client has its own connections and its own seeded randomness.
    pub fn client(&self) -> redlock_tokio::Builder {
        let client = self.inner.clients.fetch_add(1, Ordering::Relaxed);
        redlock_tokio::Redlock::builder(self.urls()).simulation(self.simulation(client))
    }

    /// The number of nodes.
    pub fn len(&self) -> usize {
        self.inner.nodes.len()
    }

    /// Whether the quorum has no node.
    pub fn is_empty(&self) -> bool {
        self.inner.nodes.is_empty()
    }

    /// The handle on node `index` (from 0, in the clients' order).
    ///
    /// # Panics
    ///
    /// If there is no such node, as indexing a slice out of bounds does.
    pub fn node(&self, index: usize) -> Node {
        match self.inner.nodes.get(index) {
            Some(server) => Node {
                server: Arc::clone(server),
                index,
            },
            None => panic!(
                "node {index} of a quorum of {} nodes",
                self.inner.nodes.len()
            ),
        }
    }

    /// Every node's handle, in order.
    pub fn nodes(&self) -> Vec<Node> {
        (0..self.len()).map(|i| self.node(i)).collect()
    }

    /// Runs `fault` at `at` (virtual time since the quorum was made; at
    /// once if that is past), on a task of the current runtime:
    /// `quorum.at(Duration::from_secs(5), |q| q.node(0).pause())`.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime, as [`tokio::spawn`] does.
    pub fn at<F>(&self, at: Duration, fault: F) -> JoinHandle<()>
    where
        F: FnOnce(&Quorum) + Send + 'static,
    {
        let quorum = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(quorum.inner.shared.start + at).await;
            fault(&quorum);
        })
    }

    /// Virtual time since the quorum was made.
    pub fn elapsed(&self) -> Duration {
        Instant::now() - self.inner.shared.start
    }

    /// An instant of the runtime's clock (such as a guard's
    /// `acquired_at()` or `valid_until()`) as virtual time since the quorum
    /// was made, the time of the [`History`] (zero before it).
    pub fn elapsed_at(&self, instant: std::time::Instant) -> Duration {
        Instant::from_std(instant).saturating_duration_since(self.inner.shared.start)
    }

    /// Every grant, extension and release the nodes saw so far.
    pub fn history(&self) -> History {
        History {
            nodes: self.len(),
            events: self
                .inner
                .shared
                .events
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        }
    }

    /// The URLs the clients are given (one per node, never dialled).
    #[doc(hidden)]
    pub fn urls(&self) -> Vec<String> {
        (0..self.len())
            .map(|i| format!("redis://sim-master-{i}:6379"))
            .collect()
    }

    /// The simulation hooks of the `client`-th client: its connections to
    /// these nodes, its randomness from the quorum's seed.
    #[doc(hidden)]
    pub fn simulation(&self, client: usize) -> Simulation {
        let connecting = self.inner.nodes.clone();
        let blocking = self.inner.nodes.clone();
        Simulation::new(self.inner.seed ^ (client as u64 + 1) << 56, move |i| {
            let server = connecting.get(i).cloned();
            async move {
                let stream = accept(server.as_ref(), i)?;
                Ok(Box::new(stream) as Box<dyn redlock_tokio::sim::Stream>)
            }
            .boxed()
        })
        .connect_blocking(move |i| {
            let server = blocking
                .get(i)
                .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such node"))?;
            Ok(Box::new(Blocking(Arc::clone(server))) as Box<dyn redis::ConnectionLike + Send>)
        })
    }
}

fn accept(server: Option<&Arc<Server>>, i: usize) -> io::Result<DuplexStream> {
    match server {
        Some(server) => server.accept(),
        None => Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no node {i}"),
        )),
    }
}

/// One time-to-live key a node holds, or a fencing counter.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeKey {
    /// The key (a lock's is its name; a semaphore's slots, a fair lock's
    /// queue, a waiter's mark and a fencing counter are its name, a NUL
    /// byte and a suffix).
    pub key: Vec<u8>,
    /// Its value, if it is a string (a lock value, a counter).
    pub value: Option<Vec<u8>>,
    /// The time it has left on the node's clock; `None`: it never expires
    /// (a fencing counter).
    pub ttl: Option<Duration>,
}

impl NodeKey {
    /// The value as a number (a fencing counter), if it is one.
    pub fn counter(&self) -> Option<u64> {
        std::str::from_utf8(self.value.as_deref()?)
            .ok()?
            .parse()
            .ok()
    }
}

/// A handle on one node of a [`Quorum`]: its faults, and what it holds.
/// Cheap to clone.
#[derive(Clone)]
pub struct Node {
    server: Arc<Server>,
    index: usize,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node").field("index", &self.index).finish()
    }
}

impl Node {
    /// Its index in the quorum.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Stops the node as `SIGSTOP` does: it reads, runs and answers
    /// nothing, its connections stay open and its keys go on expiring,
    /// until [`resume`](Self::resume).
    pub fn pause(&self) {
        self.server.control(|controls| controls.paused = true);
    }

    /// Lets a paused node go on (`SIGCONT`): it works through what it was
    /// sent meanwhile.
    pub fn resume(&self) {
        self.server.control(|controls| controls.paused = false);
    }

    /// Takes the node down: its connections close, new ones are refused,
    /// until [`restart`](Self::restart) (its data is kept, as on a disk).
    pub fn kill(&self) {
        self.server.kill();
    }

    /// Restarts the node with its data (a clean restart with persistence):
    /// its connections close, it refuses new ones for a moment (30 ms),
    /// then serves again, unpaused.
    pub fn restart(&self) {
        self.server.restart(false);
    }

    /// Restarts the node without its data (no persistence): every lock it
    /// held is forgotten, outside Redlock's assumptions (see the guide's
    /// `docs/guarantees.md`).
    pub fn restart_empty(&self) {
        self.server.restart(true);
    }

    /// Slows every answer: `latency` each way, per command (default zero).
    pub fn latency(&self, latency: Duration) {
        self.server.control(|controls| controls.latency = latency);
    }

    /// Loses every request sent to the node while on: read and never run
    /// nor answered (the connection stays open).
    pub fn drop_requests(&self, on: bool) {
        self.server.control(|controls| controls.drop_requests = on);
    }

    /// Loses every reply while on: each request runs, its answer never
    /// arrives.
    pub fn drop_replies(&self, on: bool) {
        self.server.control(|controls| controls.drop_replies = on);
    }

    /// Moves the node's clock `by` ahead at once: its keys expire that much
    /// earlier (a clock jump, outside Redlock's assumptions).
    pub fn step_clock(&self, by: Duration) {
        self.server
            .control(|controls| controls.clock_step += by.as_secs_f64() * 1e6);
    }

    /// While on, every lock command is answered with a reply of the wrong
    /// shape (the client reads it as a node error).
    pub fn answer_garbage(&self, on: bool) {
        self.server.control(|controls| controls.garbage = on);
    }

    /// While on, every command is answered `NOAUTH Authentication
    /// required.`, as a server whose password the client lacks.
    pub fn refuse_auth(&self, on: bool) {
        self.server.control(|controls| controls.refuse_auth = on);
    }

    /// Puts a hash at `key` (no expiry), as another program's data at a
    /// name: a lock asked for there gets the error a real server gives
    /// (`WRONGTYPE`, [`AcquireError::WrongType`](redlock_core::AcquireError::WrongType)
    /// once it rules out a quorum), never retried, and nothing is left held.
    pub fn put_hash(&self, key: impl AsRef<[u8]>) {
        self.server.put_hash(key.as_ref());
    }

    /// Every key the node holds now, sorted: lock keys with their value and
    /// time left, and fencing counters (no time left).
    pub fn keys(&self) -> Vec<NodeKey> {
        self.server.keys()
    }

    /// The key `key`, if the node holds it now.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Option<NodeKey> {
        let key = key.as_ref();
        self.keys().into_iter().find(|entry| entry.key == key)
    }

    /// Up to this much more latency each way, drawn per command.
    #[doc(hidden)]
    pub fn jitter(&self, jitter: Duration) {
        self.server.control(|controls| controls.jitter = jitter);
    }

    /// Per thousand commands, how many drop their connection: half before
    /// the command runs, half after it ran.
    #[doc(hidden)]
    pub fn drop_connections(&self, per_mille: u32) {
        self.server
            .control(|controls| controls.drops_per_mille = per_mille);
    }

    /// A pause from `from` (since the quorum was made) for `length`.
    #[doc(hidden)]
    pub fn pause_between(&self, from: Duration, length: Duration) {
        self.server
            .control(|controls| controls.windows.push((from, length)));
    }

    /// When the last [`pause_between`](Self::pause_between) ends.
    #[doc(hidden)]
    pub fn last_pause_end(&self) -> Duration {
        self.server.last_pause_end()
    }

    /// An empty restart at `at`, once [`restart_when_due`](Self::restart_when_due)
    /// runs; connections are refused from `at` for a moment.
    #[doc(hidden)]
    pub fn restart_empty_at(&self, at: Duration) {
        self.server
            .control(|controls| controls.restart_at = Some(at));
    }

    /// Runs the scheduled empty restart, if any.
    #[doc(hidden)]
    pub fn restart_when_due(&self) -> impl Future<Output = ()> + Send + 'static {
        Arc::clone(&self.server).restart_when_due()
    }

    /// Whether a key left here may be one whose release never reached it.
    #[doc(hidden)]
    pub fn missed_requests(&self) -> bool {
        self.server.missed_requests()
    }

    /// The keys alive now that expire.
    #[doc(hidden)]
    pub fn live_keys(&self) -> Vec<Vec<u8>> {
        self.server.live_keys()
    }

    /// A connection of one's own to the node: the client's end of an
    /// in-memory stream it serves (the project's driver tests).
    #[doc(hidden)]
    pub fn connect(&self) -> io::Result<DuplexStream> {
        self.server.accept()
    }

    /// Stops the node's clock: the runtime is about to be dropped.
    #[doc(hidden)]
    pub fn freeze(&self) {
        self.server.freeze();
    }
}
