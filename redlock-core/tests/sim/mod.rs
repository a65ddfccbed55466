//! A deterministic simulation of N Redis masters and several Redlock clients.
//!
//! Everything runs in virtual time: a seeded RNG decides latencies, losses,
//! pauses, crashes and how long each client holds its lock. Nodes expire keys in
//! their own (drifting) time and run the same scripts the real nodes run,
//! re-implemented here from the contracts in `redlock_core::scripts`. Links keep
//! FIFO order per (client, node), like one TCP connection.
//!
//! Every granted lock is recorded as a hold: from the moment the client learned
//! it holds the lock to the earlier of its release and the end of its validity
//! (true time). The checker then reports every pair of overlapping holds of one
//! key: with faults inside Redlock's model there must be none.

#![allow(dead_code, unreachable_pub, clippy::large_enum_variant)]

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "../../../redlock-testkit/src/model.rs"]
mod redis;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use redlock_core::native::{NodeFacts, Server, Version};
use redlock_core::{
    AcquireEvent, Attempts, Client, Config, Connected, ElectionTiming, Form, KeepAlive,
    KeptLockEvent, Key, LeadershipLoss, Lock, LockSpec, LossReason, NodeError, NodeErrorKind,
    NodeId, OpEvent, OpId, Operation, Output, Reply, Request, RequestId, RetryConfig, Settings,
    Term, TermEvent,
};

/// What a simulated run looks like.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub nodes: usize,
    pub clients: usize,
    pub keys: usize,
    pub ttl: Duration,
    /// Simulated time during which clients start new acquisitions.
    pub duration: Duration,
    /// One-way latency, uniform in this range.
    pub latency: (Duration, Duration),
    /// Chance that a request, or separately its reply, is lost.
    pub loss: f64,
    /// Chance that a reply is delivered twice (the copy a little later).
    pub duplicate: f64,
    /// Each node's clock runs at `1 + r` with `|r| <= clock_rate_bound`.
    pub clock_rate_bound: f64,
    /// Node crashes per run (each at a random time on a random node).
    pub crashes: usize,
    /// How long a crashed node stays down before it restarts, empty.
    pub restart_delay: Duration,
    /// Node pauses per run (SIGSTOP-like: requests wait, clock goes on).
    pub pauses: usize,
    pub pause_length: (Duration, Duration),
    /// Clock jumps forward per run (out of model when large).
    pub clock_jumps: usize,
    pub clock_jump: Duration,
    /// Whether holders extend their lock when they hold it longer than its validity.
    pub extend: bool,
    /// Holders keep their lock alive on the core's schedule
    /// ([`KeepAliveSchedule`]) instead of extending at half the TTL.
    pub keep_alive: Option<KeepAlive>,
    /// Whether clients retry (`lock`) or try once (`try_lock`).
    pub retry: bool,
    /// How long a holder plans to hold, as a share of the TTL (uniform).
    pub hold_share: (f64, f64),
    /// Pause between a client's operations.
    pub think: (Duration, Duration),
    /// Whether clients take fenced locks (with fencing tokens).
    pub fenced: bool,
    /// Holders of a fenced exclusive lock lead: the core's term renews it
    /// (the default election timings for the TTL), their hold ends at its
    /// loss instant, and when done, half of them resign (the release inside
    /// the term) and half release.
    pub elections: bool,
    /// Whether a crashed node keeps its data (AOF with fsync always).
    pub persistent: bool,
    /// A proxy in front of each master hides its restarts (out of the
    /// model): a crash breaks no client's connection, and the client never
    /// reads a new run id.
    pub behind_proxy: bool,
    /// Which kinds of lock the clients take.
    pub kinds: Kinds,
    /// Whether releases notify waiting clients (pub/sub), which then try
    /// again at once.
    pub notices: bool,
    /// What each node's server is, which decides whether the core sends it
    /// plain commands or scripts ([`Request::call`]).
    pub servers: Servers,
}

/// The servers of a run's nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Servers {
    /// Unknown servers: every request is a script.
    Scripted,
    /// Node `i` is scripted (`i % 3 == 0`), Redis 7.0.15 (`SET NX PX GET`
    /// acquires, `i % 3 == 1`) or Valkey 9.1.2 (`SET NX PX GET` acquires
    /// and `DELIFEQ` withdraws, `i % 3 == 2`): old and new servers mixed in
    /// every quorum.
    Mixed,
    /// Every node is Valkey 9.1.2.
    Valkey,
}

impl Servers {
    fn facts(self, node: usize) -> NodeFacts {
        match (self, node % 3) {
            (Servers::Scripted, _) | (Servers::Mixed, 0) => NodeFacts::default(),
            (Servers::Mixed, 1) => NodeFacts::new(Server::Redis, Version(7, 0, 15)),
            (Servers::Mixed, _) | (Servers::Valkey, _) => {
                NodeFacts::new(Server::Valkey, Version(9, 1, 2))
            }
        }
    }
}

/// The kinds of lock clients take in a run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kinds {
    /// Exclusive locks (fenced when `SimConfig::fenced`).
    Exclusive,
    /// Read locks with this probability, write locks otherwise.
    ReadWrite { read_share: f64 },
    /// Reentrant locks; client `i` is owner `i % owners`.
    Reentrant { owners: usize },
    /// Multi-resource locks over 1..=3 of the keys, mixed with single ones.
    Multi,
    /// One permit of a semaphore of `permits` on each key: holds of one key
    /// share the group [`PERMITS`], so the test counts them.
    Semaphore { permits: u32 },
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            nodes: 5,
            clients: 4,
            keys: 1,
            ttl: Duration::from_millis(200),
            duration: Duration::from_secs(3),
            latency: (Duration::from_micros(100), Duration::from_millis(3)),
            loss: 0.02,
            duplicate: 0.0,
            clock_rate_bound: 0.004,
            crashes: 1,
            restart_delay: Duration::from_millis(500),
            pauses: 2,
            pause_length: (Duration::from_millis(5), Duration::from_millis(150)),
            clock_jumps: 0,
            clock_jump: Duration::ZERO,
            extend: true,
            keep_alive: None,
            retry: true,
            hold_share: (0.05, 1.6),
            think: (Duration::ZERO, Duration::from_millis(20)),
            fenced: false,
            elections: false,
            persistent: false,
            behind_proxy: false,
            kinds: Kinds::Exclusive,
            notices: true,
            servers: Servers::Mixed,
        }
    }
}

/// One granted lock: when its holder held it, in true time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hold {
    pub client: usize,
    pub key: usize,
    pub start: Duration,
    pub end: Duration,
    pub token: Option<u64>,
    /// A semaphore's permit: the slot held (0 for every other lock).
    pub slot: u32,
    /// Holds of one group may overlap (readers; one reentrant owner);
    /// `None` excludes everyone.
    pub group: Option<u64>,
}

/// The group of every reader: readers may overlap each other.
pub const READERS: u64 = u64::MAX;

/// The group of every semaphore holder: up to `permits` may overlap.
pub const PERMITS: u64 = u64::MAX - 1;

/// What a run produced.
#[derive(Debug, Default)]
pub struct Outcome {
    pub holds: Vec<Hold>,
    /// Requests the nodes ran as plain commands (the rest ran scripts).
    pub native_commands: usize,
    pub acquire_failures: usize,
    pub extensions: usize,
    pub failed_extensions: usize,
    pub releases: usize,
    /// Keep-alive schedules that reached their extension limit.
    pub limits_reached: usize,
    /// Locks the keep-alive schedule gave up, by extension limit and by
    /// failed extension.
    pub lost_at_limit: usize,
    pub lost_by_failure: usize,
    /// A leader's renewals; its resignations that freed the name, and
    /// those that did not (released then).
    pub renewals: usize,
    pub resigned: usize,
    pub resigns_failed: usize,
    /// Releases, withdraws and leaves the client sent again after their
    /// connection broke (a node down refuses it): what the core owes a
    /// node.
    pub resends: usize,
    /// Release notices delivered to a client subscribed to their channel.
    pub notices: usize,
    /// Connections made again after a crash broke them, and attempts that
    /// found the node still down (each followed by the core's backoff).
    pub reconnects: usize,
    pub failed_connects: usize,
    /// Exclusive locks handed out whose validity outlasts their keys on a
    /// quorum of nodes in true time (a node down counts as covering: it
    /// grants nothing), as (client, when).
    pub uncovered: Vec<(usize, Duration)>,
    /// Releases that reported the lock free while our value was still on
    /// a quorum of nodes, as (client, when).
    pub false_frees: Vec<(usize, Duration)>,
}

impl Outcome {
    /// Pairs of holds of one key by different acquisitions whose windows overlap.
    pub fn overlaps(&self) -> Vec<(Hold, Hold)> {
        check_overlaps(&self.holds)
    }

    /// Pairs of holds of one key where the later one (by hand-out time) does
    /// not have a strictly larger fencing token.
    pub fn token_regressions(&self) -> Vec<(Hold, Hold)> {
        let mut by_key: HashMap<(usize, u32), Vec<Hold>> = HashMap::new();
        for hold in &self.holds {
            by_key.entry((hold.key, hold.slot)).or_default().push(*hold);
        }
        let mut found = Vec::new();
        for (_, mut list) in by_key {
            list.sort_by_key(|h| h.start);
            let mut highest: Option<Hold> = None;
            for hold in list {
                let token = hold.token.expect("fenced holds carry a token");
                if let Some(prev) = highest {
                    if token <= prev.token.unwrap_or(0) {
                        found.push((prev, hold));
                    }
                    if token > prev.token.unwrap_or(0) {
                        highest = Some(hold);
                    }
                } else {
                    highest = Some(hold);
                }
            }
        }
        found
    }
}

/// The slot of a semaphore's permit key (`{<key>}\0permit<i>`), 0 for
/// any other key.
fn permit_slot(key: &[u8]) -> u32 {
    let marker = b"\0permit";
    key.windows(marker.len())
        .rposition(|window| window == marker)
        .and_then(|at| {
            std::str::from_utf8(&key[at + marker.len()..])
                .ok()?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// The checker: every pair of holds of one key whose windows overlap,
/// unless both are in one group, found by the test kit's checker
/// (`redlock_testkit::overlaps`, the one users run on their own histories).
/// A group of readers or of a semaphore's holders is shared there; a
/// reentrant owner's holds are one holder's.
pub fn check_overlaps(holds: &[Hold]) -> Vec<(Hold, Hold)> {
    let windows: Vec<redlock_testkit::Hold> = holds
        .iter()
        .enumerate()
        .map(|(i, hold)| redlock_testkit::Hold {
            key: hold.key.to_string().into_bytes(),
            holder: match hold.group {
                Some(owner) if owner != READERS && owner != PERMITS => {
                    format!("owner {owner}").into_bytes()
                }
                _ => format!("hold {i}").into_bytes(),
            },
            from: hold.start,
            until: hold.end,
            shared: matches!(hold.group, Some(READERS | PERMITS)),
        })
        .collect();
    let back = |window: &redlock_testkit::Hold| {
        holds[windows
            .iter()
            .position(|w| w == window)
            .expect("a window of ours")]
    };
    redlock_testkit::overlaps(&windows)
        .iter()
        .map(|overlap| (back(&overlap.first), back(&overlap.second)))
        .collect()
}

#[derive(Debug)]
enum Event {
    /// A request reaches its node.
    Deliver {
        client: usize,
        id: RequestId,
        request: Request,
        drop_reply: bool,
    },
    /// A client's connection sends the request that follows an answer it
    /// read ([`Request::follow_up`]), before handing anyone the answer.
    FollowUp {
        client: usize,
        id: RequestId,
        request: Request,
    },
    /// A reply reaches its client.
    Answer {
        client: usize,
        id: RequestId,
        reply: Reply,
    },
    /// A release notice (pub/sub message on `channel`) reaches a client.
    Notice {
        client: usize,
        node: usize,
        channel: Vec<u8>,
    },
    /// A client's pub/sub connection to a node is made, or refused.
    NoticeLink {
        client: usize,
        node: usize,
        up: bool,
    },
    /// A node reads a client's subscription change (and confirms it).
    Subscription {
        client: usize,
        node: usize,
        channels: Vec<Key>,
        subscribe: bool,
    },
    /// A client's timer (stale when `generation` is old).
    Timer {
        client: usize,
        generation: u64,
    },
    /// A client's connection attempt to a node is answered, one round
    /// trip after it was asked for.
    Link {
        client: usize,
        node: usize,
    },
    Crash {
        node: usize,
    },
    Restart {
        node: usize,
    },
    Pause {
        node: usize,
        until: Duration,
    },
    Resume {
        node: usize,
    },
    Jump {
        node: usize,
        by: Duration,
    },
}

struct Scheduled {
    at: Duration,
    seq: u64,
    event: Event,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

struct Node {
    rate: f64,
    jump: f64,
    up: bool,
    paused: bool,
    waiting: VecDeque<(usize, RequestId, Request, bool)>,
    store: redis::Store,
    facts: NodeFacts,
    /// Restarts so far: the server's run id changes with each.
    runs: u64,
}

impl Node {
    /// What a client's connection finds its server to be: its run id,
    /// which changes with each restart, and its facts.
    fn found(&self, index: usize) -> Connected {
        Connected {
            run_ids: vec![format!("node-{index}-run-{}", self.runs)],
            facts: self.facts,
            ..Connected::default()
        }
    }

    fn clock(&self, now: Duration) -> f64 {
        now.as_micros() as f64 * (1.0 + self.rate) + self.jump
    }

    /// Runs one request the way this node's server would: the plain
    /// command the client picked for it by the facts it was given
    /// (`handle_connected`), or the script (from the contracts in
    /// `scripts`). Returns the reply marked with what was run.
    fn run(&mut self, now: Duration, request: &Request) -> Reply {
        let clock = self.clock(now);
        let response = match request.form {
            Form::Native(native) => self.store.run_native(clock, request, native),
            Form::Digest | Form::InFull => self.store.run(clock, request),
        };
        Reply::to(request, Ok(response))
    }
}

/// What a client locks: resource indexes, and the group its holds share.
#[derive(Clone, Debug)]
struct Target {
    keys: Vec<usize>,
    group: Option<u64>,
}

enum ClientState {
    /// Until this instant, then a new acquisition.
    Idle {
        until: Duration,
    },
    Acquiring {
        target: Target,
        op: OpId,
    },
    Holding {
        lock: Lock,
        holds: Vec<usize>,
        release_at: Duration,
        /// An extension by hand in flight (`SimConfig::extend`).
        extension: Option<OpId>,
        /// No extension by hand before this instant: one per-node timeout
        /// after a failed one (a node the client knows slow fails it at
        /// once, and the holder would try again in the same instant).
        extend_after: Duration,
        /// The core's keep-alive, when `SimConfig::keep_alive`, or the
        /// leader's term, when `SimConfig::elections`.
        keep_alive: Option<OpId>,
        /// `keep_alive` is a term; it resigns once `resigning`.
        term: bool,
        resigning: bool,
    },
    Releasing {
        op: OpId,
        /// The lock's key and our value, to check the report's claim.
        key: Vec<u8>,
        value: Vec<u8>,
    },
}

/// One simulated process: the core's whole `Client` and what it is doing.
struct SimClient {
    core: Client<StdRng>,
    state: ClientState,
    generation: u64,
    /// Last delivery time per node link, to keep links FIFO.
    link_out: Vec<Duration>,
    link_in: Vec<Duration>,
    /// Per node: whether the pub/sub link is up, and the channels it is
    /// subscribed to (effective from the moment the node read the
    /// subscription).
    notices_up: Vec<bool>,
    channels: Vec<HashSet<Vec<u8>>>,
    /// What must arrive that the client sent, to count what it sends again.
    sent: HashSet<(NodeId, redlock_core::RoundId, redlock_core::Command)>,
    /// Per node: the server run its connection was opened to, while it has
    /// one; a crash breaks it, and a restarted server is another run.
    conn: Vec<Option<u64>>,
}

/// The simulated world.
pub struct World {
    cfg: SimConfig,
    rng: StdRng,
    base: Instant,
    now: Duration,
    seq: u64,
    queue: BinaryHeap<Reverse<Scheduled>>,
    nodes: Vec<Node>,
    clients: Vec<SimClient>,
    settings: Arc<Settings>,
    outcome: Outcome,
    /// Events handled so far.
    events: u64,
}

/// More events than any run of the tests handles (about 10,000 for the
/// default run).
const MAX_EVENTS: u64 = 20_000_000;

/// Settings for a simulated cluster of `nodes` with this TTL.
pub fn settings(nodes: usize, ttl: Duration, node_timeout: Duration) -> Arc<Settings> {
    let config = Config::new((0..nodes).map(|i| format!("sim-{i}")))
        // The simulations cover every N, even ones included.
        .allow_even_nodes(true)
        .ttl(ttl)
        .node_timeout(node_timeout)
        .retry(
            RetryConfig::default()
                .count(3)
                .delay(Duration::from_millis(5))
                .jitter(Duration::from_millis(30)),
        );
    Arc::new(config.validate().expect("valid simulation settings"))
}

/// Runs one seeded schedule to the end and returns what happened.
pub fn run(seed: u64, cfg: &SimConfig) -> Outcome {
    let mut world = World::new(seed, cfg.clone());
    world.run();
    world.outcome
}

impl World {
    fn new(seed: u64, cfg: SimConfig) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let nodes = (0..cfg.nodes)
            .map(|i| Node {
                facts: cfg.servers.facts(i),
                rate: if cfg.clock_rate_bound > 0.0 {
                    rng.random_range(-cfg.clock_rate_bound..=cfg.clock_rate_bound)
                } else {
                    0.0
                },
                jump: 0.0,
                up: true,
                paused: false,
                waiting: VecDeque::new(),
                store: redis::Store::default(),
                runs: 0,
            })
            .collect();
        // A per-node timeout well above the worst round trip, far below the TTL.
        let node_timeout = (cfg.latency.1 * 3).min(cfg.ttl / 4);
        let settings = settings(cfg.nodes, cfg.ttl, node_timeout);
        let clients = (0..cfg.clients)
            .map(|_| SimClient {
                core: Client::new(Arc::clone(&settings), StdRng::seed_from_u64(rng.random())),
                state: ClientState::Idle {
                    until: Duration::ZERO,
                },
                generation: 0,
                link_out: vec![Duration::ZERO; cfg.nodes],
                link_in: vec![Duration::ZERO; cfg.nodes],
                notices_up: vec![false; cfg.nodes],
                channels: vec![HashSet::new(); cfg.nodes],
                sent: HashSet::new(),
                conn: vec![Some(0); cfg.nodes],
            })
            .collect();
        let mut world = Self {
            rng,
            base: Instant::now(),
            now: Duration::ZERO,
            seq: 0,
            queue: BinaryHeap::new(),
            nodes,
            clients,
            settings,
            outcome: Outcome::default(),
            events: 0,
            cfg,
        };
        world.schedule_faults();
        // Every client connected at the start, knowing each server's run.
        let start = world.instant(Duration::ZERO);
        for c in &mut world.clients {
            for (index, node) in world.nodes.iter().enumerate() {
                c.core
                    .handle_connected(NodeId(index), &node.found(index), start);
            }
        }
        for client in 0..world.clients.len() {
            let start = world.uniform(world.cfg.think);
            world.clients[client].state = ClientState::Idle { until: start };
            world.arm(client, start);
        }
        world
    }

    fn uniform(&mut self, (low, high): (Duration, Duration)) -> Duration {
        if high <= low {
            return low;
        }
        Duration::from_micros(
            self.rng
                .random_range(low.as_micros() as u64..=high.as_micros() as u64),
        )
    }

    fn push(&mut self, at: Duration, event: Event) {
        self.seq += 1;
        self.queue.push(Reverse(Scheduled {
            at,
            seq: self.seq,
            event,
        }));
    }

    fn instant(&self, at: Duration) -> Instant {
        self.base + at
    }

    fn since_base(&self, at: Instant) -> Duration {
        at.saturating_duration_since(self.base)
    }

    fn schedule_faults(&mut self) {
        let span = (Duration::ZERO, self.cfg.duration);
        for _ in 0..self.cfg.crashes {
            let at = self.uniform(span);
            let node = self.rng.random_range(0..self.cfg.nodes);
            // The restart is scheduled when the crash happens (a crash of a
            // node that is already down does nothing).
            self.push(at, Event::Crash { node });
        }
        for _ in 0..self.cfg.pauses {
            let at = self.uniform(span);
            let node = self.rng.random_range(0..self.cfg.nodes);
            let length = self.uniform(self.cfg.pause_length);
            self.push(
                at,
                Event::Pause {
                    node,
                    until: at + length,
                },
            );
        }
        for _ in 0..self.cfg.clock_jumps {
            let at = self.uniform(span);
            let node = self.rng.random_range(0..self.cfg.nodes);
            let by = self.cfg.clock_jump;
            self.push(at, Event::Jump { node, by });
        }
    }

    /// Sets the client's single timer to `at` (earlier timers become stale).
    fn arm(&mut self, client: usize, at: Duration) {
        let c = &mut self.clients[client];
        c.generation += 1;
        let generation = c.generation;
        self.push(at, Event::Timer { client, generation });
    }

    fn run(&mut self) {
        // Bounded: the horizon leaves time for the last holds and releases.
        let horizon = self.cfg.duration + self.cfg.ttl * 4 + Duration::from_secs(1);
        while let Some(Reverse(next)) = self.queue.pop() {
            if next.at > horizon {
                break;
            }
            self.now = next.at;
            // Bounded in count too: a client that re-arms its timer at the
            // same instant forever would hold virtual time still.
            self.events += 1;
            assert!(
                self.events < MAX_EVENTS,
                "{MAX_EVENTS} events by {:?}: time stands still at {:?}",
                self.now,
                next.event
            );
            self.handle(next.event);
        }
        // Close holds still open at the horizon at their validity end (already set).
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Deliver {
                client,
                id,
                request,
                drop_reply,
            } => self.deliver(client, id, request, drop_reply),
            Event::FollowUp {
                client,
                id,
                request,
            } => self.send(client, id, request),
            Event::Answer { client, id, reply } => {
                let now = self.instant(self.now);
                self.clients[client].core.handle_reply(id, reply, now);
                self.pump(client);
            }
            Event::Notice {
                client,
                node,
                channel,
            } => {
                self.outcome.notices += 1;
                let now = self.instant(self.now);
                self.clients[client]
                    .core
                    .handle_notice(NodeId(node), &channel, now);
                self.pump(client);
            }
            Event::NoticeLink { client, node, up } => {
                let now = self.instant(self.now);
                let c = &mut self.clients[client];
                if up && self.nodes[node].up {
                    c.notices_up[node] = true;
                    c.core.handle_notices_connected(NodeId(node), now);
                } else {
                    c.core.handle_notices_lost(NodeId(node), now);
                }
                self.pump(client);
            }
            Event::Subscription {
                client,
                node,
                channels,
                subscribe,
            } => {
                let now = self.instant(self.now);
                let c = &mut self.clients[client];
                if !c.notices_up[node] {
                    // The link broke meanwhile; the client was told.
                    return;
                }
                for channel in channels {
                    let channel = channel.as_bytes().to_vec();
                    if subscribe {
                        c.channels[node].insert(channel);
                    } else {
                        c.channels[node].remove(&channel);
                    }
                }
                if subscribe {
                    c.core.handle_subscribed(NodeId(node), now);
                } else {
                    c.core.handle_unsubscribed(NodeId(node), now);
                }
                self.pump(client);
            }
            Event::Timer { client, generation } => {
                if self.clients[client].generation == generation {
                    self.on_timer(client);
                }
            }
            Event::Link { client, node } => {
                let now = self.instant(self.now);
                let n = &self.nodes[node];
                let c = &mut self.clients[client];
                if n.up {
                    self.outcome.reconnects += 1;
                    c.conn[node] = Some(n.runs);
                    c.core.handle_connected(NodeId(node), &n.found(node), now);
                } else {
                    self.outcome.failed_connects += 1;
                    c.core.handle_connect_failed(NodeId(node), now);
                }
                self.pump(client);
            }
            Event::Crash { node } if !self.nodes[node].up => {}
            Event::Crash { node } => {
                let delay = self.cfg.restart_delay;
                self.push(self.now + delay, Event::Restart { node });
                if std::env::var_os("SIM_TRACE").is_some() {
                    eprintln!("{:?} node {node} crashes", self.now);
                }
                let n = &mut self.nodes[node];
                n.up = false;
                n.paused = false;
                n.waiting.clear();
                if !self.cfg.persistent {
                    // No persistence: a crash loses every key.
                    n.store.clear();
                }
                // Every connection to it breaks, pub/sub ones too: each
                // client connects again as its core asks.
                let now = self.instant(self.now);
                for client in 0..self.clients.len() {
                    let c = &mut self.clients[client];
                    c.channels[node].clear();
                    if std::mem::take(&mut c.notices_up[node]) {
                        c.core.handle_notices_lost(NodeId(node), now);
                    }
                    if !self.cfg.behind_proxy && c.conn[node].take().is_some() {
                        c.core.handle_disconnected(NodeId(node), now);
                    }
                    self.pump(client);
                }
            }
            Event::Restart { node } => {
                if std::env::var_os("SIM_TRACE").is_some() {
                    eprintln!("{:?} node {node} restarts", self.now);
                }
                let n = &mut self.nodes[node];
                n.up = true;
                if !self.cfg.behind_proxy {
                    n.runs += 1;
                }
                if !self.cfg.persistent {
                    n.store.clear();
                }
            }
            Event::Pause { node, until } => {
                if self.nodes[node].up && !self.nodes[node].paused {
                    self.nodes[node].paused = true;
                    self.push(until, Event::Resume { node });
                }
            }
            Event::Resume { node } => {
                let n = &mut self.nodes[node];
                n.paused = false;
                let waiting: Vec<_> = n.waiting.drain(..).collect();
                for (client, id, request, drop_reply) in waiting {
                    self.process(client, id, request, drop_reply);
                }
            }
            Event::Jump { node, by } => {
                self.nodes[node].jump += by.as_micros() as f64;
            }
        }
    }

    fn deliver(&mut self, client: usize, id: RequestId, request: Request, drop_reply: bool) {
        let node = &mut self.nodes[request.node.0];
        if !node.up || self.clients[client].conn[request.node.0] != Some(node.runs) {
            // A down node refuses the connection, and one that crashed since
            // the connection was opened broke it: the client hears so
            // quickly.
            let reply = Reply::to(
                &request,
                Err(NodeError::new(
                    NodeErrorKind::Connection,
                    "connection refused",
                )),
            );
            self.answer(client, id, request.node.0, reply, false);
            return;
        }
        if node.paused {
            node.waiting.push_back((client, id, request, drop_reply));
            return;
        }
        self.process(client, id, request, drop_reply);
    }

    fn process(&mut self, client: usize, id: RequestId, request: Request, drop_reply: bool) {
        let now = self.now;
        let reply = self.nodes[request.node.0].run(now, &request);
        let response = reply
            .result
            .clone()
            .expect("a simulated node always answers");
        self.outcome.native_commands += usize::from(reply.native.is_some());
        if std::env::var_os("SIM_TRACE").is_some() {
            eprintln!(
                "{:?} node {} <- client {client} {} {} => {response:?} (drop reply: {drop_reply})",
                now,
                request.node.0,
                request.command.name(),
                request.value
            );
        }
        // Only the release script publishes, and the plain exclusive release
        // (`DELIFEQ` and `MGET`, then `PUBLISH`); an exclusive lock's only while
        // a waiter may be marked, and then it answers 3
        // (`scripts::RELEASE_IF_WAITED`).
        let script = (reply.native.is_none()).then(|| request.script());
        let published = match script {
            Some(source) if source == redlock_core::scripts::RELEASE_IF_WAITED => {
                response == redlock_core::Response::Int(3)
            }
            Some(_) => response == redlock_core::Response::Int(1),
            // The plain exclusive release, with the notice appended.
            None => matches!(&response, redlock_core::Response::Array(items) if items.len() == 3),
        };
        let freed = request.command == redlock_core::Command::Release && published;
        // The connection reads this answer and sends what follows it, whose
        // answer is the one its sender gets: a lost answer has no follow-up.
        match request.follow_up(&reply) {
            Some(next) if !drop_reply => {
                let at = self.now + self.uniform(self.cfg.latency);
                self.push(
                    at,
                    Event::FollowUp {
                        client,
                        id,
                        request: next,
                    },
                );
            }
            Some(_) => {}
            None => self.answer(client, id, request.node.0, reply, drop_reply),
        }
        if freed {
            // On the first key's channel, as the scripts publish, to every
            // client subscribed there; lost like any other message.
            let node = request.node.0;
            let mut channel = request.keys[0].as_bytes().to_vec();
            channel.extend_from_slice(b"\0released");
            for other in 0..self.clients.len() {
                if self.clients[other].channels[node].contains(&channel)
                    && !self.rng.random_bool(self.cfg.loss)
                {
                    let at = self.now + self.uniform(self.cfg.latency);
                    let channel = channel.clone();
                    self.push(
                        at,
                        Event::Notice {
                            client: other,
                            node,
                            channel,
                        },
                    );
                }
            }
        }
    }

    fn answer(
        &mut self,
        client: usize,
        id: RequestId,
        node: usize,
        reply: Reply,
        drop_reply: bool,
    ) {
        if drop_reply {
            return;
        }
        let latency = self.uniform(self.cfg.latency);
        let at = (self.now + latency).max(self.clients[client].link_in[node]);
        self.clients[client].link_in[node] = at;
        if self.cfg.duplicate > 0.0 && self.rng.random_bool(self.cfg.duplicate) {
            let copy = reply.clone();
            self.push(
                at,
                Event::Answer {
                    client,
                    id,
                    reply: copy,
                },
            );
        }
        self.push(at, Event::Answer { client, id, reply });
    }

    fn send(&mut self, client: usize, id: RequestId, request: Request) {
        let node = request.node.0;
        let lose_request = self.rng.random_bool(self.cfg.loss);
        let drop_reply = self.rng.random_bool(self.cfg.loss);
        if lose_request {
            return;
        }
        let latency = self.uniform(self.cfg.latency);
        let at = (self.now + latency).max(self.clients[client].link_out[node]);
        self.clients[client].link_out[node] = at;
        self.push(
            at,
            Event::Deliver {
                client,
                id,
                request,
                drop_reply,
            },
        );
    }

    fn on_timer(&mut self, client: usize) {
        let now = self.instant(self.now);
        let c = &mut self.clients[client];
        if c.core.poll_timeout().is_some_and(|at| at <= now) {
            c.core.handle_timeout(now);
        }
        if let ClientState::Idle { until } = c.state
            && until <= self.now
            && self.now < self.cfg.duration
        {
            self.start_acquire(client);
            return;
        }
        self.pump(client);
    }

    fn start_acquire(&mut self, client: usize) {
        let key = self.rng.random_range(0..self.cfg.keys);
        let seed = self.rng.random();
        let attempts = if self.cfg.retry {
            Attempts::Retry
        } else {
            Attempts::Once
        };
        let name = |key: usize| format!("key-{key}").into_bytes();
        let single = name(key);
        let owner;
        let multi_names: Vec<Vec<u8>>;
        let multi_refs: Vec<&[u8]>;
        let (spec, target) = match self.cfg.kinds {
            Kinds::Exclusive if self.cfg.fenced => (
                LockSpec::Fenced(&single),
                Target {
                    keys: vec![key],
                    group: None,
                },
            ),
            Kinds::Exclusive => (
                LockSpec::Exclusive(&single),
                Target {
                    keys: vec![key],
                    group: None,
                },
            ),
            Kinds::ReadWrite { read_share } => {
                if self.rng.random_bool(read_share) {
                    (
                        LockSpec::Read(&single),
                        Target {
                            keys: vec![key],
                            group: Some(READERS),
                        },
                    )
                } else {
                    (
                        LockSpec::Write(&single),
                        Target {
                            keys: vec![key],
                            group: None,
                        },
                    )
                }
            }
            Kinds::Reentrant { owners } => {
                let id = client % owners;
                owner = format!("owner-{id}");
                (
                    LockSpec::Reentrant {
                        resource: &single,
                        owner: &owner,
                    },
                    Target {
                        keys: vec![key],
                        group: Some(id as u64),
                    },
                )
            }
            Kinds::Multi => {
                let count = self.rng.random_range(1..=3.min(self.cfg.keys));
                let mut keys: Vec<usize> = (0..count)
                    .map(|_| self.rng.random_range(0..self.cfg.keys))
                    .collect();
                keys.sort_unstable();
                keys.dedup();
                multi_names = keys.iter().map(|&k| name(k)).collect();
                multi_refs = multi_names.iter().map(Vec::as_slice).collect();
                if keys.len() == 1 && self.rng.random_bool(0.5) {
                    // Single exclusive locks on the same keys must exclude multi ones.
                    (
                        LockSpec::Exclusive(&single),
                        Target {
                            keys: vec![key],
                            group: None,
                        },
                    )
                } else {
                    (LockSpec::Multi(&multi_refs), Target { keys, group: None })
                }
            }
            Kinds::Semaphore { permits } if self.cfg.fenced => (
                LockSpec::FencedSemaphore {
                    resource: &single,
                    permits,
                },
                Target {
                    keys: vec![key],
                    group: Some(PERMITS),
                },
            ),
            Kinds::Semaphore { permits } => (
                LockSpec::Semaphore {
                    resource: &single,
                    permits,
                },
                Target {
                    keys: vec![key],
                    group: Some(PERMITS),
                },
            ),
        };
        let now = self.instant(self.now);
        let operation = Operation::acquire(
            self.settings.clone(),
            spec,
            self.settings.default_ttl(),
            attempts,
            now,
            StdRng::seed_from_u64(seed),
        )
        .expect("valid spec");
        let op = self.clients[client].core.start(operation, now);
        self.clients[client].state = ClientState::Acquiring { target, op };
        self.pump(client);
    }

    /// Whether the validity handed out with `lock` (until `end`, true
    /// time) is covered by our key on a quorum of nodes; records it in
    /// `Outcome::uncovered` when not.
    fn check_coverage(&mut self, client: usize, lock: &Lock, end: Duration) {
        let key = lock.key().as_bytes();
        let value = lock.value().as_bytes();
        let covering = self
            .nodes
            .iter()
            .filter(|node| {
                if !node.up {
                    return true;
                }
                let clock = node.clock(self.now);
                node.store
                    .expiry_of(key, value, clock)
                    .is_some_and(|expires| {
                        // The node's expiry in true time.
                        let true_us = (expires - node.jump) / (1.0 + node.rate);
                        true_us >= end.as_micros() as f64
                    })
            })
            .count();
        if covering < self.cfg.nodes / 2 + 1 {
            self.outcome.uncovered.push((client, self.now));
        }
    }

    /// A release reported the lock free at this instant: our value must be
    /// on fewer than a quorum of nodes (a node down counts as holding it:
    /// it may come back with its data). Records it in
    /// `Outcome::false_frees` when not.
    fn check_freed(&mut self, client: usize, key: &[u8], value: &[u8]) {
        let holding = self
            .nodes
            .iter()
            .filter(|node| {
                node.store
                    .expiry_of(key, value, node.clock(self.now))
                    .is_some()
            })
            .count();
        if holding >= redlock_core::quorum(self.cfg.nodes) {
            self.outcome.false_frees.push((client, self.now));
        }
    }

    /// Drains the client's outputs (sends its requests, answers its
    /// pub/sub steps, acts on its operations' events), decides what the
    /// holder does next, and re-arms the timer; again until the client has
    /// nothing more to say.
    fn pump(&mut self, client: usize) {
        for turn in 0.. {
            // Each turn sends something or starts an operation; an
            // operation that fails at once and is started again would spin.
            assert!(turn < 1_000, "client {client} spins at {:?}", self.now);
            let mut quiet = true;
            while let Some(output) = self.clients[client].core.poll_output() {
                quiet = false;
                self.output(client, output);
            }
            if self.hold_or_release(client) && quiet {
                break;
            }
        }
        let core_wake = self.clients[client]
            .core
            .poll_timeout()
            .map(|at| self.since_base(at));
        let own_wake = match &self.clients[client].state {
            // No new acquisition once the run's duration is over.
            ClientState::Idle { until } => Some(*until).filter(|_| self.now < self.cfg.duration),
            // A resigning leader waits for its term's report.
            ClientState::Holding {
                resigning: true, ..
            } => None,
            ClientState::Holding {
                lock,
                release_at,
                extension,
                extend_after,
                keep_alive,
                term,
                ..
            } => {
                // A leader's copy of the lock is not renewed: its term
                // tells the loss.
                let mut wake = match term {
                    true => *release_at,
                    false => (*release_at).min(self.since_base(lock.valid_until())),
                };
                if extension.is_none() && keep_alive.is_none() && self.cfg.extend {
                    // Wake when half the TTL of validity is left, to extend.
                    let half = lock.ttl().as_duration() / 2;
                    if let Some(at) = lock.valid_until().checked_sub(half) {
                        let at = self.since_base(at).max(*extend_after);
                        if at > self.now {
                            wake = wake.min(at);
                        }
                    }
                }
                Some(wake)
            }
            _ => None,
        };
        let wake = match (core_wake, own_wake) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(at) = wake {
            self.arm(client, at.max(self.now));
        }
    }

    /// Acts on one output of a client's core.
    fn output(&mut self, client: usize, output: Output<StdRng>) {
        match output {
            Output::Transmit { id, request } => {
                if request.command.must_arrive()
                    && !self.clients[client].sent.insert((
                        request.node,
                        request.round,
                        request.command,
                    ))
                {
                    self.outcome.resends += 1;
                }
                self.send(client, id, request);
            }
            Output::ConnectNotices(node) => {
                let up = self.nodes[node.0].up;
                let at = self.now + self.uniform(self.cfg.latency);
                let node = node.0;
                self.push(at, Event::NoticeLink { client, node, up });
            }
            Output::Subscribe { node, channels } => self.subscription(client, node, channels, true),
            Output::Unsubscribe { node, channels } => {
                self.subscription(client, node, channels, false);
            }
            Output::Connect(node) => {
                let at = self.now + self.uniform(self.cfg.latency) * 2;
                self.push(
                    at,
                    Event::Link {
                        client,
                        node: node.0,
                    },
                );
            }
            Output::Event { op, event, .. } => self.event(client, op, event),
            _ => {}
        }
    }

    /// A client's subscription change, read (and confirmed) by its node
    /// one latency later.
    fn subscription(&mut self, client: usize, node: NodeId, channels: Vec<Key>, subscribe: bool) {
        let at = self.now + self.uniform(self.cfg.latency);
        let event = Event::Subscription {
            client,
            node: node.0,
            channels,
            subscribe,
        };
        self.push(at, event);
    }

    /// Acts on an event of one of a client's operations.
    fn event(&mut self, client: usize, op: OpId, event: OpEvent) {
        let now = self.now;
        let state = &mut self.clients[client].state;
        match (state, event) {
            (
                ClientState::Acquiring { target, op: ours },
                OpEvent::Acquire(AcquireEvent::Acquired(lock)),
            ) if *ours == op => {
                let target = target.clone();
                self.hold(client, target, lock);
            }
            (
                ClientState::Acquiring { op: ours, .. },
                OpEvent::Acquire(AcquireEvent::Failed(_)),
            ) if *ours == op => {
                self.outcome.acquire_failures += 1;
                self.idle(client);
            }
            (
                ClientState::Holding {
                    lock,
                    holds,
                    extension,
                    extend_after,
                    ..
                },
                OpEvent::Extend(result),
            ) if *extension == Some(op) => {
                *extension = None;
                match result {
                    Ok(extended) => {
                        lock.apply(&extended);
                        self.outcome.extensions += 1;
                        let end = self.base.elapsed_since_base(lock.valid_until());
                        for &hold in holds.iter() {
                            self.outcome.holds[hold].end = end;
                        }
                    }
                    Err(_) => {
                        self.outcome.failed_extensions += 1;
                        *extend_after = now + self.settings.node_timeout();
                    }
                }
            }
            (
                ClientState::Holding {
                    lock,
                    holds,
                    keep_alive,
                    release_at,
                    ..
                },
                OpEvent::KeepAlive(event),
            ) if *keep_alive == Some(op) => match event {
                KeptLockEvent::Extended(extended) => {
                    lock.apply(&extended);
                    self.outcome.extensions += 1;
                    let end = self.base.elapsed_since_base(lock.valid_until());
                    for &hold in holds.iter() {
                        self.outcome.holds[hold].end = end;
                    }
                }
                KeptLockEvent::ExtendFailed(_) => self.outcome.failed_extensions += 1,
                KeptLockEvent::LimitReached { .. } => self.outcome.limits_reached += 1,
                KeptLockEvent::Lost(reason) => {
                    // The holder stops its work the moment the keep-alive
                    // reports the lock lost.
                    if matches!(reason, LossReason::ExtensionLimit { .. }) {
                        self.outcome.lost_at_limit += 1;
                    } else {
                        self.outcome.lost_by_failure += 1;
                    }
                    *keep_alive = None;
                    *release_at = now;
                }
                _ => {}
            },
            (
                ClientState::Holding {
                    lock,
                    holds,
                    keep_alive,
                    ..
                },
                OpEvent::Term(event),
            ) if *keep_alive == Some(op) => match event {
                TermEvent::Renewed { lose_at, .. } => {
                    self.outcome.renewals += 1;
                    let end = self.base.elapsed_since_base(lose_at);
                    for &hold in holds.iter() {
                        self.outcome.holds[hold].end = end;
                    }
                    // The leader steps down before its keys expire on a
                    // quorum, in true time.
                    let lock = lock.clone();
                    self.check_coverage(client, &lock, end);
                }
                TermEvent::RenewFailed(_) => self.outcome.failed_extensions += 1,
                TermEvent::Resigned(report) if report.frees_lock() => {
                    // The end, `Lost(Resigned)`, follows.
                    self.outcome.resigned += 1;
                    let (key, value) = key_and_value(lock);
                    self.check_freed(client, &key, &value);
                }
                TermEvent::Resigned(_) => {
                    // The name is not known free: released, behind the
                    // term's renewals, as a leader dropped.
                    self.outcome.resigns_failed += 1;
                    let (key, value) = key_and_value(lock);
                    let lock = lock.clone();
                    let now = self.instant(now);
                    self.outcome.releases += 1;
                    let c = &mut self.clients[client];
                    let op = c.core.release(Some(op), lock, false, now);
                    c.state = ClientState::Releasing { op, key, value };
                }
                TermEvent::Lost(LeadershipLoss::Resigned) => self.idle(client),
                TermEvent::Lost(_) => {
                    // The leader stops the moment its term is lost; the
                    // core releases what it may have left.
                    self.outcome.lost_by_failure += 1;
                    for &hold in holds.iter() {
                        let hold_end = &mut self.outcome.holds[hold].end;
                        *hold_end = (*hold_end).min(now);
                    }
                    self.idle(client);
                }
                _ => {}
            },
            (
                ClientState::Releasing {
                    op: ours,
                    key,
                    value,
                },
                OpEvent::Release(report),
            ) if *ours == op => {
                if report.frees_lock() {
                    let (key, value) = (key.clone(), value.clone());
                    self.check_freed(client, &key, &value);
                }
                self.idle(client);
            }
            // An operation given up (an extension cut short by the
            // release) or a retry's failed attempt.
            _ => {}
        }
    }

    /// The client holds `lock`: records the hold and starts its keep-alive.
    fn hold(&mut self, client: usize, key: Target, lock: Lock) {
        let start = self.now;
        if std::env::var_os("SIM_TRACE").is_some() {
            eprintln!(
                "{:?} client {client} holds {} until {:?}: {}",
                self.now,
                lock.value(),
                self.since_base(lock.valid_until()),
                lock.votes()
            );
        }
        let mut end = self.since_base(lock.valid_until());
        if key.group.is_none() && key.keys.len() == 1 {
            self.check_coverage(client, &lock, end);
        }
        // A leader leads until its term's loss instant (before the lock's
        // validity ends, unless the core is wrong).
        let term = (self.cfg.elections && key.group.is_none())
            .then(|| Term::new(lock.clone(), &ElectionTiming::default_for(&self.settings)))
            .flatten();
        let mut token = lock.fencing_token();
        if let Some(term) = &term {
            end = self.since_base(term.lose_at());
            // A leader's token is its term.
            token = Some(term.term());
        }
        let mut holds = Vec::new();
        for &resource in &key.keys {
            self.outcome.holds.push(Hold {
                client,
                key: resource,
                start,
                end,
                token,
                slot: permit_slot(lock.key().as_bytes()),
                group: key.group,
            });
            holds.push(self.outcome.holds.len() - 1);
        }
        let share = self
            .rng
            .random_range(self.cfg.hold_share.0..=self.cfg.hold_share.1);
        let release_at = self.now + self.cfg.ttl.mul_f64(share);
        let now = self.instant(self.now);
        let c = &mut self.clients[client];
        let leads = term.is_some();
        let keep_alive = match term {
            Some(term) => Some(c.core.start(Operation::term(term), now)),
            None => self.cfg.keep_alive.map(|options| {
                c.core
                    .start(Operation::keep_alive(lock.clone(), options), now)
            }),
        };
        c.state = ClientState::Holding {
            lock,
            holds,
            release_at,
            extension: None,
            extend_after: Duration::ZERO,
            keep_alive,
            term: leads,
            resigning: false,
        };
    }

    /// The client is done with its lock: it thinks, then acquires again.
    fn idle(&mut self, client: usize) {
        let think = self.uniform(self.cfg.think);
        self.clients[client].state = ClientState::Idle {
            until: self.now + think,
        };
    }

    /// A holder releases once its work is done, its lock ran out or its
    /// keep-alive lost it, and extends by hand at half its TTL
    /// (`SimConfig::extend`, without a keep-alive). Whether it started
    /// nothing new.
    fn hold_or_release(&mut self, client: usize) -> bool {
        let now = self.instant(self.now);
        let sim_now = self.now;
        let extend = self.cfg.extend;
        let resign = self.rng.random_bool(0.5);
        let c = &mut self.clients[client];
        let ClientState::Holding {
            lock,
            holds,
            release_at,
            extension,
            extend_after,
            keep_alive,
            term,
            resigning,
        } = &mut c.state
        else {
            return true;
        };
        if *resigning {
            return true;
        }
        // A leader is told its loss by its term; its lock's validity moves
        // with renewals this copy does not see.
        if *term
            && sim_now >= *release_at
            && resign
            && let Some(op) = *keep_alive
        {
            for &hold in holds.iter() {
                let hold_end = &mut self.outcome.holds[hold].end;
                *hold_end = (*hold_end).min(sim_now);
            }
            assert!(c.core.resign(op, now), "a running term resigns");
            *resigning = true;
            return false;
        }
        if sim_now >= *release_at || (!*term && now >= lock.valid_until()) {
            // Done with the work, or the lock ran out: stop and release,
            // behind what the keep-alive sent (the core releases the lock
            // as the keep-alive holds it).
            for &hold in holds.iter() {
                let hold_end = &mut self.outcome.holds[hold].end;
                *hold_end = (*hold_end).min(sim_now);
            }
            if let Some(extension) = extension.take() {
                c.core.cancel(extension, now);
            }
            self.outcome.releases += 1;
            let (key, value) = key_and_value(lock);
            let op = c.core.release(keep_alive.take(), lock.clone(), false, now);
            c.state = ClientState::Releasing { op, key, value };
            return false;
        }
        if extension.is_none()
            && keep_alive.is_none()
            && extend
            && sim_now >= *extend_after
            && lock.validity(now) <= lock.ttl().as_duration() / 2
        {
            let ttl = lock.ttl();
            return match Operation::extend(lock, ttl, now) {
                Ok(operation) => {
                    *extension = Some(c.core.start(operation, now));
                    false
                }
                // Too little validity left to extend: the lock runs out.
                Err(_) => {
                    self.outcome.failed_extensions += 1;
                    *extend_after = *release_at;
                    true
                }
            };
        }
        true
    }
}

/// A lock's key and our value, to check a release's claim against the
/// nodes.
fn key_and_value(lock: &Lock) -> (Vec<u8>, Vec<u8>) {
    (
        lock.key().as_bytes().to_vec(),
        lock.value().as_bytes().to_vec(),
    )
}

trait SinceBase {
    fn elapsed_since_base(&self, at: Instant) -> Duration;
}

impl SinceBase for Instant {
    fn elapsed_since_base(&self, at: Instant) -> Duration {
        at.saturating_duration_since(*self)
    }
}
