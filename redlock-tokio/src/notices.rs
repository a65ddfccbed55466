//! Release notices: waking a blocked acquire the moment a lock is released,
//! instead of letting it sleep out its retry delay.
//!
//! A release script that frees a lock publishes an empty message on
//! `<key>\0released` ([`Settings::release_channel`](redlock_core::Settings::release_channel));
//! an exclusive lock's only while a waiter's mark lives, which the core has
//! every listening waiter set before each attempt
//! ([`scripts::MARK_WAITING`](redlock_core::scripts::MARK_WAITING)). Nothing
//! here changes for it: the marks are requests like any other.
//! This module listens for those messages and hands each, with the node it
//! came from and when, to the acquisitions that wait for that key
//! ([`Machine::handle_notice`](redlock_core::Machine::handle_notice)). The
//! core decides what notices mean (how many nodes make a release, which
//! ones its attempt had already seen) and who gets them: per channel, a
//! [`WaitQueue`] serves the client's waiters first come, first served (a
//! notice goes to the waiter whose turn it is, not to all). This only
//! delivers them.
//!
//! The shape, chosen so that it can never slow or fail a lock:
//!
//! - **One pub/sub connection per node and client**, made lazily by a
//!   listener task the first time an acquire has to wait, and shared by every
//!   waiting acquire of the client (and its clones).
//! - **Subscriptions follow the waiters.** A channel is subscribed when the
//!   first waiter for it appears and unsubscribed when the last one leaves.
//!   Registering and leaving are map updates under a mutex plus a wake-up of
//!   the listeners; no waiter ever waits for Redis here.
//! - **Level-triggered listeners.** Each listener compares the channels it
//!   is subscribed to with the channels wanted now, and fixes the
//!   difference; a lost connection, a timed-out `SUBSCRIBE` or a node that
//!   comes back is handled by reconnecting (with backoff, only while
//!   something is wanted) and subscribing to the whole wanted set again.
//! - **Nothing depends on it.** A node whose pub/sub connection is down,
//!   paused or slow just sends no notices: the acquire still retries on its
//!   timer.
//!

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use futures::StreamExt;
use rand::rngs::StdRng;
use rand::{Rng, RngExt};
use redis::aio::{PubSubSink, PubSubStream};
use redlock_core::{Acquisition, HandOver, Key, NodeId, Notice, WaitQueue, WaiterId, Wake};
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, debug_span, warn};

use crate::metrics;
use crate::node::map_error;
use crate::sim::Simulation;

/// First wait before reconnecting a pub/sub connection; doubles each time.
const RECONNECT_MIN: Duration = Duration::from_millis(50);
/// Longest wait between reconnection attempts.
const RECONNECT_MAX: Duration = Duration::from_secs(2);

/// The release notices of one client: a listener per node and the channels
/// its waiting acquires want.
pub(crate) struct Notices {
    shared: Arc<Shared>,
    listeners: Box<[Listener]>,
    /// Ends the listener tasks when the client and its last waiter are gone.
    closed: CancellationToken,
    metrics: metrics::Nodes,
    /// A simulated client's connections and randomness.
    simulation: Option<Simulation>,
}

impl fmt::Debug for Notices {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Notices")
            .field("channels", &self.shared.lock().len())
            .field("connected", &self.connected())
            .finish()
    }
}

/// The state the waiters and the listeners share.
struct Shared {
    channels: Mutex<BTreeMap<Key, Channel>>,
    /// How many channels some acquire waits on: written under the lock
    /// with each change, read without it by every release
    /// ([`Notices::someone_waits_anywhere`]).
    wanted: AtomicUsize,
    next_waiter: AtomicU64,
    nodes: usize,
}

/// Where a waiter gets its notices, with the instant each arrived.
type Sink = mpsc::UnboundedSender<(Notice, Instant)>;

/// One channel some acquires wait on.
struct Channel {
    /// Where each waiter gets its notices.
    waiters: HashMap<u64, Sink>,
    /// Whose turn it is: the core's rule.
    queue: WaitQueue,
    /// Per node, when its last notice arrived.
    heard: Box<[Option<Instant>]>,
    /// When the channel became subscribed on some node (first, or again
    /// after a lost connection).
    subscribed_at: Option<Instant>,
    /// When the client's last release on the channel was queued on every
    /// node ([`HandOver::Queued`]).
    handed_over_at: Option<Instant>,
    /// Subscribed on at least one node since the first waiter came.
    active: bool,
}

impl Channel {
    fn new(nodes: usize) -> Self {
        Self {
            waiters: HashMap::new(),
            queue: WaitQueue::new(),
            heard: vec![None; nodes].into(),
            subscribed_at: None,
            handed_over_at: None,
            active: false,
        }
    }

    /// A notice of the channel, for the waiter the queue says.
    fn tell(&mut self, notice: Notice, at: Instant) {
        self.queue.handle_notice(notice);
        self.deliver(at);
    }

    /// Delivers what the queue asks; `at` is when the notice told came.
    fn deliver(&mut self, at: Instant) {
        while let Some(wake) = self.queue.poll_wake() {
            match wake {
                Wake::Tell { waiter, notice } => {
                    if let Some(sink) = self.waiters.get(&waiter.0) {
                        // A waiter that left is removed with its sink: no
                        // error here.
                        let _ = sink.send((notice, at));
                    }
                }
                Wake::Replay { waiter } => {
                    if let Some(sink) = self.waiters.get(&waiter.0) {
                        self.replay(sink);
                    }
                }
                _ => {}
            }
        }
    }

    /// The channel's events so far, for a waiter that comes now: they may
    /// be newer than its attempt (the core tells).
    fn replay(&self, sink: &Sink) {
        let heard = self.heard.iter().enumerate();
        let notices = heard.filter_map(|(node, at)| Some((Notice::Released(NodeId(node)), (*at)?)));
        let subscribed = self.subscribed_at.map(|at| (Notice::Subscribed, at));
        // The client's own releases publish nothing for its own waiters.
        let handed_over = self.handed_over_at.map(|at| (Notice::HandedOver, at));
        for event in notices.chain(subscribed).chain(handed_over) {
            let _ = sink.send(event);
        }
    }
}

/// One node's pub/sub listener: its task, started at the first wait.
struct Listener {
    name: Arc<str>,
    client: redis::Client,
    connect_timeout: Duration,
    /// Wakes the task to compare its subscriptions with the wanted channels.
    wake: Arc<Notify>,
    /// Whether the task has a pub/sub connection up.
    connected: Arc<AtomicBool>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Notices {
    /// Listeners for these nodes (name and client each), not started yet.
    pub(crate) fn new(
        nodes: impl IntoIterator<Item = (String, redis::Client)>,
        connect_timeout: Duration,
        metrics: metrics::Nodes,
        simulation: Option<Simulation>,
    ) -> Self {
        let nodes: Vec<(String, redis::Client)> = nodes.into_iter().collect();
        let count = nodes.len();
        Self {
            shared: Arc::new(Shared {
                channels: Mutex::default(),
                wanted: AtomicUsize::new(0),
                next_waiter: AtomicU64::new(0),
                nodes: count,
            }),
            listeners: nodes
                .into_iter()
                .map(|(name, client)| Listener {
                    name: name.into(),
                    client,
                    connect_timeout,
                    wake: Arc::new(Notify::new()),
                    connected: Arc::new(AtomicBool::new(false)),
                    task: Mutex::new(None),
                })
                .collect(),
            closed: CancellationToken::new(),
            metrics,
            simulation,
        }
    }

    /// How many nodes have a pub/sub connection up right now.
    pub(crate) fn connected(&self) -> usize {
        self.listeners
            .iter()
            .filter(|listener| listener.connected.load(Ordering::Relaxed))
            .count()
    }

    /// First come, first served: when some acquire of this client already
    /// waits on one of the acquisition's channels, it waits behind it
    /// ([`WaitQueue::may_attempt_now`], [`Acquisition::queue_behind`]),
    /// marking the lock only where the client's last mark does not
    /// outlive its wait (the core decides, from what the queues recorded).
    pub(crate) fn queue_behind<R: Rng>(&self, acquisition: &mut Acquisition<R>, now: Instant) {
        // Nobody waiting anywhere, the common case: no channel built, no
        // lock taken. A waiter that registers meanwhile came after us.
        if !self.someone_waits_anywhere() {
            return;
        }
        let channels = acquisition.channels();
        let mut map = self.shared.lock();
        let queues = || channels.iter().map(|channel| map.get(channel));
        if !queues().any(|entry| entry.is_some_and(|entry| !entry.queue.may_attempt_now())) {
            return;
        }
        // On every channel, or none: `None` is the least `Option`.
        let marked = queues()
            .map(|entry| entry.and_then(|entry| entry.queue.marked_until()))
            .min()
            .flatten();
        acquisition.queue_behind(now, marked);
        if let Some(until) = acquisition.marked_until() {
            for channel in &channels {
                if let Some(entry) = map.get_mut(channel) {
                    entry.queue.handle_marked(until);
                }
            }
        }
    }

    /// Whether some acquire of this client waits, on any channel: a
    /// release has nothing to tell otherwise. No lock taken: a waiter that
    /// registers meanwhile hears its channel's subscription instead.
    pub(crate) fn someone_waits_anywhere(&self) -> bool {
        self.shared.anything_wanted()
    }

    /// What a release of this client tells its waiters at `at`
    /// ([`Machine::poll_hand_over`](redlock_core::Machine::poll_hand_over)):
    /// their queues decide who hears it.
    pub(crate) fn hand_over(&self, hand_over: &HandOver, at: Instant) {
        let mut map = self.shared.lock();
        for channel in hand_over.channels() {
            if let Some(entry) = map.get_mut(channel) {
                // Told when it is answered, the hand-over is still the
                // instant the release was queued.
                let at = match hand_over {
                    HandOver::Queued { .. } => *entry.handed_over_at.insert(at),
                    _ => entry.handed_over_at.unwrap_or(at),
                };
                entry.queue.handle_hand_over(hand_over);
                entry.deliver(at);
            }
        }
    }

    /// Registers a waiter for these channels, last in their queues. Never
    /// waits: the listeners subscribe in the background (starting on the
    /// current Tokio runtime if they are not running), and until they have,
    /// the waiter simply gets no notice.
    ///
    /// A waiter that finds nobody ahead of it is told the channel's recent
    /// events at once: they may be newer than its attempt (the core tells).
    /// An acquire that queued behind waiters who all left before it got
    /// here finds a new channel, and is told at its subscription (a
    /// [`Notice::Subscribed`]) or by its retry timer.
    ///
    /// `by_masters`: the masters order the waiters of this lock (a fair
    /// lock, [`Machine::ordered_by_masters`](redlock_core::Machine::ordered_by_masters)):
    /// the waiter is told every notice ([`WaitQueue::handle_join_by_masters`]).
    pub(crate) fn wait_for(self: &Arc<Self>, channels: Vec<Key>, by_masters: bool) -> Waiter {
        let id = self.shared.next_waiter.fetch_add(1, Ordering::Relaxed);
        let (sink, receiver) = mpsc::unbounded_channel();
        let mut new_channel = false;
        {
            let mut map = self.shared.lock();
            for channel in &channels {
                let entry = map.entry(channel.clone()).or_insert_with(|| {
                    new_channel = true;
                    Channel::new(self.shared.nodes)
                });
                entry.waiters.insert(id, sink.clone());
                if by_masters {
                    entry.queue.handle_join_by_masters(WaiterId(id));
                } else {
                    entry.queue.handle_join(WaiterId(id));
                }
                entry.deliver(crate::sim::now());
            }
            self.shared.wanted.store(map.len(), Ordering::Relaxed);
        }
        self.ensure_listening();
        if new_channel {
            self.wake_listeners();
        }
        Waiter {
            notices: Arc::clone(self),
            id,
            channels,
            receiver,
            served: false,
            _sink: sink,
        }
    }

    fn wake_listeners(&self) {
        for listener in self.listeners.iter() {
            listener.wake.notify_one();
        }
    }

    /// Starts the listener tasks that are not running (never started, or
    /// ended with the runtime they ran on).
    fn ensure_listening(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        for (index, listener) in self.listeners.iter().enumerate() {
            let mut task = listener.task.lock().unwrap_or_else(PoisonError::into_inner);
            if task.as_ref().is_some_and(|task| !task.is_finished()) {
                continue;
            }
            // Not a child of the acquire that happens to start it: it outlives it.
            let span = debug_span!(parent: None, "redlock.release_notices", node = %listener.name);
            *task = Some(
                runtime.spawn(
                    listen(ListenerTask {
                        name: Arc::clone(&listener.name),
                        client: listener.client.clone(),
                        connect_timeout: listener.connect_timeout,
                        wake: Arc::clone(&listener.wake),
                        connected: Arc::clone(&listener.connected),
                        index,
                        shared: Arc::clone(&self.shared),
                        closed: self.closed.clone(),
                        metrics: self.metrics.clone(),
                        rng: crate::sim::rng(self.simulation.as_ref()),
                        simulation: self.simulation.clone(),
                    })
                    .instrument(span),
                ),
            );
        }
    }
}

impl Drop for Notices {
    fn drop(&mut self) {
        self.closed.cancel();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<Key, Channel>> {
        // Every update leaves the map consistent between statements; a
        // panic elsewhere cannot leave it half-written.
        self.channels.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether some acquire waits on any channel, without the lock.
    fn anything_wanted(&self) -> bool {
        self.wanted.load(Ordering::Relaxed) > 0
    }

    /// The channels some acquire waits on now.
    fn wanted(&self) -> BTreeSet<Key> {
        self.lock().keys().cloned().collect()
    }

    /// A release notice from `node` arrived on `channel` at `now`.
    fn notice(&self, node: usize, channel: &[u8], now: Instant) {
        let mut map = self.lock();
        if let Some(entry) = map.get_mut(&Key::from(channel))
            && let Some(heard) = entry.heard.get_mut(node)
        {
            *heard = Some(now);
            entry.tell(Notice::Released(NodeId(node)), now);
        }
    }

    /// A node confirmed its subscription to `channels` at `now`. A channel's
    /// first confirmation (or any confirmation after a lost connection,
    /// `resubscribed`) counts as a notice: a release that came before it
    /// was not heard.
    fn subscribed(&self, channels: &[Key], now: Instant, resubscribed: bool) {
        let mut map = self.lock();
        for channel in channels {
            if let Some(entry) = map.get_mut(channel)
                && (!entry.active || resubscribed)
            {
                entry.active = true;
                entry.subscribed_at = Some(now);
                entry.tell(Notice::Subscribed, now);
            }
        }
    }
}

/// One acquire's registration for release notices on its channels. Dropping
/// it leaves the channels; the last waiter of a channel unsubscribes it.
pub(crate) struct Waiter {
    notices: Arc<Notices>,
    id: u64,
    channels: Vec<Key>,
    receiver: mpsc::UnboundedReceiver<(Notice, Instant)>,
    /// Its acquire got the lock: leaving, it hands the next release to the
    /// next waiter without telling it the ones before.
    served: bool,
    /// Keeps the channel open, so `next` never ends.
    _sink: Sink,
}

impl fmt::Debug for Waiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Waiter")
            .field("id", &self.id)
            .field("channels", &self.channels)
            .finish_non_exhaustive()
    }
}

impl Waiter {
    /// The next event of the waiter's channels (a node's notice, or a
    /// subscription), with the instant it arrived. Events that come while
    /// nobody polls are kept. Cancel-safe.
    pub(crate) async fn next(&mut self) -> Option<(Notice, Instant)> {
        self.receiver.recv().await
    }

    /// Its acquire got the lock.
    pub(crate) fn served(&mut self) {
        self.served = true;
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let mut emptied = false;
        {
            let mut map = self.notices.shared.lock();
            for channel in &self.channels {
                if let Some(entry) = map.get_mut(channel) {
                    entry.waiters.remove(&self.id);
                    entry.queue.handle_leave(WaiterId(self.id), self.served);
                    entry.deliver(crate::sim::now());
                    if entry.waiters.is_empty() {
                        map.remove(channel);
                        emptied = true;
                    }
                }
            }
            self.notices
                .shared
                .wanted
                .store(map.len(), Ordering::Relaxed);
        }
        if emptied {
            self.notices.wake_listeners();
        }
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
    let mut backoff = RECONNECT_MIN;
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
                    debug!(error = %error, retry_in_ms = backoff.as_millis() as u64, "no pub/sub connection; release notices from this node wait");
                    reconnect_at =
                        Some(tokio::time::Instant::now() + jittered(backoff, &mut task.rng));
                    backoff = (backoff * 2).min(RECONNECT_MAX);
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
                Some(Ok(())) => backoff = RECONNECT_MIN,
                Some(Err(error)) => {
                    warn!(node = %task.name, error = %error, "pub/sub connection unusable; reconnecting when needed");
                    link = None;
                    lost_before = true;
                    task.connected.store(false, Ordering::Relaxed);
                    reconnect_at =
                        Some(tokio::time::Instant::now() + jittered(backoff, &mut task.rng));
                    backoff = (backoff * 2).min(RECONNECT_MAX);
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
                        task.shared.notice(task.index, &channel, crate::sim::now());
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
                    reconnect_at = Some(tokio::time::Instant::now() + jittered(backoff, &mut task.rng));
                    backoff = (backoff * 2).min(RECONNECT_MAX);
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
            self.shared
                .subscribed(&add, crate::sim::now(), link.replaces_lost);
            link.subscribed.extend(add);
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

/// `delay` minus up to a quarter, so that many clients do not reconnect in step.
fn jittered(delay: Duration, rng: &mut StdRng) -> Duration {
    let quarter = u64::try_from(delay.as_micros() / 4).unwrap_or(u64::MAX);
    delay - Duration::from_micros(rng.random_range(0..=quarter))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Notices for `n` nodes on which nothing listens (port 1): the
    /// listeners fail to connect, and the tests feed events by hand.
    fn notices(n: usize) -> Arc<Notices> {
        let client = redis::Client::open("redis://127.0.0.1:1").unwrap();
        Arc::new(Notices::new(
            (0..n).map(|i| (format!("127.0.0.1:1/{i}"), client.clone())),
            Duration::from_millis(100),
            crate::metrics::Nodes::new([]),
            None,
        ))
    }

    /// The events waiting for `waiter`.
    fn events(waiter: &mut Waiter) -> Vec<Notice> {
        std::iter::from_fn(|| waiter.receiver.try_recv().ok())
            .map(|(notice, _)| notice)
            .collect()
    }

    #[tokio::test]
    async fn channels_are_wanted_while_someone_waits() {
        let notices = notices(3);
        let a = Key::from("a\0released");
        let b = Key::from("b\0released");
        let first = notices.wait_for(vec![a.clone()], false);
        let second = notices.wait_for(vec![a.clone(), b.clone()], false);
        assert_eq!(
            notices.shared.wanted(),
            BTreeSet::from([a.clone(), b.clone()])
        );
        drop(first);
        assert_eq!(
            notices.shared.wanted(),
            BTreeSet::from([a.clone(), b.clone()])
        );
        drop(second);
        assert!(notices.shared.wanted().is_empty());
        // Nothing listens on those nodes, and nothing waited for them.
        assert_eq!(notices.connected(), 0);
    }

    #[tokio::test]
    async fn each_node_notice_reaches_the_first_waiter_of_its_channel() {
        let notices = notices(3);
        let a = Key::from("a\0released");
        let b = Key::from("b\0released");
        let mut one = notices.wait_for(vec![a.clone()], false);
        let mut two = notices.wait_for(vec![a.clone(), b.clone()], false);
        let mut other = notices.wait_for(vec![Key::from("c\0released")], false);
        notices.shared.notice(2, a.as_bytes(), Instant::now());
        notices.shared.notice(0, b"unknown", Instant::now());
        let from_node_2 = vec![Notice::Released(NodeId(2))];
        assert_eq!(events(&mut one), from_node_2, "first on a");
        assert_eq!(events(&mut two), vec![], "second on a");
        assert_eq!(events(&mut other), vec![]);
        // On b, the second is first.
        notices.shared.notice(1, b.as_bytes(), Instant::now());
        assert_eq!(events(&mut two), vec![Notice::Released(NodeId(1))]);

        // A late waiter waits its turn: told nothing.
        let mut late = notices.wait_for(vec![a.clone()], false);
        assert_eq!(events(&mut late), vec![]);
        // The first leaves with the lock: the next release is the second's,
        // with nothing replayed. The client's own release is not told to
        // it while another client may wait: it hears the nodes, as other
        // clients' waiters do.
        let mut one = one;
        one.served();
        drop(one);
        assert_eq!(events(&mut two), vec![]);
        let channels = vec![a.clone()];
        let queued = HandOver::Queued {
            channels: channels.clone(),
        };
        notices.hand_over(&queued, Instant::now());
        assert_eq!(events(&mut two), vec![]);
        // Once a release found no other client's waiter, it is.
        let alone = HandOver::Answered {
            channels,
            others_waiting: false,
            unheard: false,
        };
        notices.hand_over(&alone, Instant::now());
        assert_eq!(events(&mut two), vec![]);
        notices.hand_over(&queued, Instant::now());
        assert_eq!(events(&mut two), vec![Notice::HandedOver]);
        notices.shared.notice(0, a.as_bytes(), Instant::now());
        assert_eq!(events(&mut two), vec![Notice::Released(NodeId(0))]);
        assert_eq!(events(&mut late), vec![]);
        // The second leaves without it: the late waiter is first and told
        // the channel's recent events (they may be newer than its attempt),
        // the client's own last release too.
        drop(two);
        assert_eq!(
            events(&mut late),
            vec![
                Notice::Released(NodeId(0)),
                Notice::Released(NodeId(2)),
                Notice::HandedOver
            ]
        );
        assert_eq!(events(&mut late), vec![], "told once");
    }

    /// A new acquire queues behind the client's waiters on any of its
    /// channels, and marks only where the client's last mark would not
    /// outlive its wait.
    #[tokio::test]
    async fn acquires_queue_behind_waiters_and_share_the_clients_mark() {
        use rand::SeedableRng;
        use redlock_core::{Attempts, Command, Config, Machine};
        let settings = Arc::new(Config::new(["a", "b", "c"]).validate().unwrap());
        let notices = notices(3);
        let now = Instant::now();
        let acquire = |seed| {
            let rng = rand::rngs::StdRng::seed_from_u64(seed);
            let ttl = settings.default_ttl();
            Acquisition::new(
                Arc::clone(&settings),
                b"job",
                ttl,
                Attempts::Retry,
                now,
                rng,
            )
        };
        let sent = |acquisition: &mut Acquisition<rand::rngs::StdRng>| {
            std::iter::from_fn(|| acquisition.poll_request())
                .map(|request| request.command)
                .collect::<Vec<_>>()
        };
        let attempts_at_once = |acquisition: &mut Acquisition<rand::rngs::StdRng>| {
            notices.queue_behind(acquisition, now);
            let attempt = sent(acquisition);
            attempt.len() == 3 && attempt.iter().all(|c| matches!(c, Command::Acquire { .. }))
        };
        // Nobody waits anywhere, or nobody on its channel: it attempts at once.
        assert!(attempts_at_once(&mut acquire(1)));
        let _other = notices.wait_for(vec![Key::from("other\0released")], false);
        assert!(attempts_at_once(&mut acquire(5)));
        // Someone does: it waits, and marks.
        let _waiter = notices.wait_for(acquire(2).channels(), false);
        let mut first = acquire(3);
        notices.queue_behind(&mut first, now);
        let marks = sent(&mut first);
        assert_eq!(marks.len(), 3);
        assert!(
            marks
                .iter()
                .all(|c| matches!(c, Command::MarkWaiting { .. }))
        );
        // The next relies on that mark: nothing to send.
        let mut second = acquire(4);
        notices.queue_behind(&mut second, now);
        assert_eq!(sent(&mut second), vec![]);
        assert_eq!(second.marked_until(), first.marked_until());
    }

    #[tokio::test]
    async fn subscriptions_are_events_the_first_time_and_after_a_lost_connection() {
        let notices = notices(5);
        let a = Key::from("a\0released");
        let mut waiter = notices.wait_for(vec![a.clone()], false);
        let subscribed = |again| {
            notices
                .shared
                .subscribed(std::slice::from_ref(&a), Instant::now(), again)
        };
        subscribed(false);
        assert_eq!(events(&mut waiter), vec![Notice::Subscribed]);
        // Another node confirming the same channel is no news.
        subscribed(false);
        assert_eq!(events(&mut waiter), vec![]);
        // After a lost connection, releases may have been missed.
        subscribed(true);
        assert_eq!(events(&mut waiter), vec![Notice::Subscribed]);
    }
}
