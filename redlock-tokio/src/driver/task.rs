//! The client's one driver task: it owns the core's [`Client`] and moves
//! bytes and time for it, nothing else.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use futures::future::{AbortHandle, Abortable, BoxFuture};
use futures::stream::FuturesUnordered;
use redlock_core::{
    Client, NodeError, NodeErrorKind, NodeId, OpId, Output, Reply, Request, RequestId,
};
use tokio::sync::mpsc;
use tracing::debug;

use super::pubsub::{Event, PubSub};
use super::send::{Sent, Timer, next_quietly, send};
use super::{Input, Message, Shared, Sink};
use crate::node::{Landed, TakenWire};
use crate::sim::ClientRng;

mod ending;
mod health;
mod wires;

use wires::{poll_wires, write_wires};

/// A map keyed by the client's own ids: a fast hash, no seed (no user
/// input reaches the keys).
type IdMap<K, V> = HashMap<K, V, foldhash::fast::FixedState>;

/// The driver tasks started so far in this process: each one's number
/// tells its answers from an earlier task's on a wire it took over.
static TASKS: AtomicU64 = AtomicU64::new(0);

/// What the driver task owns.
pub(super) struct Task {
    /// This task's number ([`TASKS`]).
    number: u64,
    client: Client<ClientRng>,
    shared: Arc<Shared>,
    inputs: mpsc::UnboundedReceiver<Input>,
    /// Each node's pub/sub connection for release notices.
    pubsub: PubSub,
    in_flight: FuturesUnordered<Abortable<Flight>>,
    /// The flight each request in flight went in.
    flight_of: IdMap<RequestId, u64>,
    /// Each flight's abort, and how many of its requests the core still
    /// waits for: it is dropped when none.
    flights: IdMap<u64, (AbortHandle, usize)>,
    next_flight: u64,
    /// The requests the core emitted in this turn, per node, in order: sent
    /// at the end of the turn, each node's as one flight.
    outgoing: Box<[(Vec<RequestId>, Vec<Request>)]>,
    /// Who hears each operation's events, and the handle's name of it (for
    /// a cancel); an operation without one runs in the background (a
    /// dropped guard's release).
    sinks: IdMap<OpId, (Option<u64>, Sink)>,
    /// The handles' names of their operations.
    keys: IdMap<u64, OpId>,
    /// Who waits for the report of each term's resignation.
    resigns: IdMap<OpId, tokio::sync::oneshot::Sender<redlock_core::ReleaseReport>>,
    /// Calls of `Redlock::shutdown` waiting for the background to settle.
    settled: Vec<tokio::sync::oneshot::Sender<()>>,
    /// The connection attempts the core asked for, each with its node.
    connecting: FuturesUnordered<Attempt>,
    /// The wires of the plain masters' connections: each writes what is
    /// queued on its connection and reads the answers, polled here; the
    /// answers to what this task sent straight onto them
    /// ([`Node::send_tagged`](crate::node::Node::send_tagged)) come out
    /// into `landed`.
    /// (In a mutex only so that two branches of the loop's `select!` may
    /// each poll them, one after the other: never contended.)
    wires: Mutex<Vec<(usize, TakenWire)>>,
    landed: Vec<Landed>,
    /// Whether the task let the others run once since it last wrote
    /// ([`write_wires`]).
    yielded: bool,
    /// Each node's count of broken connections last seen: a new break is
    /// told to the core.
    breaks: Box<[u64]>,
    /// Whether every handle is gone: the task ends once idle.
    orphaned: bool,
    /// The driver this task runs for, for what it hands back.
    driver: std::sync::Weak<super::Driver>,
}

/// A connection attempt to a node, by its index: what its server is, or
/// why it failed.
type Attempt = BoxFuture<'static, (usize, Result<redlock_core::Connected, NodeError>)>;

/// Requests sent to one node in one turn, with their names.
struct Flight {
    ids: Vec<RequestId>,
    sent: Sent,
}

impl std::future::Future for Flight {
    type Output = (Vec<RequestId>, Vec<Reply>);

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.sent)
            .poll(cx)
            .map(|replies| (std::mem::take(&mut self.ids), replies))
    }
}

impl Task {
    pub(super) fn new(
        shared: Arc<Shared>,
        inputs: mpsc::UnboundedReceiver<Input>,
        driver: std::sync::Weak<super::Driver>,
        closed: bool,
    ) -> Self {
        let rng = crate::sim::rng(shared.simulation.as_ref());
        let mut client = Client::new(Arc::clone(&shared.settings), rng);
        if closed {
            client.close(crate::sim::now());
        }
        Self {
            number: TASKS.fetch_add(1, Ordering::Relaxed),
            client,
            inputs,
            pubsub: PubSub::new(Arc::clone(&shared.notices)),
            in_flight: FuturesUnordered::new(),
            flight_of: IdMap::default(),
            flights: IdMap::default(),
            next_flight: 0,
            outgoing: shared.nodes.iter().map(|_| Default::default()).collect(),
            sinks: IdMap::default(),
            keys: IdMap::default(),
            resigns: IdMap::default(),
            settled: Vec::new(),
            connecting: FuturesUnordered::new(),
            wires: Mutex::new(Vec::new()),
            landed: Vec::new(),
            yielded: false,
            breaks: shared.nodes.iter().map(|_| 0).collect(),
            orphaned: false,
            driver,
            shared,
        }
    }

    /// The loop: inputs in, outputs out, until every handle is gone and
    /// nothing is left to do.
    pub(super) async fn run(mut self) {
        let mut timer = Timer::new();
        self.links_at_start(crate::sim::now());
        loop {
            self.flush();
            if self.orphaned && self.client.is_idle() {
                debug!(
                    "client dropped or shut down, everything sent answered or given up; driver ends"
                );
                return;
            }
            let sleep = self.client.poll_timeout().map(|at| timer.until(at));
            let wired = !self
                .wires
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner)
                .is_empty();
            let sleep = async {
                match sleep {
                    Some(sleep) => sleep.await,
                    None => std::future::pending().await,
                }
            };
            // Biased: a reply already in counts before the timer that raced
            // it, and a run is the same on every replay.
            tokio::select! {
                biased;
                // First: what the wires read, the answers to this task's
                // own requests, and what completes requests polled next,
                // in the same turn; a wire that ends closed its connection.
                () = std::future::poll_fn(|cx| poll_wires(&self.wires, &mut self.landed, cx)),
                    if wired => {
                    self.take_landed(crate::sim::now());
                }
                Some(done) = std::future::poll_fn(|cx| next_quietly(&mut self.in_flight, cx)),
                    if !self.in_flight.is_empty() => {
                    let now = crate::sim::now();
                    if let Ok((ids, replies)) = done {
                        self.replies(ids, replies, now);
                    }
                    // More answers already in are taken in the same turn.
                    while let std::task::Poll::Ready(Some(done)) =
                        next_quietly(&mut self.in_flight, &mut std::task::Context::from_waker(std::task::Waker::noop()))
                    {
                        if let Ok((ids, replies)) = done {
                            self.replies(ids, replies, now);
                        }
                    }
                }
                Some((node, result)) = self.connecting.next(), if !self.connecting.is_empty() => {
                    let now = crate::sim::now();
                    match result {
                        Ok(found) => {
                            self.take_wire(node);
                            self.client.handle_connected(NodeId(node), &found, now);
                        }
                        Err(_) => self.client.handle_connect_failed(NodeId(node), now),
                    }
                }
                event = std::future::poll_fn(|cx| self.pubsub.poll_event(cx)) => {
                    let now = crate::sim::now();
                    match event {
                        Event::Connected(node) => self.client.handle_notices_connected(node, now),
                        Event::Lost(node) => self.client.handle_notices_lost(node, now),
                        Event::Subscribed(node) => self.client.handle_subscribed(node, now),
                        Event::Unsubscribed(node) => self.client.handle_unsubscribed(node, now),
                        Event::Notice(node, channel) => self.client.handle_notice(node, &channel, now),
                    }
                }
                input = self.inputs.recv(), if !self.orphaned => match input {
                    Some(input) => {
                        self.input(input);
                        while let Ok(input) = self.inputs.try_recv() {
                            self.input(input);
                        }
                    }
                    None => {
                        self.orphaned = true;
                        self.client.close(crate::sim::now());
                    }
                },
                () = sleep => {
                    timer.fired();
                    let now = crate::sim::now();
                    self.links_broken(now);
                    self.client.handle_timeout(now);
                }
                // Last, when nothing else is ready: the wires write what
                // this task queued since it last got here, so that what
                // its operations asked of a node meanwhile leaves in one
                // write (one task alone waits for nothing: it gets here
                // at once). Ready only when a connection ended meanwhile.
                () = std::future::poll_fn(|cx| write_wires(&self.wires, &mut self.yielded, cx)),
                    if wired => {}
            }
        }
    }

    /// A flight's replies: each one the core still waits for goes in.
    fn replies(&mut self, ids: Vec<RequestId>, replies: Vec<Reply>, now: std::time::Instant) {
        for (id, reply) in ids.into_iter().zip(replies) {
            let Some(flight) = self.flight_of.remove(&id) else {
                // Forgotten by the core while its flight was out.
                continue;
            };
            self.landed(flight);
            self.answered(id, reply, now);
        }
        self.links_broken(now);
    }

    /// The reply to request `id`, for the core; a node that answered may
    /// take blocking releases again ([`Node::heard_from`](crate::node::Node::heard_from)).
    fn answered(&mut self, id: RequestId, reply: Reply, now: std::time::Instant) {
        if !matches!(&reply.result, Err(error) if error.kind == NodeErrorKind::Connection) {
            self.shared.nodes[reply.node.0].heard_from();
        }
        self.client.handle_reply(id, reply, now);
    }

    /// One request of `flight` is no longer waited for: the flight goes
    /// when none of its requests is.
    fn landed(&mut self, flight: u64) -> Option<AbortHandle> {
        let (_, waited) = self.flights.get_mut(&flight)?;
        *waited -= 1;
        if *waited > 0 {
            return None;
        }
        self.flights.remove(&flight).map(|(abort, _)| abort)
    }

    /// Sends what this turn emitted: each node's requests in one write,
    /// in the order the core emitted them: straight onto a plain master's
    /// connection, or else as one flight (a cluster node's one by one: it
    /// routes each request on its own).
    fn send_outgoing(&mut self) {
        for node in 0..self.outgoing.len() {
            if self.outgoing[node].0.is_empty() {
                continue;
            }
            let wire = self.polled(node);
            let (ids, requests) = &mut self.outgoing[node];
            if let Some(wire) = wire
                && self.shared.nodes[node].send_tagged(self.number, wire, ids, requests)
            {
                ids.clear();
                requests.clear();
                continue;
            }
            let (ids, requests) = std::mem::take(&mut self.outgoing[node]);
            if self.shared.nodes[node].is_cluster() {
                for (id, request) in ids.into_iter().zip(requests) {
                    self.take_off(vec![id], vec![request]);
                }
            } else {
                self.take_off(ids, requests);
            }
        }
    }

    fn take_off(&mut self, ids: Vec<RequestId>, requests: Vec<Request>) {
        let flight = self.next_flight;
        self.next_flight += 1;
        for id in &ids {
            self.flight_of.insert(*id, flight);
        }
        let waited = ids.len();
        let sent = send(&self.shared.nodes, requests);
        let (out, abort) = futures::future::abortable(Flight { ids, sent });
        self.flights.insert(flight, (abort, waited));
        self.in_flight.push(out);
    }

    fn input(&mut self, input: Input) {
        let now = crate::sim::now();
        match input {
            Input::Start {
                key,
                operation,
                sink,
            } => {
                let op = self.client.start(operation, now);
                if let Some(sink) = sink {
                    self.sinks.insert(op, (Some(key), sink));
                    self.keys.insert(key, op);
                }
            }
            Input::Cancel { key } => {
                if let Some(op) = self.keys.remove(&key) {
                    self.sinks.remove(&op);
                    self.resigns.remove(&op);
                    self.client.cancel(op, now);
                }
            }
            Input::Release { kept, lock, sink } => {
                let kept = kept.and_then(|key| self.keys.remove(&key));
                if let Some(op) = kept {
                    self.sinks.remove(&op);
                    self.resigns.remove(&op);
                }
                let op = self.client.release(kept, *lock, sink.is_some(), now);
                if let Some(sink) = sink {
                    self.sinks.insert(op, (None, sink));
                }
            }
            Input::Resign { key, back } => {
                if let Some(&op) = self.keys.get(&key)
                    // Or resigning already, for a resign that was dropped:
                    // its report comes to this one.
                    && (self.client.resign(op, now) || self.resigns.contains_key(&op))
                {
                    self.resigns.insert(op, back);
                }
            }
            Input::Settled(done) => self.settled.push(done),
            Input::Close { releases } => {
                for (kept, lock) in releases {
                    self.input(Input::Release {
                        kept,
                        lock,
                        sink: None,
                    });
                }
                self.client.close(now);
            }
            Input::Abandon(operation) => self.client.abandon(operation, now),
        }
    }

    /// Tells the core, as the task starts, which nodes are connected (with
    /// what their servers are) and which are not: the core asks for a
    /// connection to those.
    fn links_at_start(&mut self, now: std::time::Instant) {
        let shared = Arc::clone(&self.shared);
        for (index, node) in shared.nodes.iter().enumerate() {
            self.breaks[index] = node.breaks();
            self.take_wire(index);
            if node.is_connected() {
                self.client
                    .handle_connected(NodeId(index), &node.server(), now);
            } else {
                self.client.handle_disconnected(NodeId(index), now);
            }
        }
    }

    /// Tells the core of the connections that broke since last looked at.
    fn links_broken(&mut self, now: std::time::Instant) {
        for (index, node) in self.shared.nodes.iter().enumerate() {
            let breaks = node.breaks();
            if breaks != self.breaks[index] {
                self.breaks[index] = breaks;
                self.client.handle_disconnected(NodeId(index), now);
            }
        }
    }

    /// Does what the core asks, in order.
    fn flush(&mut self) {
        while let Some(output) = self.client.poll_output() {
            match output {
                Output::Transmit { id, request } => {
                    let (ids, requests) = &mut self.outgoing[request.node.0];
                    ids.push(id);
                    requests.push(request);
                }
                Output::Forget(id) => match self.flight_of.remove(&id) {
                    Some(flight) => {
                        if let Some(abort) = self.landed(flight) {
                            abort.abort();
                        }
                    }
                    // Emitted in this same turn: not sent at all.
                    None => self.unsend(id),
                },
                Output::Event {
                    op,
                    event,
                    finished,
                } => {
                    let resigned = match &event {
                        redlock_core::OpEvent::Term(redlock_core::TermEvent::Resigned(report)) => {
                            self.resigns.remove(&op).map(|back| (back, report.clone()))
                        }
                        _ => None,
                    };
                    let message = match finished {
                        Some(operation) => {
                            self.resigns.remove(&op);
                            let Some((key, mut sink)) = self.sinks.remove(&op) else {
                                continue;
                            };
                            if let Some(key) = key {
                                self.keys.remove(&key);
                            }
                            let finished = self.finish(event, operation);
                            sink.send(Message::Finished(finished));
                            continue;
                        }
                        None => Message::Event(event),
                    };
                    if let Some((_, sink)) = self.sinks.get_mut(&op) {
                        sink.send(message);
                    }
                    // After its handle heard it: a resignation that freed
                    // the name is told there first.
                    if let Some((back, report)) = resigned {
                        let _ = back.send(report);
                    }
                }
                Output::Health(change) => self.health(change),
                Output::ConnectNotices(node) => self.pubsub.connect(node),
                Output::Subscribe { node, channels } => self.pubsub.change(node, channels, true),
                Output::Unsubscribe { node, channels } => self.pubsub.change(node, channels, false),
                Output::Connect(node) => {
                    let attempt = Arc::clone(&self.shared.nodes[node.0]).reconnect();
                    self.connecting
                        .push(Box::pin(async move { (node.0, attempt.await) }));
                }
                _ => {}
            }
        }
        self.send_outgoing();
        self.pubsub
            .nodes()
            .set_listening(self.client.notice_links_up());
        if !self.settled.is_empty() && self.is_settled() {
            for done in self.settled.drain(..) {
                let _ = done.send(());
            }
        }
    }

    /// Takes back request `id`, emitted in this turn and not sent yet.
    fn unsend(&mut self, id: RequestId) {
        for (ids, requests) in self.outgoing.iter_mut() {
            if let Some(at) = ids.iter().position(|queued| *queued == id) {
                ids.remove(at);
                requests.remove(at);
                return;
            }
        }
    }

    /// Whether nothing runs in the background: every operation has a
    /// handle waiting for it, and nothing else is in flight or owed.
    fn is_settled(&self) -> bool {
        self.client.running() == self.sinks.len() && self.client.is_settled()
    }
}
