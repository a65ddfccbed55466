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

use redlock_core::Machine;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "../../../redlock-testkit/src/model.rs"]
mod redis;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use redlock_core::native::{Call, NodeFacts, Server, Version};
use redlock_core::{
    AcquireEvent, Acquisition, Attempts, Config, Extension, KeepAlive, KeepAliveEvent,
    KeepAliveSchedule, Lock, LockSpec, LossReason, NodeError, NodeErrorKind, Release, Reply,
    Request, RetryConfig, Settings,
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
    /// Whether a crashed node keeps its data (AOF with fsync always).
    pub persistent: bool,
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
            persistent: false,
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
        request: Request,
        drop_reply: bool,
    },
    /// A client's connection sends the request that follows an answer it
    /// read ([`Request::follow_up`]), before handing anyone the answer.
    FollowUp {
        client: usize,
        request: Request,
    },
    /// A reply reaches its client.
    Answer {
        client: usize,
        reply: Reply,
    },
    /// A release notice (pub/sub message) reaches a client.
    Notice {
        client: usize,
        node: usize,
    },
    /// A client's timer (stale when `generation` is old).
    Timer {
        client: usize,
        generation: u64,
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
    waiting: VecDeque<(usize, Request, bool)>,
    store: redis::Store,
    facts: NodeFacts,
}

impl Node {
    fn clock(&self, now: Duration) -> f64 {
        now.as_micros() as f64 * (1.0 + self.rate) + self.jump
    }

    /// Runs one request the way this node's server would: the plain
    /// command the core picks for it, or the script (from the contracts in
    /// `scripts`). Returns the reply marked with what was run.
    fn run(&mut self, now: Duration, request: &Request) -> Reply {
        let clock = self.clock(now);
        let call = request.call(&self.facts);
        let response = match call {
            Call::Script(_) => self.store.run(clock, request),
            Call::Native(native) => self.store.run_native(clock, request, native),
        };
        Reply::via(request, call, Ok(response))
    }
}

/// What a client locks: resource indexes, and the group its holds share.
#[derive(Clone, Debug)]
struct Target {
    keys: Vec<usize>,
    group: Option<u64>,
}

enum ClientState {
    Idle,
    Acquiring {
        target: Target,
        machine: Acquisition<StdRng>,
    },
    Holding {
        lock: Lock,
        holds: Vec<usize>,
        release_at: Duration,
        extension: Option<Extension>,
        /// The core's keep-alive schedule, when `SimConfig::keep_alive`.
        schedule: Option<KeepAliveSchedule>,
    },
    Releasing {
        machine: Release,
        /// The lock's key and our value, to check the report's claim.
        key: Vec<u8>,
        value: Vec<u8>,
    },
}

struct Client {
    state: ClientState,
    generation: u64,
    /// Last delivery time per node link, to keep links FIFO.
    link_out: Vec<Duration>,
    link_in: Vec<Duration>,
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
    clients: Vec<Client>,
    settings: Arc<Settings>,
    outcome: Outcome,
}

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
            })
            .collect();
        let clients = (0..cfg.clients)
            .map(|_| Client {
                state: ClientState::Idle,
                generation: 0,
                link_out: vec![Duration::ZERO; cfg.nodes],
                link_in: vec![Duration::ZERO; cfg.nodes],
            })
            .collect();
        // A per-node timeout well above the worst round trip, far below the TTL.
        let node_timeout = (cfg.latency.1 * 3).min(cfg.ttl / 4);
        let settings = settings(cfg.nodes, cfg.ttl, node_timeout);
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
            cfg,
        };
        world.schedule_faults();
        for client in 0..world.clients.len() {
            let start = world.uniform(world.cfg.think);
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
            self.handle(next.event);
        }
        // Close holds still open at the horizon at their validity end (already set).
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Deliver {
                client,
                request,
                drop_reply,
            } => self.deliver(client, request, drop_reply),
            Event::FollowUp { client, request } => self.send(client, request),
            Event::Answer { client, reply } => self.on_reply(client, reply),
            Event::Notice { client, node } => {
                if let ClientState::Acquiring { machine, .. } = &mut self.clients[client].state {
                    machine.handle_notice(
                        redlock_core::Notice::Released(redlock_core::NodeId(node)),
                        self.base + self.now,
                    );
                    self.step(client);
                }
            }
            Event::Timer { client, generation } => {
                if self.clients[client].generation == generation {
                    self.on_timer(client);
                }
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
            }
            Event::Restart { node } => {
                if std::env::var_os("SIM_TRACE").is_some() {
                    eprintln!("{:?} node {node} restarts", self.now);
                }
                let n = &mut self.nodes[node];
                n.up = true;
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
                for (client, request, drop_reply) in waiting {
                    self.process(client, request, drop_reply);
                }
            }
            Event::Jump { node, by } => {
                self.nodes[node].jump += by.as_micros() as f64;
            }
        }
    }

    fn deliver(&mut self, client: usize, request: Request, drop_reply: bool) {
        let node = &mut self.nodes[request.node.0];
        if !node.up {
            // A down node refuses the connection: the client hears so quickly.
            let reply = Reply::to(
                &request,
                Err(NodeError::new(
                    NodeErrorKind::Connection,
                    "connection refused",
                )),
            );
            self.answer(client, request.node.0, reply, false);
            return;
        }
        if node.paused {
            node.waiting.push_back((client, request, drop_reply));
            return;
        }
        self.process(client, request, drop_reply);
    }

    fn process(&mut self, client: usize, request: Request, drop_reply: bool) {
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
        // a waiter of another client may be marked, and then it answers 3
        // (`scripts::RELEASE_IF_WAITED`; this sim's clients name none, so
        // every marked waiter counts).
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
                        request: next,
                    },
                );
            }
            Some(_) => {}
            None => self.answer(client, request.node.0, reply, drop_reply),
        }
        if freed && self.cfg.notices {
            // Every client is subscribed; the message may be lost like any other.
            for other in 0..self.clients.len() {
                if !self.rng.random_bool(self.cfg.loss) {
                    let at = self.now + self.uniform(self.cfg.latency);
                    let node = request.node.0;
                    self.push(
                        at,
                        Event::Notice {
                            client: other,
                            node,
                        },
                    );
                }
            }
        }
    }

    fn answer(&mut self, client: usize, node: usize, reply: Reply, drop_reply: bool) {
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
                    reply: copy,
                },
            );
        }
        self.push(at, Event::Answer { client, reply });
    }

    fn send(&mut self, client: usize, request: Request) {
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
                request,
                drop_reply,
            },
        );
    }

    fn on_reply(&mut self, client: usize, reply: Reply) {
        let now = self.instant(self.now);
        match &mut self.clients[client].state {
            ClientState::Acquiring { machine, .. } => machine.handle_reply(reply, now),
            ClientState::Holding {
                extension: Some(ext),
                ..
            } => ext.handle_reply(reply, now),
            ClientState::Releasing { machine, .. } => machine.handle_reply(reply, now),
            _ => {}
        }
        self.step(client);
    }

    fn on_timer(&mut self, client: usize) {
        let now = self.instant(self.now);
        let cfg_duration = self.cfg.duration;
        match &mut self.clients[client].state {
            ClientState::Idle => {
                if self.now < cfg_duration {
                    self.start_acquire(client);
                }
                return;
            }
            ClientState::Acquiring { machine, .. } => machine.handle_timeout(now),
            ClientState::Holding {
                extension,
                schedule,
                ..
            } => {
                if let Some(ext) = extension {
                    ext.handle_timeout(now);
                }
                if let Some(schedule) = schedule {
                    schedule.handle_timeout(now);
                }
            }
            ClientState::Releasing { machine, .. } => machine.handle_timeout(now),
        }
        self.step(client);
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
        let machine = Acquisition::with_spec(
            self.settings.clone(),
            spec,
            self.settings.default_ttl(),
            attempts,
            self.instant(self.now),
            StdRng::seed_from_u64(seed),
        )
        .expect("valid spec");
        self.clients[client].state = ClientState::Acquiring { target, machine };
        self.step(client);
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

    /// Drains the client's state machine: sends requests, handles events,
    /// moves between states, and re-arms the timer.
    fn step(&mut self, client: usize) {
        let now_instant = self.instant(self.now);
        let mut outgoing = Vec::new();
        let mut next = Next::Stay(None);
        let mut freed = None;
        match &mut self.clients[client].state {
            ClientState::Idle => {}
            ClientState::Acquiring { target, machine } => {
                outgoing.extend(std::iter::from_fn(|| machine.poll_request()));
                let key = target.clone();
                next = Next::Stay(machine.poll_timeout());
                while let Some(event) = machine.poll_event() {
                    match event {
                        AcquireEvent::Acquired(lock) => next = Next::Hold(key.clone(), lock),
                        AcquireEvent::AttemptFailed { .. } => {}
                        AcquireEvent::Failed(_) => next = Next::Idle { failed: true },
                    }
                }
            }
            ClientState::Holding {
                lock,
                holds,
                release_at,
                extension,
                schedule,
            } => {
                if let Some(ext) = extension {
                    outgoing.extend(std::iter::from_fn(|| ext.poll_request()));
                    if let Some(result) = ext.poll_event() {
                        match result {
                            Ok(extended) => {
                                lock.apply(&extended);
                                self.outcome.extensions += 1;
                                let end = self.base.elapsed_since_base(lock.valid_until());
                                for &hold in holds.iter() {
                                    self.outcome.holds[hold].end = end;
                                }
                                if let Some(schedule) = schedule {
                                    schedule.handle_extended(&extended, now_instant);
                                }
                            }
                            Err(error) => {
                                self.outcome.failed_extensions += 1;
                                if let Some(schedule) = schedule {
                                    schedule.handle_failed(error, now_instant);
                                }
                            }
                        }
                        *extension = None;
                    }
                }
                // The keep-alive decides when to extend; the holder stops
                // its work the moment it reports the lock lost.
                let mut lost = false;
                while let Some(event) = schedule.as_mut().and_then(KeepAliveSchedule::poll_event) {
                    let schedule = schedule.as_mut().expect("an event came from it");
                    match event {
                        KeepAliveEvent::Extend { ttl } => match lock.extend(ttl, now_instant) {
                            Ok(mut ext) => {
                                outgoing.extend(std::iter::from_fn(|| ext.poll_request()));
                                *extension = Some(ext);
                            }
                            Err(error) => {
                                self.outcome.failed_extensions += 1;
                                schedule.handle_failed(error, now_instant);
                            }
                        },
                        KeepAliveEvent::LimitReached { .. } => self.outcome.limits_reached += 1,
                        KeepAliveEvent::Lost(LossReason::ExtensionLimit { .. }) => {
                            self.outcome.lost_at_limit += 1;
                            lost = true;
                        }
                        KeepAliveEvent::Lost(_) => {
                            self.outcome.lost_by_failure += 1;
                            lost = true;
                        }
                    }
                }
                let release_at_instant = self.base + *release_at;
                let valid_until = lock.valid_until();
                if now_instant >= release_at_instant || now_instant >= valid_until || lost {
                    // Done with the work, or the lock ran out: stop and release.
                    for &hold in holds.iter() {
                        let hold_end = &mut self.outcome.holds[hold].end;
                        *hold_end = (*hold_end).min(self.now);
                    }
                    self.outcome.releases += 1;
                    next = Next::Release(
                        lock.release(now_instant),
                        lock.key().as_bytes().to_vec(),
                        lock.value().as_bytes().to_vec(),
                    );
                } else {
                    if extension.is_none() && schedule.is_none() && self.cfg.extend {
                        let left = lock.validity(now_instant);
                        if left <= lock.ttl().as_duration() / 2 {
                            let ttl = lock.ttl();
                            match lock.extend(ttl, now_instant) {
                                Ok(mut ext) => {
                                    outgoing.extend(std::iter::from_fn(|| ext.poll_request()));
                                    *extension = Some(ext);
                                }
                                Err(_) => self.outcome.failed_extensions += 1,
                            }
                        }
                    }
                    let mut wake = release_at_instant.min(valid_until);
                    if let Some(ext) = extension {
                        wake = wake.min(ext.poll_timeout().unwrap_or(wake));
                    } else if let Some(schedule) = schedule {
                        wake = wake.min(schedule.poll_timeout().unwrap_or(wake));
                    } else if self.cfg.extend {
                        // Wake when half the TTL of validity is left, to extend.
                        let half = lock.ttl().as_duration() / 2;
                        if let Some(at) = valid_until.checked_sub(half)
                            && at > now_instant
                        {
                            wake = wake.min(at);
                        }
                    }
                    next = Next::Stay(Some(wake));
                }
            }
            ClientState::Releasing {
                machine,
                key,
                value,
            } => {
                outgoing.extend(std::iter::from_fn(|| machine.poll_request()));
                next = match machine.poll_event() {
                    Some(report) => {
                        if report.frees_lock() {
                            freed = Some((key.clone(), value.clone()));
                        }
                        Next::Idle { failed: false }
                    }
                    None => Next::Stay(machine.poll_timeout()),
                };
            }
        }
        for request in outgoing {
            self.send(client, request);
        }
        if let Some((key, value)) = freed {
            self.check_freed(client, &key, &value);
        }
        match next {
            Next::Hold(key, lock) => {
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
                let end = self.since_base(lock.valid_until());
                if key.group.is_none() && key.keys.len() == 1 {
                    self.check_coverage(client, &lock, end);
                }
                let mut holds = Vec::new();
                for &resource in &key.keys {
                    self.outcome.holds.push(Hold {
                        client,
                        key: resource,
                        start,
                        end,
                        token: lock.fencing_token(),
                        slot: permit_slot(lock.key().as_bytes()),
                        group: key.group,
                    });
                    holds.push(self.outcome.holds.len() - 1);
                }
                let share = self
                    .rng
                    .random_range(self.cfg.hold_share.0..=self.cfg.hold_share.1);
                let release_at = self.now + self.cfg.ttl.mul_f64(share);
                let schedule = self
                    .cfg
                    .keep_alive
                    .map(|options| KeepAliveSchedule::new(&lock, options));
                self.clients[client].state = ClientState::Holding {
                    lock,
                    holds,
                    release_at,
                    extension: None,
                    schedule,
                };
                self.step(client);
            }
            Next::Release(machine, key, value) => {
                self.clients[client].state = ClientState::Releasing {
                    machine,
                    key,
                    value,
                };
                self.step(client);
            }
            Next::Idle { failed } => {
                if failed {
                    self.outcome.acquire_failures += 1;
                }
                self.clients[client].state = ClientState::Idle;
                let think = self.uniform(self.cfg.think);
                self.arm(client, self.now + think);
            }
            Next::Stay(Some(at)) => {
                let at = self.since_base(at).max(self.now);
                self.arm(client, at);
            }
            Next::Stay(None) => {}
        }
    }
}

enum Next {
    Stay(Option<Instant>),
    Hold(Target, Lock),
    Release(Release, Vec<u8>, Vec<u8>),
    Idle { failed: bool },
}

trait SinceBase {
    fn elapsed_since_base(&self, at: Instant) -> Duration;
}

impl SinceBase for Instant {
    fn elapsed_since_base(&self, at: Instant) -> Duration {
        at.saturating_duration_since(*self)
    }
}
