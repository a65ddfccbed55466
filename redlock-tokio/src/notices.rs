//! Release notices: waking a blocked acquire the moment a lock is released,
//! instead of letting it sleep out its retry delay.
//!
//! A release script that frees a lock publishes an empty message on
//! `<key>\0released` ([`Settings::release_channel`](redlock_core::Settings::release_channel));
//! an exclusive lock's only while a waiter's mark lives, which the core has
//! every listening waiter set before each attempt
//! ([`scripts::MARK_WAITING`](redlock_core::scripts::MARK_WAITING)). Nothing
//! here changes for it: the marks are requests like any other.
//! This module only moves bytes: it subscribes to the channels the core's
//! [`Client`](redlock_core::Client) wants ([`Output::Subscribe`](redlock_core::Output::Subscribe)),
//! and hands each message, with the node it came from, and each confirmed
//! subscription to the client's driver task, whose core decides what it
//! means and which waiter hears it.
//!
//! The shape, chosen so that it can never slow or fail a lock:
//!
//! - **One pub/sub connection per node and client**, made lazily by a
//!   listener task the first time an acquire has to wait, and shared by every
//!   waiting acquire of the client (and its clones).
//! - **Subscriptions follow the waiters**, as the core says: a channel is
//!   subscribed when the first waiter for it appears and unsubscribed when
//!   the last one leaves. No waiter ever waits for Redis here.
//! - **Level-triggered listeners.** Each listener compares the channels it
//!   is subscribed to with the channels wanted now, and fixes the
//!   difference; a lost connection, a timed-out `SUBSCRIBE` or a node that
//!   comes back is handled by reconnecting (with backoff, only while
//!   something is wanted) and subscribing to the whole wanted set again.
//! - **Nothing depends on it.** A node whose pub/sub connection is down,
//!   paused or slow just sends no notices: the acquire still retries on its
//!   timer.
//!

use std::collections::BTreeSet;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use rand::SeedableRng;
use rand::rngs::StdRng;
use redis::aio::{PubSubSink, PubSubStream};
use redlock_core::{Backoff, Key, NodeId};
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, debug_span, warn};

use crate::driver::Input;
use crate::metrics;
use crate::node::map_error;
use crate::sim::Simulation;

/// The release notices of one client: a listener per node, subscribed to
/// the channels the core wants.
pub(crate) struct Notices {
    shared: Arc<Shared>,
    listeners: Box<[Listener]>,
    /// Ends the listener tasks when the client is gone.
    closed: CancellationToken,
    metrics: metrics::Nodes,
}

impl fmt::Debug for Notices {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Notices")
            .field("channels", &self.shared.wanted_len.load(Ordering::Relaxed))
            .field("connected", &self.connected())
            .finish()
    }
}

/// What the listeners share.
struct Shared {
    /// The channels the core wants, and where the driver hears of notices.
    state: Mutex<State>,
    /// How many channels are wanted, read without the lock.
    wanted_len: AtomicUsize,
    /// Wakes each listener to compare its subscriptions with the wanted
    /// channels.
    wakes: Box<[Arc<Notify>]>,
}

struct State {
    wanted: BTreeSet<Key>,
    /// The driver's inputs; weak: a listener does not keep it running.
    inputs: Option<mpsc::WeakUnboundedSender<Input>>,
}

/// One node's pub/sub listener: its task, started at the first wait.
struct Listener {
    name: Arc<str>,
    client: redis::Client,
    connect_timeout: Duration,
    /// Whether the task has a pub/sub connection up.
    connected: Arc<AtomicBool>,
    /// Seeds the reconnect jitter of each task started.
    rng: Mutex<StdRng>,
    /// A simulated client's connections.
    simulation: Option<Simulation>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Notices {
    /// Listeners for these nodes (name and client each), not started yet;
    /// their reconnect jitter is drawn from `rng`.
    pub(crate) fn new(
        nodes: impl IntoIterator<Item = (String, redis::Client)>,
        connect_timeout: Duration,
        metrics: metrics::Nodes,
        rng: &mut crate::sim::ClientRng,
        simulation: Option<&Simulation>,
    ) -> Self {
        let listeners: Box<[Listener]> = nodes
            .into_iter()
            .map(|(name, client)| Listener {
                name: name.into(),
                client,
                connect_timeout,
                connected: Arc::new(AtomicBool::new(false)),
                rng: Mutex::new(StdRng::from_rng(&mut *rng)),
                simulation: simulation.cloned(),
                task: Mutex::new(None),
            })
            .collect();
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    wanted: BTreeSet::new(),
                    inputs: None,
                }),
                wanted_len: AtomicUsize::new(0),
                wakes: listeners.iter().map(|_| Arc::new(Notify::new())).collect(),
            }),
            listeners,
            closed: CancellationToken::new(),
            metrics,
        }
    }

    /// How many nodes have a pub/sub connection up right now.
    pub(crate) fn connected(&self) -> usize {
        self.listeners
            .iter()
            .filter(|listener| listener.connected.load(Ordering::Relaxed))
            .count()
    }

    /// Subscribes every node to exactly `channels` from now on (what the
    /// core wants, [`Output::Subscribe`](redlock_core::Output::Subscribe)),
    /// telling `inputs` (the driver's) of each notice and subscription.
    /// Never waits: the listeners subscribe in the background (starting on
    /// the current Tokio runtime if they are not running).
    pub(crate) fn want(&self, channels: Vec<Key>, inputs: mpsc::WeakUnboundedSender<Input>) {
        {
            let mut state = self.shared.lock();
            self.shared
                .wanted_len
                .store(channels.len(), Ordering::Relaxed);
            state.wanted = channels.into_iter().collect();
            state.inputs = Some(inputs);
        }
        for wake in &self.shared.wakes {
            wake.notify_one();
        }
        if self.shared.anything_wanted() {
            self.ensure_listening();
        }
    }

    /// Starts the listener tasks that are not running (never started, or
    /// ended with the runtime they ran on).
    fn ensure_listening(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.closed.is_cancelled() {
            return;
        }
        for (index, listener) in self.listeners.iter().enumerate() {
            let mut task = listener.task.lock().unwrap_or_else(PoisonError::into_inner);
            if task.as_ref().is_some_and(|task| !task.is_finished()) {
                continue;
            }
            let rng =
                StdRng::from_rng(&mut *listener.rng.lock().unwrap_or_else(PoisonError::into_inner));
            // Not a child of the operation that happens to start it: it outlives it.
            let span = debug_span!(parent: None, "redlock.release_notices", node = %listener.name);
            *task = Some(
                runtime.spawn(
                    listen(ListenerTask {
                        name: Arc::clone(&listener.name),
                        client: listener.client.clone(),
                        connect_timeout: listener.connect_timeout,
                        wake: Arc::clone(&self.shared.wakes[index]),
                        connected: Arc::clone(&listener.connected),
                        index,
                        shared: Arc::clone(&self.shared),
                        closed: self.closed.clone(),
                        metrics: self.metrics.clone(),
                        rng,
                        simulation: listener.simulation.clone(),
                    })
                    .instrument(span),
                ),
            );
        }
    }
}

impl Notices {
    /// Ends every listener and waits until each task has ended (its
    /// pub/sub connection dropped with it), for the client's shutdown:
    /// none starts again.
    pub(crate) async fn close(&self) {
        self.closed.cancel();
        for listener in &self.listeners {
            let task = listener
                .task
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            if let Some(task) = task {
                let _ = task.await;
            }
        }
    }
}

impl Drop for Notices {
    fn drop(&mut self) {
        self.closed.cancel();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Each field is replaced in one assignment: a panic elsewhere
        // cannot leave it half-written.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Tells the driver, if it still runs.
    fn tell(&self, input: Input) {
        let inputs = self.lock().inputs.clone();
        if let Some(inputs) = inputs.and_then(|inputs| inputs.upgrade()) {
            let _ = inputs.send(input);
        }
    }

    /// Whether some acquire waits on any channel, without the lock.
    fn anything_wanted(&self) -> bool {
        self.wanted_len.load(Ordering::Relaxed) > 0
    }

    /// The channels some acquire waits on now.
    fn wanted(&self) -> BTreeSet<Key> {
        self.lock().wanted.clone()
    }
}

/// What a listener task owns.
struct ListenerTask {
    name: Arc<str>,
    client: redis::Client,
    connect_timeout: Duration,
    wake: Arc<Notify>,
    connected: Arc<AtomicBool>,
    /// The node's index, as in the votes.
    index: usize,
    shared: Arc<Shared>,
    closed: CancellationToken,
    metrics: metrics::Nodes,
    /// The reconnect jitter's.
    rng: StdRng,
    simulation: Option<Simulation>,
}

/// A node's pub/sub connection, split: the sink for (un)subscribing, the
/// stream for messages.
struct Link {
    sink: PubSubSink,
    stream: PubSubStream,
    subscribed: BTreeSet<Key>,
    /// Made after an earlier link of this task was lost.
    replaces_lost: bool,
}

/// One node's listener: keeps its subscriptions equal to the wanted
/// channels and forwards messages, until the client is dropped.
async fn listen(mut task: ListenerTask) {
    // Also when the task is dropped with its runtime.
    let _down = MarkDown(Arc::clone(&task.connected));
    let mut link: Option<Link> = None;
    let mut lost_before = false;
    let mut backoff = Backoff::reconnect();
    let mut reconnect_at: Option<tokio::time::Instant> = None;
    loop {
        let may_connect = reconnect_at.is_none_or(|at| at <= tokio::time::Instant::now());
        if link.is_none() && task.shared.anything_wanted() && may_connect {
            reconnect_at = None;
            match task.cancellable(task.connect()).await {
                None => return,
                Some(Ok(pubsub)) => {
                    let (sink, stream) = pubsub.split();
                    debug!("pub/sub connection up");
                    link = Some(Link {
                        sink,
                        stream,
                        subscribed: BTreeSet::new(),
                        replaces_lost: lost_before,
                    });
                }
                Some(Err(error)) => {
                    let wait = backoff.next(&mut task.rng);
                    debug!(error = %error, retry_in_ms = wait.as_millis() as u64, "no pub/sub connection; release notices from this node wait");
                    reconnect_at = Some(tokio::time::Instant::now() + wait);
                }
            }
        }
        if let Some(current) = &mut link {
            // Read after any connect: one can take up to its timeout, and a
            // channel nobody wants any more must not be subscribed to.
            let wanted = task.shared.wanted();
            match task.cancellable(task.reconcile(current, &wanted)).await {
                None => return,
                // Only a link that subscribes resets the backoff: one that
                // connects but may not subscribe (ACL) must not reconnect
                // in a tight loop.
                Some(Ok(())) => backoff.reset(),
                Some(Err(error)) => {
                    warn!(node = %task.name, error = %error, "pub/sub connection unusable; reconnecting when needed");
                    link = None;
                    lost_before = true;
                    task.connected.store(false, Ordering::Relaxed);
                    reconnect_at = Some(tokio::time::Instant::now() + backoff.next(&mut task.rng));
                    continue;
                }
            }
        }
        // Armed only while something is wanted: a retry instant in the
        // past would otherwise end every turn of this loop at once.
        let retry_at = reconnect_at.filter(|_| link.is_none() && task.shared.anything_wanted());
        let retry = async {
            match retry_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let message = async {
            match &mut link {
                Some(current) => current.stream.next().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = task.closed.cancelled() => return,
            () = task.wake.notified() => {}
            () = retry => {}
            message = message => match message {
                Some(message) => match message.get_channel::<Vec<u8>>() {
                    Ok(channel) => {
                        task.metrics.notice(task.index);
                        task.shared.tell(Input::Notice { node: NodeId(task.index), channel });
                    }
                    Err(error) => warn!(node = %task.name, error = %error, "pub/sub message without a channel name"),
                },
                None => {
                    // The node's own connection reports a master down; this one only
                    // delays notices.
                    debug!(node = %task.name, "pub/sub connection closed; reconnecting when needed");
                    link = None;
                    lost_before = true;
                    task.connected.store(false, Ordering::Relaxed);
                    reconnect_at = Some(tokio::time::Instant::now() + backoff.next(&mut task.rng));
                }
            },
        }
    }
}

impl ListenerTask {
    /// Runs `future` unless the client goes away first (`None`).
    async fn cancellable<T>(&self, future: impl Future<Output = T>) -> Option<T> {
        tokio::select! {
            () = self.closed.cancelled() => None,
            output = future => Some(output),
        }
    }

    async fn connect(&self) -> Result<redis::aio::PubSub, String> {
        let connecting = async {
            match &self.simulation {
                None => self.client.get_async_pubsub().await,
                Some(simulation) => {
                    let stream = simulation.connect(self.index).await?;
                    let info = self.client.get_connection_info().redis_settings();
                    redis::aio::PubSub::new(info, stream).await
                }
            }
        };
        match tokio::time::timeout(self.connect_timeout, connecting).await {
            Ok(Ok(pubsub)) => Ok(pubsub),
            Ok(Err(error)) => Err(map_error(&error).to_string()),
            Err(_) => Err(format!(
                "no pub/sub connection within {} ms",
                self.connect_timeout.as_millis()
            )),
        }
    }

    /// Subscribes to the wanted channels the link lacks and unsubscribes
    /// from the ones nobody waits on any more. An error (or no confirmation
    /// within the connect timeout) leaves the link unusable.
    async fn reconcile(&self, link: &mut Link, wanted: &BTreeSet<Key>) -> Result<(), String> {
        let add: Vec<Key> = wanted.difference(&link.subscribed).cloned().collect();
        let remove: Vec<Key> = link.subscribed.difference(wanted).cloned().collect();
        if !add.is_empty() {
            let names: Vec<&[u8]> = add.iter().map(Key::as_bytes).collect();
            self.confirmed("SUBSCRIBE", link.sink.subscribe(names))
                .await?;
            debug!(channels = add.len(), "subscribed");
            // Up once the node accepted a subscription: not between the
            // connect and a refusal (ACL), nor for a link that found
            // nothing left to subscribe to.
            self.connected.store(true, Ordering::Relaxed);
            link.subscribed.extend(add.iter().cloned());
            self.shared.tell(Input::Subscribed {
                channels: add,
                resubscribed: link.replaces_lost,
            });
        }
        if !remove.is_empty() {
            let names: Vec<&[u8]> = remove.iter().map(Key::as_bytes).collect();
            self.confirmed("UNSUBSCRIBE", link.sink.unsubscribe(names))
                .await?;
            debug!(channels = remove.len(), "unsubscribed");
            for channel in &remove {
                link.subscribed.remove(channel);
            }
        }
        Ok(())
    }

    async fn confirmed(
        &self,
        command: &str,
        request: impl Future<Output = redis::RedisResult<()>>,
    ) -> Result<(), String> {
        match tokio::time::timeout(self.connect_timeout, request).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(format!("{command} failed: {}", map_error(&error))),
            Err(_) => Err(format!(
                "{command} not confirmed within {} ms",
                self.connect_timeout.as_millis()
            )),
        }
    }
}

/// Marks the listener as disconnected when its task ends.
struct MarkDown(Arc<AtomicBool>);

impl Drop for MarkDown {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}
