//! The whole client as one sans-IO unit: every operation of every kind,
//! the requests each node owes an answer to, what each node owes us, and
//! the release notices, behind one input path and one output path.

pub(crate) mod health;
pub(crate) mod hub;
mod io;
mod links;
mod node;
mod notices;
mod operation;
pub(crate) mod queue;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use rand_core::Rng;

use crate::{HealthChange, Hub, Key, NodeHealth, NodeId, Reply, Request, Settings, Ttl, WaiterId};

use links::Links;
use node::NodeState;
#[cfg_attr(not(feature = "simulation"), allow(unreachable_pub))]
pub use node::OWED_PER_NODE;
use notices::NoticeLink;
use operation::Kind;
pub use operation::{OpEvent, Operation};

/// An operation of a [`Client`], from [`Client::start`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OpId(pub u64);

/// A request a [`Client`] asked to send ([`Output::Transmit`]): its answer
/// goes back with [`Client::handle_reply`] under the same id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);

/// What a [`Client`] asks of its driver, drained with
/// [`Client::poll_output`] in the order given.
#[derive(Debug)]
#[non_exhaustive]
pub enum Output<R> {
    /// Send `request` to its node now. Requests to one node must reach it in
    /// the order given (a withdraw after the attempt it undoes, a release
    /// after its lock's extension); a cluster node, which routes each
    /// request on its own, is given one per lock key at a time.
    Transmit {
        /// Names the answer ([`Client::handle_reply`]).
        id: RequestId,
        /// What to send, to [`Request::node`].
        request: Request,
    },
    /// Stop waiting for this request's answer: it counts for nothing any
    /// more. A request already written stays queued on its connection and
    /// runs when the node reads it; one not written yet may be skipped.
    Forget(RequestId),
    /// An operation's event. The last one carries the operation back
    /// (`finished`): nothing of it runs any more.
    Event {
        /// Whose.
        op: OpId,
        /// What it reports.
        event: OpEvent,
        /// The operation, with its final event; `None` before.
        finished: Option<Operation<R>>,
    },
    /// A node became known slow, or is trusted again (for logs and
    /// metrics; the client already acts on it).
    Health(HealthChange),
    /// Open a pub/sub connection to this node for release notices, and say
    /// how it went: [`Client::handle_notices_connected`], or
    /// [`Client::handle_notices_lost`] (also when it breaks later). Give
    /// every message it brings to [`Client::handle_notice`].
    ConnectNotices(NodeId),
    /// Subscribe the node's pub/sub connection to these release channels,
    /// and say how it went: [`Client::handle_subscribed`], or
    /// [`Client::handle_notices_lost`] (refused, or not confirmed within
    /// the connect timeout).
    Subscribe {
        /// Whose connection.
        node: NodeId,
        /// The channels to add.
        channels: Vec<Key>,
    },
    /// Unsubscribe the node's pub/sub connection from these channels, and
    /// say how it went: [`Client::handle_unsubscribed`] or
    /// [`Client::handle_notices_lost`].
    Unsubscribe {
        /// Whose connection.
        node: NodeId,
        /// The channels nobody waits on any more.
        channels: Vec<Key>,
    },
    /// Connect to this node (it has no connection: it broke, or the last
    /// attempt failed and its backoff passed), and say how it went:
    /// [`Client::handle_connected`] or [`Client::handle_connect_failed`].
    Connect(NodeId),
}

/// An operation that runs.
#[derive(Debug)]
struct Running<R> {
    machine: Operation<R>,
    /// Its registration for release notices, once it listens.
    waiter: Option<WaiterId>,
    /// Its machine's timeout, as filed in `Client::op_timers`.
    timeout: Option<Instant>,
}

/// One client of N masters as a state machine: the unit a driver runs, as
/// quinn-proto's `Connection` or str0m's `Rtc` is.
///
/// It runs [`Operation`]s (locks of every kind, extensions, releases,
/// keep-alives, terms, reads) and keeps what no single operation owns:
///
/// - **the requests in flight**, each named by a [`RequestId`], with its
///   deadline and its give-up instant ([`Request::give_up_at`]): answers of
///   operations that finished still tell the node's health, and a request
///   unanswered past its deadline makes its node overdue
///   (`NodeHealth`); past the give-up instant it is forgotten
///   ([`Output::Forget`]);
/// - **each node's health**: requests a known slow node may skip are
///   answered [`Reply::skipped`] here and never sent;
/// - **each node's link**: a node whose connection broke
///   ([`handle_disconnected`](Self::handle_disconnected)) is connected
///   again at once ([`Output::Connect`]), then, while attempts fail
///   ([`handle_connect_failed`](Self::handle_connect_failed)), after a
///   backoff of 50 ms doubling up to 2 s, less up to a quarter of jitter
///   (`Backoff::reconnect`);
/// - **each node's order per lock key**: a request answered `NOSCRIPT` is
///   sent again in full only while it is the last sent to its node for its
///   key ([`handle_reply`](Self::handle_reply)), and a Redis Cluster node
///   ([`Settings::with_cluster_nodes`]), whose connection keeps no order, is
///   sent one request per key at a time, the next once the one before was
///   answered or forgotten;
/// - **what each node is owed**: a release, withdraw or leave that met a
///   broken connection is sent again when the node connects
///   ([`handle_connected`](Self::handle_connected)) or one per-node timeout
///   later, until it is given up; at most `OWED_PER_NODE`;
/// - **the release notices** (`Hub`): a new acquisition waits behind the
///   client's waiters on its channels, a release goes as the script where
///   they wait, each notice wakes whom it should, and each node's pub/sub
///   connection is asked for while some acquire waits
///   ([`Output::ConnectNotices`], again after a backoff when lost) and kept
///   subscribed to exactly the channels waited on ([`Output::Subscribe`],
///   [`Output::Unsubscribe`]), one change at a time;
/// - **what a lost term leaves**: a term that ends lost (not resigned, not
///   closed) has its value released where it may be left, so it does not
///   hold off the next leader until its TTL; a term is
///   [resigned](Self::resign) inside its own operation;
/// - **cancellation and close**: a cancelled operation is abandoned
///   (`Machine::abandon`) and what it queues
///   (releases of an attempt in flight) is sent; [`close`](Self::close)
///   cancels every operation, and the client is [idle](Self::is_idle) once
///   nothing is in flight or owed.
///
/// # Driving it
///
/// One loop: start, cancel or close as the handles ask; drain
/// [`poll_output`](Self::poll_output) (send each transmit at once, in
/// order); wait for a node's answer, a notice, a connection, or the instant
/// of [`poll_timeout`](Self::poll_timeout); feed it with `handle_*`; again.
///
/// ```
/// use std::sync::Arc;
/// use std::time::{Duration, Instant};
/// use rand::{SeedableRng, rngs::StdRng};
/// use redlock_core::{
///     AcquireEvent, Attempts, Client, Config, LockSpec, OpEvent, Operation, Output, Reply,
///     Response,
/// };
///
/// let settings = Arc::new(Config::new(["a", "b", "c"]).validate()?);
/// let start = Instant::now();
/// let mut client = Client::new(settings.clone(), StdRng::seed_from_u64(2));
/// let acquisition = Operation::acquire(
///     settings.clone(), LockSpec::Exclusive(b"report"), settings.default_ttl(), Attempts::Once,
///     start, StdRng::seed_from_u64(1),
/// )?;
/// let op = client.start(acquisition, start);
/// let now = start + Duration::from_millis(1);
/// let mut granted = false;
/// while let Some(output) = client.poll_output() {
///     match output {
///         // Every node says yes.
///         Output::Transmit { id, request } => {
///             client.handle_reply(id, Reply::to(&request, Ok(Response::Int(1))), now)
///         }
///         Output::Event { op: whose, event: OpEvent::Acquire(AcquireEvent::Acquired(_)), finished } => {
///             assert_eq!(whose, op);
///             granted = finished.is_some();
///         }
///         _ => {}
///     }
/// }
/// assert!(granted && client.is_idle());
/// # Ok::<(), redlock_core::ConfigError>(())
/// ```
#[derive(Debug)]
pub struct Client<R> {
    settings: Arc<Settings>,
    links: Links,
    ops: BTreeMap<OpId, Running<R>>,
    op_timers: BTreeSet<(Instant, OpId)>,
    waiters: BTreeMap<WaiterId, OpId>,
    hub: Hub,
    /// Each node's pub/sub link for the hub's channels.
    notices: Box<[NoticeLink]>,
    outputs: VecDeque<Output<R>>,
    next_op: u64,
    closed: bool,
    /// The jitter of each node's reconnection backoff.
    rng: R,
}

impl<R: Rng> Client<R> {
    /// A client of the nodes of `settings`, every node connected and
    /// trusted, nothing running; `rng` draws the jitter of reconnections.
    pub fn new(settings: Arc<Settings>, rng: R) -> Self {
        let nodes = (0..settings.node_count())
            .map(|node| {
                NodeState::new(
                    NodeHealth::for_node(&settings, NodeId(node)),
                    settings.is_cluster(NodeId(node)),
                )
            })
            .collect();
        Self {
            hub: Hub::new(settings.node_count()),
            notices: (0..settings.node_count())
                .map(|_| NoticeLink::new())
                .collect(),
            settings,
            links: Links {
                nodes,
                flights: HashMap::default(),
                timers: BTreeSet::new(),
                next_request: 0,
                longest_ttl: Ttl(0),
            },
            ops: BTreeMap::new(),
            op_timers: BTreeSet::new(),
            waiters: BTreeMap::new(),
            outputs: VecDeque::new(),
            next_op: 0,
            closed: false,
            rng,
        }
    }

    /// The settings it was built with.
    pub fn settings(&self) -> &Arc<Settings> {
        &self.settings
    }

    /// Starts `operation` at `now`. An acquisition is first planned behind
    /// the client's waiters on its channels (`Hub::plan`), a release as
    /// the script where they wait (`Hub::plan_release`). Its requests are
    /// in [`poll_output`](Self::poll_output) before this returns.
    ///
    /// On a [closed](Self::close) client, only what leaves nothing behind
    /// runs (a release, a read); anything else ends at once with
    /// [`OpEvent::Closed`], having sent nothing.
    pub fn start(&mut self, operation: Operation<R>, now: Instant) -> OpId {
        let op = self.admit(operation, now);
        self.pump(vec![op], now);
        op
    }

    /// [`start`](Self::start) but for the pump: `operation` filed (or
    /// ended at once on a closed client), not stepped yet.
    fn admit(&mut self, operation: Operation<R>, now: Instant) -> OpId {
        let op = OpId(self.next_op);
        self.next_op += 1;
        if self.closed && !operation.leaves_nothing() {
            self.outputs.push_back(Output::Event {
                op,
                event: OpEvent::Closed,
                finished: Some(operation),
            });
            return op;
        }
        // Nobody of this client waiting, the common case: nothing to plan,
        // and the machine stays in its box.
        let machine = match operation.0 {
            Kind::Acquire(acquisition) if self.hub.is_waiting() => {
                Operation(Kind::Acquire(Box::new(self.hub.plan(*acquisition, now))))
            }
            Kind::Release(release) if self.hub.is_waiting() => {
                Operation::of_release(self.hub.plan_release(*release))
            }
            other => Operation(other),
        };
        self.ops.insert(
            op,
            Running {
                machine,
                waiter: None,
                timeout: None,
            },
        );
        op
    }

    /// Stops `op` before its end at `now`: it is abandoned
    /// (`Machine::abandon`), what it queues then
    /// is sent (an acquisition's releases of the attempt in flight), and it
    /// reports nothing more. An operation that already ended is ignored.
    pub fn cancel(&mut self, op: OpId, now: Instant) {
        self.end(op, now);
    }

    /// [`cancel`](Self::cancel), giving the machine back.
    fn end(&mut self, op: OpId, now: Instant) -> Option<Operation<R>> {
        let mut running = self.ops.remove(&op)?;
        if let Some(at) = running.timeout {
            self.op_timers.remove(&(at, op));
        }
        // Its hand-over first, then it leaves its queues: the waiter that
        // becomes first is told the channel's events, that hand-over
        // among them (told to no one else while another client waits).
        self.abandon_in_place(&mut running.machine, now);
        if let Some(waiter) = running.waiter {
            self.waiters.remove(&waiter);
            self.hub.handle_leave(waiter, false, now);
            self.pump(Vec::new(), now);
        }
        Some(running.machine)
    }

    /// Abandons `operation`, one that ran elsewhere (a driver that went
    /// away handed it over, [`evict`](Self::evict)), at `now`: what it
    /// queues then is sent, as for a [cancel](Self::cancel).
    pub fn abandon(&mut self, mut operation: Operation<R>, now: Instant) {
        self.abandon_in_place(&mut operation, now);
    }

    fn abandon_in_place(&mut self, operation: &mut Operation<R>, now: Instant) {
        operation.abandon(now);
        while let Some(request) = operation.poll_request() {
            if planted!(CancelSkipsWithdraws) && request.command.must_arrive() {
                continue;
            }
            // What must arrive is always admitted; nobody reads the answer
            // of anything else now.
            if self.links.admit(&request, now).is_ok() {
                self.links.transmit(&mut self.outputs, None, request);
            }
        }
        while let Some(hand_over) = operation.poll_hand_over() {
            self.hub.handle_hand_over(&hand_over, now);
        }
        self.pump(Vec::new(), now);
    }

    /// Releases a held lock at `now`: `lock`, or, where `kept` still runs
    /// (the keep-alive or the term that renews it), the lock as that
    /// operation holds it now, once it is cancelled: the release goes
    /// behind every extension and restore it sent, on every node, and acts
    /// on the nodes those restores filled. The release runs as an
    /// operation of its own, planned as [`start`](Self::start) plans one;
    /// `every_node`: it reports once every node answered or timed out
    /// ([`Operation::every_node`]), for a caller about to end its process.
    pub fn release(
        &mut self,
        kept: Option<OpId>,
        mut lock: crate::Lock,
        every_node: bool,
        now: Instant,
    ) -> OpId {
        if let Some(op) = kept
            && let Some(running) = self.ops.get(&op)
            && let Some(held) = running.machine.held_lock()
        {
            lock = held.clone();
            self.cancel(op, now);
        }
        let release = Operation::release(&mut lock, now);
        let release = if every_node {
            release.every_node()
        } else {
            release
        };
        self.start(release, now)
    }

    /// Resigns the term `op` renews ([`Operation::term`]) at `now`: its
    /// renewals stop and the release of our value runs inside it, planned
    /// as [`start`](Self::start) plans a release; `op` then reports
    /// [`TermEvent::Resigned`](crate::TermEvent::Resigned) with the
    /// release's report, and ends if it freed the name (otherwise renewals
    /// go on), unless it ends first (closed). `false`, doing nothing, for
    /// an operation that is not a term running, or one resigning already.
    pub fn resign(&mut self, op: OpId, now: Instant) -> bool {
        let hub = &self.hub;
        let Some(running) = self.ops.get_mut(&op) else {
            return false;
        };
        // Unchanged where nobody of this client waits on its channel.
        let started = running
            .machine
            .resign(now, |release| hub.plan_release(release));
        if started {
            self.pump(vec![op], now);
        }
        started
    }

    /// Takes `op` out as it is at `now`, unfinished and not abandoned: it
    /// runs here no more, answers to its requests are ignored, and it
    /// leaves the release notices' queues. For a driver that goes away
    /// and hands its operations to another client (their requests in
    /// flight are lost with it: the operation times those nodes out).
    pub fn evict(&mut self, op: OpId, now: Instant) -> Option<Operation<R>> {
        let running = self.ops.remove(&op)?;
        if let Some(at) = running.timeout {
            self.op_timers.remove(&(at, op));
        }
        if let Some(waiter) = running.waiter {
            self.waiters.remove(&waiter);
            self.hub.handle_leave(waiter, false, now);
        }
        self.pump(Vec::new(), now);
        Some(running.machine)
    }

    /// Everything owed to the nodes, taken out: for a driver that goes
    /// away and sends it by other means. With what is owed and what waits
    /// for its key's turn come the requests in flight that must arrive
    /// ([`Command::must_arrive`](crate::Command::must_arrive)), taken out of
    /// flight: the driver that goes away may not have written them.
    pub fn take_owed(&mut self) -> Vec<Request> {
        let owed = self.links.nodes.iter_mut().flat_map(|node| {
            node.retry_at = None;
            let held: Vec<Request> = node.take_held().collect();
            std::mem::take(&mut node.owed).into_iter().chain(held)
        });
        let mut owed: Vec<Request> = owed.collect();
        let mut in_flight: Vec<RequestId> = (self.links.flights.iter())
            .filter(|(_, flight)| flight.request.command.must_arrive())
            .map(|(id, _)| *id)
            .collect();
        in_flight.sort_unstable();
        for id in in_flight {
            if let Some(flight) = self.links.land(id) {
                self.links.timers.remove(&(flight.timer(), id));
                owed.push(flight.request);
            }
        }
        owed
    }

    /// Closes the client at `now`: every operation that takes or holds a
    /// lock, and every observer, ends with [`OpEvent::Closed`] (an
    /// acquisition, waiting or not, withdraws what it may hold; an
    /// extension, a proclamation stop), and
    /// the lock of each keep-alive and term is released, behind its
    /// extensions on every node. Releases and reads run on to their end,
    /// and what is in flight or owed still completes: the client is done
    /// once [`is_idle`](Self::is_idle). From now on only releases and reads
    /// [start](Self::start).
    pub fn close(&mut self, now: Instant) {
        self.closed = true;
        let ops: Vec<OpId> = self.ops.keys().copied().collect();
        for op in ops {
            let Some(running) = self.ops.get(&op) else {
                continue;
            };
            if running.machine.leaves_nothing() {
                continue;
            }
            let held = running
                .machine
                .held_lock()
                .filter(|_| !planted!(CloseKeepsHeldLocks))
                .cloned();
            let Some(machine) = self.end(op, now) else {
                continue;
            };
            self.outputs.push_back(Output::Event {
                op,
                event: OpEvent::Closed,
                finished: Some(machine),
            });
            if let Some(mut lock) = held {
                self.start(Operation::release(&mut lock, now), now);
            }
        }
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Whether nothing runs, nothing is in flight and nothing is owed.
    pub fn is_idle(&self) -> bool {
        self.ops.is_empty()
            && self.links.flights.is_empty()
            && self
                .links
                .nodes
                .iter()
                .all(|node| node.owed.is_empty() && !node.holds())
    }

    /// Whether nothing is left but what running operations wait for: no
    /// request in flight that no running operation waits for, nothing
    /// owed.
    pub fn is_settled(&self) -> bool {
        let waited_for = |op: Option<OpId>| op.is_some_and(|op| self.ops.contains_key(&op));
        self.links
            .nodes
            .iter()
            .all(|node| node.owed.is_empty() && node.held().all(|(op, _)| waited_for(*op)))
            && self
                .links
                .flights
                .values()
                .all(|flight| waited_for(flight.op))
    }

    /// How many operations run.
    pub fn running(&self) -> usize {
        self.ops.len()
    }

    /// Runs the operations in `work` until none has anything left to do:
    /// sends what they queue, registers their waiters, tells the hub their
    /// hand-overs, reports their events, and gives the hub's deliveries to
    /// their waiters (which may start attempts: they run too).
    fn pump(&mut self, mut work: Vec<OpId>, now: Instant) {
        loop {
            while let Some(op) = work.pop() {
                work.extend(self.step(op, now));
            }
            if self.hub.poll_wanted_changed() {
                self.reconcile_notices(now);
            }
            while let Some(delivery) = self.hub.poll_delivery() {
                if let Some(&op) = self.waiters.get(&delivery.waiter)
                    && let Some(running) = self.ops.get_mut(&op)
                {
                    running
                        .machine
                        .handle_delivery(delivery.notice, delivery.at, now);
                    work.push(op);
                }
            }
            if work.is_empty() {
                return;
            }
        }
    }

    /// One round of [`pump`](Self::pump) for one operation; the operation
    /// it starts, if any (the release of what a lost term may have left).
    fn step(&mut self, op: OpId, now: Instant) -> Option<OpId> {
        let running = self.ops.get_mut(&op)?;
        while let Some(request) = running.machine.poll_request() {
            match self.links.admit(&request, now) {
                Ok(()) => self.links.transmit(&mut self.outputs, Some(op), request),
                Err(error) => running
                    .machine
                    .handle_reply(Reply::to(&request, Err(error)), now),
            }
        }
        if let Some(channels) = running.machine.poll_listen() {
            let by_masters = running.machine.ordered_by_masters();
            let waiter = self.hub.handle_join(channels, by_masters, now);
            running.waiter = Some(waiter);
            self.waiters.insert(waiter, op);
        }
        while let Some(hand_over) = running.machine.poll_hand_over() {
            self.hub.handle_hand_over(&hand_over, now);
        }
        let mut events = Vec::new();
        while let Some(event) = running.machine.poll_event() {
            events.push(event);
        }
        let done = running.machine.is_done();
        let last = if done { events.pop() } else { None };
        for event in events {
            self.outputs.push_back(Output::Event {
                op,
                event,
                finished: None,
            });
        }
        if let Some(at) = running.timeout.take() {
            self.op_timers.remove(&(at, op));
        }
        if let Some(event) = last {
            let running = self.ops.remove(&op).expect("it runs");
            if let Some(waiter) = running.waiter {
                self.waiters.remove(&waiter);
                self.hub.handle_leave(waiter, event.serves_waiter(), now);
            }
            let left = event
                .leaves_value()
                .then(|| running.machine.held_lock().cloned())
                .flatten();
            self.outputs.push_back(Output::Event {
                op,
                event,
                finished: Some(running.machine),
            });
            if let Some(mut lock) = left {
                let release = Operation::release(&mut lock, now).unattended();
                return Some(self.admit(release, now));
            }
        } else if let Some(at) = running.machine.poll_timeout() {
            running.timeout = Some(at);
            self.op_timers.insert((at, op));
        }
        None
    }
}
