//! The client's one driver task and the handles on it: the core's
//! [`Client`](redlock_core::Client) decides everything a client does, and
//! one task per client runs it, moving requests to the nodes and answers,
//! notices and time back. Every operation (an acquire, an extension, a
//! release, a keep-alive, a term, a read) is a handle on that task:
//! [`drive`] hands the core's machine over and awaits its events; dropped
//! early, it cancels the operation, and the core sends what undoing it
//! takes.

mod handle;
mod mailbox;
mod message;
mod pubsub;
mod send;
mod task;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use redlock_core::{OpEvent, Operation, Request, Settings};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{Instrument, debug_span};

pub(crate) use handle::{drive, kind, run, stream};
pub(crate) use mailbox::mailbox;
pub(crate) use message::{Finished, Returned};
pub(crate) use pubsub::NoticeNodes;
#[cfg(test)]
pub(crate) use send::next_quietly;
#[cfg(test)]
pub(crate) use send::send;

use crate::node::Node;
use crate::sim::ClientRng;

/// What the handles tell the driver task.
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
    /// Resign the term operation `key` renews
    /// ([`Client::resign`](redlock_core::Client::resign)); its release's
    /// report to `back`, which is dropped if the term ends first (or ended).
    Resign {
        key: u64,
        back: tokio::sync::oneshot::Sender<redlock_core::ReleaseReport>,
    },
    /// Release a held lock ([`Client::release`](redlock_core::Client::release)):
    /// `lock`, or the one the keep-alive or term `kept` holds, stopping it;
    /// its events to `sink`, if any: a thread outside any runtime that
    /// waits for it (its process may end next), so it reports once every
    /// node answered or timed out.
    Release {
        kept: Option<u64>,
        lock: Box<redlock_core::Lock>,
        sink: Option<Sink>,
    },
    /// Say so once nothing runs in the background.
    Settled(tokio::sync::oneshot::Sender<()>),
    /// Close the client ([`Client::close`](redlock_core::Client::close)),
    /// first releasing these held locks as [`Input::Release`] does (the
    /// live guards'); the task ends once the core is idle.
    Close {
        releases: Vec<(Option<u64>, Box<redlock_core::Lock>)>,
    },
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
}

/// Where an operation's messages go.
pub(crate) enum Sink {
    /// To a handle that awaits them ([`drive`]).
    Channel(mailbox::Sender),
    /// Told on the driver task, at once: for a handle with no task of its
    /// own (a guard's keep-alive, a leadership's renewal). Keep it short.
    Callback(Box<dyn FnMut(Message) + Send>),
}

impl Sink {
    fn send(&mut self, message: Message) {
        match self {
            // A handle that is gone drops what it is sent: a final event
            // then releases what it grants (`Finished`).
            Sink::Channel(channel) => channel.send(message),
            Sink::Callback(callback) => callback(message),
        }
    }
}

/// What the driver task shares with the client's handles.
pub(crate) struct Shared {
    pub(crate) settings: Arc<Settings>,
    pub(crate) nodes: Arc<[Arc<Node>]>,
    /// What opens each node's pub/sub connection for release notices.
    pub(crate) notices: Arc<NoticeNodes>,
    /// Each node known slow, as the core last said.
    pub(crate) slow: Box<[AtomicBool]>,
    /// Set in a simulation: the core's randomness comes from its seed.
    pub(crate) simulation: Option<crate::sim::Simulation>,
    /// Held by the task that runs, for as long as it runs: a task started
    /// while another still runs (a release that came after the shutdown
    /// began, to a task of its own) waits for it to end. Two cores at once
    /// would each keep their own per-key order on a node, not one order: a
    /// cluster node's release could overtake the acquire the closing task
    /// still waits on, and leave the key held by nobody.
    one_at_a_time: tokio::sync::Mutex<()>,
}

/// The client's driver: its task, started on first use (and again on the
/// caller's runtime if the runtime it ran on has shut down).
pub(crate) struct Driver {
    shared: Arc<Shared>,
    running: Mutex<Option<Running>>,
    /// Set by [`close`](Self::close): a task started from now on starts
    /// closed, runs only releases and reads, and ends once idle.
    closed: AtomicBool,
    /// The tasks started on a closed driver that may not have ended: the
    /// shutdown awaits them too.
    late: Mutex<Vec<JoinHandle<()>>>,
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
        notices: Arc<NoticeNodes>,
        simulation: Option<crate::sim::Simulation>,
    ) -> Arc<Self> {
        let slow = nodes.iter().map(|_| AtomicBool::new(false)).collect();
        Arc::new_cyclic(|this| Self {
            shared: Arc::new(Shared {
                settings,
                nodes,
                notices,
                slow,
                simulation,
                one_at_a_time: tokio::sync::Mutex::new(()),
            }),
            running: Mutex::new(None),
            closed: AtomicBool::new(false),
            late: Mutex::default(),
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

    /// Starts the task now, on the current runtime, if it does not run (at
    /// build): the core hears what each connection found, and a node down
    /// is connected to as the core asks, before the first operation.
    pub(crate) fn start_now(&self) {
        let _ = self.inputs();
    }

    /// How many nodes have a release-notice connection up that subscribed.
    pub(crate) fn notice_links(&self) -> usize {
        self.shared.notices.listening()
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
        let live = self.spawn()?;
        let inputs = live.inputs.clone();
        // A closed client's task is its caller's alone: it ends once that
        // caller's input is done (no sender is kept here).
        if self.closed.load(Ordering::Relaxed) {
            let mut late = self.late.lock().unwrap_or_else(PoisonError::into_inner);
            late.retain(|task| !task.is_finished());
            late.push(live.task);
        } else {
            *running = Some(live);
        }
        Some(inputs)
    }

    /// A new task on the current runtime, if there is one.
    fn spawn(&self) -> Option<Running> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let (inputs, receiver) = mpsc::unbounded_channel();
        let task = task::Task::new(
            Arc::clone(&self.shared),
            receiver,
            self.this.clone(),
            self.closed.load(Ordering::Relaxed),
        );
        let shared = Arc::clone(&self.shared);
        let overlap = planted!(DriverTasksOverlap);
        let run = async move {
            let _turn = if overlap {
                None
            } else {
                Some(shared.one_at_a_time.lock().await)
            };
            crate::metrics::timed(task.run()).await;
        };
        // Not a child of the operation that happens to start it.
        let span = debug_span!(parent: None, "redlock.driver");
        let task = runtime.spawn(run.instrument(span));
        Some(Running {
            inputs,
            task,
            runtime,
        })
    }

    /// Starts `operation` with its events to `sink`; its key for a cancel.
    /// `Err` gives it back when there is no runtime to run it on.
    pub(crate) fn start(
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

    /// Resigns the term operation `key` renews: the release's report;
    /// `None` if the term ended first.
    pub(crate) async fn resign(&self, key: u64) -> Option<redlock_core::ReleaseReport> {
        let (back, report) = tokio::sync::oneshot::channel();
        self.tell(Input::Resign { key, back });
        report.await.ok()
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

    /// Closes the client's core, first releasing `releases` (the live
    /// guards' locks, with their keep-alives), and waits until its task
    /// has ended: every operation that takes or holds a lock ended
    /// ([`OpEvent::Closed`](redlock_core::OpEvent::Closed)), and every
    /// request answered or given up.
    pub(crate) async fn close(&self, releases: Vec<(Option<u64>, Box<redlock_core::Lock>)>) {
        self.closed.store(true, Ordering::Relaxed);
        if let Some(task) = self.close_task(releases) {
            let _ = task.await;
        }
        // Tasks started on the closed driver meanwhile (the release of a
        // guard whose lock was granted as the shutdown began): awaited too.
        loop {
            let late =
                std::mem::take(&mut *self.late.lock().unwrap_or_else(PoisonError::into_inner));
            if late.is_empty() {
                return;
            }
            for task in late {
                let _ = task.await;
            }
        }
    }

    /// Tells the running task (or one started closed for `releases`) to
    /// close, and gives it back to be awaited.
    fn close_task(
        &self,
        releases: Vec<(Option<u64>, Box<redlock_core::Lock>)>,
    ) -> Option<JoinHandle<()>> {
        let running = self
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let live = match running {
            Some(live) if !live.task.is_finished() && !live.inputs.is_closed() => live,
            // No task: one starts closed for the releases, if any.
            _ if releases.is_empty() => return None,
            _ => match self.spawn() {
                Some(live) => live,
                // Polled outside any Tokio runtime: on blocking
                // connections, as a guard dropped there is.
                None => {
                    for (_, lock) in releases {
                        release_lock_blocking(&self.shared.nodes, *lock);
                    }
                    return None;
                }
            },
        };
        let Running { inputs, task, .. } = live;
        let _ = inputs.send(Input::Close { releases });
        // The task ends once no handle can send it anything (this was the
        // last sender kept) and everything sent is answered or given up.
        drop(inputs);
        Some(task)
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

/// Undoes `operation` where no driver can take it (no runtime here, or
/// this one shuts down): what must reach the nodes
/// ([`Operation::undo`]: a release's deletes, an attempt's withdraws, a
/// queue's leaves) goes out on blocking connections.
pub(crate) fn undo_blocking(nodes: &Arc<[Arc<Node>]>, operation: Operation<ClientRng>) {
    let requests = operation.undo(crate::sim::now());
    let nodes = Arc::clone(nodes);
    crate::node::as_runtime_drops(move || release_blocking(&nodes, requests));
}

/// Releases `lock` where no driver can take it, on blocking connections:
/// nobody reads the answers, so the release publishes for this client's
/// waiters too, which no hand-over tells.
pub(crate) fn release_lock_blocking(nodes: &Arc<[Arc<Node>]>, mut lock: redlock_core::Lock) {
    let release = Operation::release(&mut lock, crate::sim::now()).unattended();
    undo_blocking(nodes, release);
}

#[cfg(test)]
mod tests;
