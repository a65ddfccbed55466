//! The client's one driver task and the handles on it: the core's
//! [`Client`](redlock_core::Client) decides everything a client does, and
//! one task per client runs it, moving requests to the nodes and answers,
//! notices and time back. Every operation (an acquire, an extension, a
//! release, a keep-alive, a term, a read) is a handle on that task:
//! [`drive`] hands the core's machine over and awaits its events; dropped
//! early, it cancels the operation, and the core sends what undoing it
//! takes.

mod send;
mod task;

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use futures::stream::FuturesUnordered;
use redlock_core::{
    Acquisition, Client, Extension, Inspection, KeptLock, Key, LeaderRead, Machine, NodeId,
    OpEvent, Operation, Proclaim, Release, Request, Settings, Term,
};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{Instrument, debug, debug_span};

#[cfg(test)]
pub(crate) use send::next_quietly;
#[cfg(test)]
pub(crate) use send::send;

use crate::Redlock;
use crate::metrics::{self, Voted};
use crate::node::Node;
use crate::notices::Notices;
use crate::sim::ClientRng;

/// What the handles and the release-notice listeners tell the driver task.
pub(crate) enum Input {
    /// Run `operation`; `key` names it for a cancel; its events go to
    /// `sink` (none: it runs in the background).
    Start {
        key: u64,
        operation: Operation<ClientRng>,
        sink: Option<Sink>,
    },
    /// The handle of operation `key` was dropped before its end.
    Cancel { key: u64 },
    /// Give operation `key` back unfinished ([`Message::Taken`]).
    Take { key: u64 },
    /// Release a held lock ([`Client::release`](redlock_core::Client::release)):
    /// `lock`, or the one the keep-alive or term `kept` holds, stopping it;
    /// its events to `sink`, if any.
    Release {
        kept: Option<u64>,
        lock: Box<redlock_core::Lock>,
        sink: Option<Sink>,
    },
    /// A release notice from `node` on `channel`.
    Notice { node: NodeId, channel: Vec<u8> },
    /// A node confirmed these subscriptions.
    Subscribed {
        channels: Vec<Key>,
        resubscribed: bool,
    },
    /// Say so once nothing runs in the background.
    Settled(tokio::sync::oneshot::Sender<()>),
    /// Abandon an operation handed back ([`Returned`]) that nobody took.
    Abandon(Operation<ClientRng>),
}

/// What an operation's handle hears.
pub(crate) enum Message {
    Event(OpEvent),
    Finished(Finished),
    /// The driver went away (its runtime shut down) before the end: the
    /// operation, to go on with another.
    Returned(Returned),
    /// The operation, given back unfinished as asked ([`Input::Take`]).
    Taken(Operation<ClientRng>),
}

pub(crate) type Sink = mpsc::UnboundedSender<Message>;

/// An operation's final event, with the operation. Dropped untaken (its
/// handle was cancelled after the operation ended, before it read this), a
/// lock it grants is released: nobody else knows of it.
pub(crate) struct Finished {
    event: Option<OpEvent>,
    operation: Option<Operation<ClientRng>>,
    driver: std::sync::Weak<Driver>,
    nodes: Arc<[Arc<Node>]>,
}

impl Finished {
    fn take(mut self) -> (OpEvent, Operation<ClientRng>) {
        let event = self.event.take().expect("taken once");
        let operation = self.operation.take().expect("taken once");
        (event, operation)
    }
}

impl Drop for Finished {
    fn drop(&mut self) {
        let Some(OpEvent::Acquire(redlock_core::AcquireEvent::Acquired(lock))) = self.event.take()
        else {
            return;
        };
        debug!("acquire cancelled as it was granted; releasing");
        let lock = match self.driver.upgrade() {
            Some(driver) => match driver.release(None, Box::new(lock), None) {
                Ok(()) => return,
                Err(lock) => lock,
            },
            None => Box::new(lock),
        };
        // No driver can take it: no runtime here, or this one shuts down.
        let mut lock = *lock;
        let requests =
            Operation::<ClientRng>::Release(Box::new(lock.release(crate::sim::now()).unattended()))
                .undo(crate::sim::now());
        let nodes = Arc::clone(&self.nodes);
        crate::node::as_runtime_drops(move || release_blocking(&nodes, requests));
    }
}

/// An operation a driver that went away handed back to its handle, to go
/// on with another. Dropped untaken (its handle is gone too: the runtime
/// shuts down), it is abandoned: on another driver where one can run, else
/// on blocking connections.
pub(crate) struct Returned {
    operation: Option<Operation<ClientRng>>,
    driver: std::sync::Weak<Driver>,
    nodes: Arc<[Arc<Node>]>,
}

impl Returned {
    fn take(mut self) -> Operation<ClientRng> {
        self.operation.take().expect("taken once")
    }
}

impl Drop for Returned {
    fn drop(&mut self) {
        let Some(operation) = self.operation.take() else {
            return;
        };
        let operation = match self.driver.upgrade() {
            Some(driver) => match driver.send(Input::Abandon(operation)) {
                Ok(()) => return,
                Err(Input::Abandon(operation)) => operation,
                Err(_) => unreachable!("sent an abandon"),
            },
            None => operation,
        };
        // No driver can take it: no runtime here, or this one shuts down.
        let requests = operation.undo(crate::sim::now());
        let nodes = Arc::clone(&self.nodes);
        crate::node::as_runtime_drops(move || release_blocking(&nodes, requests));
    }
}

/// What the driver task shares with the client's handles.
pub(crate) struct Shared {
    pub(crate) settings: Arc<Settings>,
    pub(crate) nodes: Arc<[Arc<Node>]>,
    pub(crate) notices: Option<Arc<Notices>>,
    /// Each node known slow, as the core last said.
    pub(crate) slow: Box<[AtomicBool]>,
}

/// The client's driver: its task, started on first use (and again on the
/// caller's runtime if the runtime it ran on has shut down).
pub(crate) struct Driver {
    shared: Arc<Shared>,
    running: Mutex<Option<Running>>,
    next_key: AtomicU64,
    /// Itself, for the task's handed-back operations ([`Returned`]).
    this: std::sync::Weak<Driver>,
}

struct Running {
    inputs: mpsc::UnboundedSender<Input>,
    task: JoinHandle<()>,
    runtime: tokio::runtime::Handle,
}

impl Driver {
    pub(crate) fn new(
        settings: Arc<Settings>,
        nodes: Arc<[Arc<Node>]>,
        notices: Option<Arc<Notices>>,
    ) -> Arc<Self> {
        let slow = nodes.iter().map(|_| AtomicBool::new(false)).collect();
        Arc::new_cyclic(|this| Self {
            shared: Arc::new(Shared {
                settings,
                nodes,
                notices,
                slow,
            }),
            running: Mutex::new(None),
            next_key: AtomicU64::new(0),
            this: this.clone(),
        })
    }

    /// Sends `input` to the task, starting it if needed; `Err` gives it
    /// back when no task can take it (no runtime here, or this one shuts
    /// down).
    fn send(&self, input: Input) -> Result<(), Input> {
        match self.inputs() {
            Some(inputs) => inputs.send(input).map_err(|error| error.0),
            None => Err(input),
        }
    }

    /// Whether node `index` is known slow.
    pub(crate) fn is_slow(&self, index: usize) -> bool {
        self.shared.slow[index].load(Ordering::Relaxed)
    }

    /// The task's inputs, starting it on the current runtime if it does not
    /// run; `None` outside any runtime with no task running.
    fn inputs(&self) -> Option<mpsc::UnboundedSender<Input>> {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(live) = running.as_ref()
            && !live.task.is_finished()
            && !live.inputs.is_closed()
        {
            return Some(live.inputs.clone());
        }
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let (inputs, receiver) = mpsc::unbounded_channel();
        let task = task::Task {
            client: Client::new(Arc::clone(&self.shared.settings)),
            shared: Arc::clone(&self.shared),
            inputs: receiver,
            weak: inputs.downgrade(),
            in_flight: FuturesUnordered::new(),
            aborts: HashMap::new(),
            sinks: HashMap::new(),
            keys: HashMap::new(),
            settled: Vec::new(),
            connections: self
                .shared
                .nodes
                .iter()
                .map(|node| node.connections())
                .collect(),
            orphaned: false,
            driver: self.this.clone(),
        };
        // Not a child of the operation that happens to start it.
        let span = debug_span!(parent: None, "redlock.driver");
        let task = runtime.spawn(task.run().instrument(span));
        *running = Some(Running {
            inputs: inputs.clone(),
            task,
            runtime,
        });
        Some(inputs)
    }

    /// Starts `operation` with its events to `sink`; its key for a cancel.
    /// `Err` gives it back when there is no runtime to run it on.
    fn start(
        &self,
        operation: Operation<ClientRng>,
        sink: Option<Sink>,
    ) -> Result<u64, Operation<ClientRng>> {
        let key = self.next_key.fetch_add(1, Ordering::Relaxed);
        let Some(inputs) = self.inputs() else {
            return Err(operation);
        };
        inputs
            .send(Input::Start {
                key,
                operation,
                sink,
            })
            .map_err(|error| match error.0 {
                Input::Start { operation, .. } => operation,
                _ => unreachable!("sent a start"),
            })?;
        Ok(key)
    }

    /// Cancels operation `key` ([`Client::cancel`]); one that ended is
    /// left alone.
    pub(crate) fn cancel(&self, key: u64) {
        self.tell(Input::Cancel { key });
    }

    fn take(&self, key: u64) {
        self.tell(Input::Take { key });
    }

    /// Tells the running task, if one runs.
    fn tell(&self, input: Input) {
        let running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(live) = running.as_ref() {
            let _ = live.inputs.send(input);
        }
    }

    /// The flavour of the runtime the task runs on, if it runs.
    pub(crate) fn runtime_flavor(&self) -> Option<tokio::runtime::RuntimeFlavor> {
        let running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        running
            .as_ref()
            .filter(|live| !live.task.is_finished() && !live.inputs.is_closed())
            .map(|live| live.runtime.runtime_flavor())
    }

    /// Releases `lock`, or the lock the keep-alive or term `kept` holds
    /// once stopped, behind everything sent so far ([`Input::Release`]).
    /// `Err` gives the lock back when there is no runtime to run it on.
    pub(crate) fn release(
        &self,
        kept: Option<u64>,
        lock: Box<redlock_core::Lock>,
        sink: Option<Sink>,
    ) -> Result<(), Box<redlock_core::Lock>> {
        self.send(Input::Release { kept, lock, sink })
            .map_err(|input| match input {
                Input::Release { lock, .. } => lock,
                _ => unreachable!("sent a release"),
            })
    }

    /// Waits until nothing runs in the background: every request no
    /// handle waits for answered or given up, nothing owed.
    pub(crate) async fn settled(&self) {
        // No task, nothing in the background: none is started for this.
        let inputs = {
            let running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
            match running.as_ref() {
                Some(live) if !live.task.is_finished() && !live.inputs.is_closed() => {
                    live.inputs.clone()
                }
                _ => return,
            }
        };
        let (done, settled) = tokio::sync::oneshot::channel();
        if inputs.send(Input::Settled(done)).is_ok() {
            let _ = settled.await;
        }
    }
}

/// A machine of the core a handle can run on the driver.
pub(crate) trait Op: Machine + Sized {
    fn wrap(self: Box<Self>) -> Operation<ClientRng>;
    fn unwrap(operation: Operation<ClientRng>) -> Box<Self>;
    fn event(event: OpEvent) -> Self::Event;
}

macro_rules! op {
    ($machine:ty, $variant:ident) => {
        impl Op for $machine {
            fn wrap(self: Box<Self>) -> Operation<ClientRng> {
                Operation::$variant(self)
            }
            fn unwrap(operation: Operation<ClientRng>) -> Box<Self> {
                match operation {
                    Operation::$variant(machine) => machine,
                    _ => unreachable!("the driver gives back the operation it was given"),
                }
            }
            fn event(event: OpEvent) -> Self::Event {
                match event {
                    OpEvent::$variant(event) => event,
                    _ => unreachable!("an operation reports its own machine's events"),
                }
            }
        }
    };
}

op!(Acquisition<ClientRng>, Acquire);
op!(Extension, Extend);
op!(Release, Release);
op!(KeptLock, KeepAlive);
op!(Term, Term);
op!(Proclaim, Proclaim);
op!(LeaderRead, ReadLeader);
op!(Inspection, Inspect);

/// Runs `machine` to its final event on the client's driver, and gives it
/// back with it (see [`Machine`] for what a machine does; the driver does
/// the rest). Dropped before the final event (a cancelled future), it
/// cancels the operation: the core abandons it and sends what undoing it
/// takes (an acquisition's withdraws), in the background.
pub(crate) async fn drive<M: Op>(machine: Box<M>, client: &Redlock) -> (M::Event, Box<M>)
where
    M::Event: Debug + Voted,
{
    drive_with(machine, client, |event| debug!(event = ?event, "retrying")).await
}

/// [`drive`], handing every event before the final one to `on_event`: for a
/// machine whose events along the way matter (a kept-alive lock's
/// extensions).
pub(crate) async fn drive_with<M: Op>(
    machine: Box<M>,
    client: &Redlock,
    on_event: impl FnMut(&M::Event) + Send,
) -> (M::Event, Box<M>)
where
    M::Event: Debug + Voted,
{
    let never = std::future::pending();
    match drive_until(machine, client, |_| {}, on_event, never).await {
        Ok(done) => done,
        Err(_) => unreachable!("never stopped"),
    }
}

/// [`drive_with`], telling `on_start` the operation's key (for a cancel
/// from elsewhere, [`Driver::cancel`]) and giving the machine back
/// unfinished (`Err`) once `stop` completes first.
pub(crate) async fn drive_until<M: Op>(
    mut machine: Box<M>,
    client: &Redlock,
    mut on_start: impl FnMut(u64),
    mut on_event: impl FnMut(&M::Event) + Send,
    stop: impl Future<Output = ()>,
) -> Result<(M::Event, Box<M>), Box<M>>
where
    M::Event: Debug + Voted,
{
    let driver = client.driver();
    let mut rounds = metrics::Rounds::new();
    let mut stop = std::pin::pin!(stop);
    let mut stopping = false;
    loop {
        let (sink, mut messages) = mpsc::unbounded_channel();
        let key = match driver.start(machine.wrap(), Some(sink)) {
            Ok(key) => key,
            Err(_) => panic!("a redlock operation runs on a Tokio runtime"),
        };
        on_start(key);
        let mut cancel = Cancel {
            driver,
            key: Some(key),
        };
        if stopping {
            driver.take(key);
        }
        loop {
            let message = tokio::select! {
                biased;
                message = messages.recv() => message,
                () = &mut stop, if !stopping => {
                    stopping = true;
                    driver.take(key);
                    continue;
                }
            };
            match message {
                Some(Message::Event(event)) => {
                    let event = M::event(event);
                    rounds.event(client.node_metrics(), &event);
                    on_event(&event);
                }
                Some(Message::Finished(finished)) => {
                    cancel.key = None;
                    let (event, operation) = finished.take();
                    let event = M::event(event);
                    rounds.event(client.node_metrics(), &event);
                    return Ok((event, M::unwrap(operation)));
                }
                Some(Message::Taken(operation)) => {
                    cancel.key = None;
                    return Err(M::unwrap(operation));
                }
                Some(Message::Returned(returned)) => {
                    cancel.key = None;
                    machine = M::unwrap(returned.take());
                    break;
                }
                // Cancelled by its owner (a guard that stopped its
                // keep-alive), which is dropping this future.
                None => std::future::pending().await,
            }
        }
    }
}

/// Cancels its operation when dropped before the end.
struct Cancel<'a> {
    driver: &'a Driver,
    key: Option<u64>,
}

impl Drop for Cancel<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            debug!("cancelled; the core undoes what is in flight");
            self.driver.cancel(key);
        }
    }
}

/// Sends `requests` (releases, withdraws, leaves) on blocking connections,
/// the nodes in parallel: for when no Tokio runtime can (see
/// [`Node::send_blocking`]). Bounded by one connect timeout plus one
/// per-node timeout. The answers are not read.
pub(crate) fn release_blocking(nodes: &[Arc<Node>], requests: Vec<Request>) {
    if !crate::node::check_may_block("a release on blocking connections") {
        return;
    }
    std::thread::scope(|scope| {
        for request in &requests {
            let node = &nodes[request.node.0];
            scope.spawn(move || node.send_blocking(request));
        }
    });
}

/// Sends every request of `machine` (a release) on blocking connections.
pub(crate) fn release_machine_blocking<M: Machine>(client: &Redlock, mut machine: M) {
    let requests = std::iter::from_fn(|| machine.poll_request()).collect();
    release_blocking(client.node_handles(), requests);
}

#[cfg(test)]
mod tests;
