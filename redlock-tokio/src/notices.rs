//! Release notices: waking a blocked acquire the moment a lock is released,
//! instead of letting it sleep out its retry delay.
//!
//! Every release script that frees a lock publishes an empty message on
//! `<key>\0released` ([`Settings::release_channel`](redlock_core::Settings::release_channel)).
//! This module listens for those messages and hands them to the acquisitions
//! that wait for that key, which then call
//! [`Acquisition::handle_release_notice`](redlock_core::Acquisition::handle_release_notice).
//! The core decides what a notice means; this only delivers it.
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
//! # When a notice counts
//!
//! The acquire driver asks [`Waiter::released_since`] whether the lock may
//! have been released after its last attempt started. Notices are recorded
//! per node with the instant they arrived, and the answer is yes when:
//!
//! - notices arrived after the attempt started from **more nodes than a
//!   failed attempt can free while another client holds a quorum**
//!   (N - quorum + 1: 2 of 3, 3 of 5). Failed attempts release what they
//!   set, and those releases publish too; a holder of a quorum leaves at
//!   most N - quorum nodes to the failed attempts, so their clean-ups alone
//!   can never wake the waiters. (Counting single notices, each clean-up
//!   woke every other waiter, whose failing attempts cleaned up in turn: a
//!   storm of attempts for as long as the lock was held.) A real release
//!   frees a quorum at once, whose notices arrive within a round trip;
//! - or one of the channels became subscribed after the attempt started
//!   (first subscription, or again after a lost connection): a release
//!   before that was not heard.
//!
//! A notice that arrives during an attempt is kept and looked at once the
//! attempt has failed: the release may have reached a node just after the
//! attempt's check there. One that arrived before the attempt started was
//! seen by that attempt and does not count.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use futures::StreamExt;
use redis::aio::{PubSubSink, PubSubStream};
use redlock_core::Key;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, debug_span, warn};

use crate::node::map_error;

/// First wait before reconnecting a pub/sub connection; doubles each time.
const RECONNECT_MIN: Duration = Duration::from_millis(50);
/// Longest wait between reconnection attempts.
const RECONNECT_MAX: Duration = Duration::from_secs(2);

/// The release notices of one client: a listener per node and the channels
/// its waiting acquires want.
pub(crate) struct Notices {
    shared: Arc<Shared>,
    /// Nodes a release must be heard from: N - quorum + 1.
    threshold: usize,
    listeners: Box<[Listener]>,
    /// Ends the listener tasks when the client and its last waiter are gone.
    closed: CancellationToken,
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
    channels: Mutex<HashMap<Key, Channel>>,
    next_waiter: AtomicU64,
    nodes: usize,
}

/// One channel some acquires wait on.
struct Channel {
    /// Woken at every event of the channel.
    waiters: Vec<(u64, Arc<watch::Sender<()>>)>,
    /// Per node, when its last notice arrived.
    heard: Box<[Option<Instant>]>,
    /// When the channel became subscribed on some node (first, or again
    /// after a lost connection).
    subscribed_at: Option<Instant>,
    /// Subscribed on at least one node since the first waiter came.
    active: bool,
}

impl Channel {
    fn wake(&self) {
        for (_, sender) in &self.waiters {
            sender.send_replace(());
        }
    }

    fn has_events(&self) -> bool {
        self.subscribed_at.is_some() || self.heard.iter().any(Option::is_some)
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
    ) -> Self {
        let nodes: Vec<(String, redis::Client)> = nodes.into_iter().collect();
        let count = nodes.len();
        Self {
            shared: Arc::new(Shared {
                channels: Mutex::default(),
                next_waiter: AtomicU64::new(0),
                nodes: count,
            }),
            threshold: count - redlock_core::quorum(count) + 1,
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
        }
    }

    /// How many nodes have a pub/sub connection up right now.
    pub(crate) fn connected(&self) -> usize {
        self.listeners
            .iter()
            .filter(|listener| listener.connected.load(Ordering::Relaxed))
            .count()
    }

    /// Registers a waiter for these channels. Never waits: the listeners
    /// subscribe in the background (starting on the current Tokio runtime
    /// if they are not running), and until they have, the waiter simply gets
    /// no notice.
    pub(crate) fn wait_for(self: &Arc<Self>, channels: Vec<Key>) -> Waiter {
        let id = self.shared.next_waiter.fetch_add(1, Ordering::Relaxed);
        let (sender, mut receiver) = watch::channel(());
        let sender = Arc::new(sender);
        let mut new_channel = false;
        let mut earlier_events = false;
        {
            let mut map = self.shared.lock();
            for channel in &channels {
                let entry = map.entry(channel.clone()).or_insert_with(|| {
                    new_channel = true;
                    Channel {
                        waiters: Vec::new(),
                        heard: vec![None; self.shared.nodes].into(),
                        subscribed_at: None,
                        active: false,
                    }
                });
                entry.waiters.push((id, Arc::clone(&sender)));
                earlier_events |= entry.has_events();
            }
        }
        // Notices that came just before the waiter registered may be newer
        // than its attempt: let the driver look at them at once.
        if earlier_events {
            receiver.mark_changed();
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
            _sender: sender,
        }
    }

    /// Whether the events of `channels` say that the lock may have been
    /// released after `since` (see the module docs).
    fn released_since(&self, channels: &[Key], since: Instant) -> bool {
        let map = self.shared.lock();
        let mut nodes = vec![false; self.shared.nodes];
        for entry in channels.iter().filter_map(|channel| map.get(channel)) {
            if entry.subscribed_at.is_some_and(|at| at > since) {
                return true;
            }
            for (node, heard) in entry.heard.iter().enumerate() {
                nodes[node] |= heard.is_some_and(|at| at > since);
            }
        }
        nodes.iter().filter(|&&heard| heard).count() >= self.threshold
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
    fn lock(&self) -> MutexGuard<'_, HashMap<Key, Channel>> {
        // Every update leaves the map consistent between statements; a
        // panic elsewhere cannot leave it half-written.
        self.channels.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The channels some acquire waits on now.
    fn wanted(&self) -> HashSet<Key> {
        self.lock().keys().cloned().collect()
    }

    /// A release notice from `node` arrived on `channel` at `now`.
    fn notice(&self, node: usize, channel: &[u8], now: Instant) {
        let mut map = self.lock();
        if let Some(entry) = map.get_mut(&Key::from(channel))
            && let Some(heard) = entry.heard.get_mut(node)
        {
            *heard = Some(now);
            entry.wake();
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
                entry.wake();
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
    receiver: watch::Receiver<()>,
    /// Keeps the channel's sender alive, so `changed` never fails.
    _sender: Arc<watch::Sender<()>>,
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
    /// Completes at the next event (a notice or a subscription) of the
    /// waiter's channels; `false` only if it never can. Events that come
    /// while nobody polls are kept for the next call. Cancel-safe.
    pub(crate) async fn changed(&mut self) -> bool {
        // The sender lives as long as `self`: this never fails.
        let changed = self.receiver.changed().await.is_ok();
        self.receiver.borrow_and_update();
        changed
    }

    /// Whether the lock may have been released after `since`, the start of
    /// the latest attempt: heard from enough nodes, or newly subscribed.
    pub(crate) fn released_since(&self, since: Instant) -> bool {
        self.notices.released_since(&self.channels, since)
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let mut emptied = false;
        {
            let mut map = self.notices.shared.lock();
            for channel in &self.channels {
                if let Some(entry) = map.get_mut(channel) {
                    entry.waiters.retain(|(id, _)| *id != self.id);
                    if entry.waiters.is_empty() {
                        map.remove(channel);
                        emptied = true;
                    }
                }
            }
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
}

/// A node's pub/sub connection, split: the sink for (un)subscribing, the
/// stream for messages.
struct Link {
    sink: PubSubSink,
    stream: PubSubStream,
    subscribed: HashSet<Key>,
    /// Made after an earlier link of this task was lost.
    replaces_lost: bool,
}

/// One node's listener: keeps its subscriptions equal to the wanted
/// channels and forwards messages, until the client is dropped.
async fn listen(task: ListenerTask) {
    // Also when the task is dropped with its runtime.
    let _down = MarkDown(Arc::clone(&task.connected));
    let mut link: Option<Link> = None;
    let mut lost_before = false;
    let mut backoff = RECONNECT_MIN;
    let mut reconnect_at: Option<tokio::time::Instant> = None;
    loop {
        let wanted = task.shared.wanted();
        let may_connect = reconnect_at.is_none_or(|at| at <= tokio::time::Instant::now());
        if link.is_none() && !wanted.is_empty() && may_connect {
            reconnect_at = None;
            match task.cancellable(task.connect()).await {
                None => return,
                Some(Ok(pubsub)) => {
                    let (sink, stream) = pubsub.split();
                    debug!("pub/sub connection up");
                    task.connected.store(true, Ordering::Relaxed);
                    link = Some(Link {
                        sink,
                        stream,
                        subscribed: HashSet::new(),
                        replaces_lost: lost_before,
                    });
                }
                Some(Err(error)) => {
                    debug!(error = %error, retry_in_ms = backoff.as_millis() as u64, "no pub/sub connection; release notices from this node wait");
                    reconnect_at = Some(tokio::time::Instant::now() + jittered(backoff));
                    backoff = (backoff * 2).min(RECONNECT_MAX);
                }
            }
        }
        if let Some(current) = &mut link {
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
                    reconnect_at = Some(tokio::time::Instant::now() + jittered(backoff));
                    backoff = (backoff * 2).min(RECONNECT_MAX);
                    continue;
                }
            }
        }
        let retry_at = reconnect_at.filter(|_| link.is_none());
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
                    Ok(channel) => task.shared.notice(task.index, &channel, Instant::now()),
                    Err(error) => warn!(node = %task.name, error = %error, "pub/sub message without a channel name"),
                },
                None => {
                    // The node's own connection reports a master down; this one only
                    // delays notices.
                    debug!(node = %task.name, "pub/sub connection closed; reconnecting when needed");
                    link = None;
                    lost_before = true;
                    task.connected.store(false, Ordering::Relaxed);
                    reconnect_at = Some(tokio::time::Instant::now() + jittered(backoff));
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
        match tokio::time::timeout(self.connect_timeout, self.client.get_async_pubsub()).await {
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
    async fn reconcile(&self, link: &mut Link, wanted: &HashSet<Key>) -> Result<(), String> {
        let add: Vec<Key> = wanted.difference(&link.subscribed).cloned().collect();
        let remove: Vec<Key> = link.subscribed.difference(wanted).cloned().collect();
        if !add.is_empty() {
            let names: Vec<&[u8]> = add.iter().map(Key::as_bytes).collect();
            self.confirmed("SUBSCRIBE", link.sink.subscribe(names))
                .await?;
            debug!(channels = add.len(), "subscribed");
            self.shared
                .subscribed(&add, Instant::now(), link.replaces_lost);
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
fn jittered(delay: Duration) -> Duration {
    let quarter = u64::try_from(delay.as_micros() / 4).unwrap_or(u64::MAX);
    delay - Duration::from_micros(rand::random_range(0..=quarter))
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
        ))
    }

    async fn woken(waiter: &mut Waiter) -> bool {
        tokio::time::timeout(Duration::from_millis(20), waiter.changed())
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn channels_are_wanted_while_someone_waits() {
        let notices = notices(3);
        let a = Key::from("a\0released");
        let b = Key::from("b\0released");
        let first = notices.wait_for(vec![a.clone()]);
        let second = notices.wait_for(vec![a.clone(), b.clone()]);
        assert_eq!(
            notices.shared.wanted(),
            HashSet::from([a.clone(), b.clone()])
        );
        drop(first);
        assert_eq!(
            notices.shared.wanted(),
            HashSet::from([a.clone(), b.clone()])
        );
        drop(second);
        assert!(notices.shared.wanted().is_empty());
        // Nothing listens on those nodes, and nothing waited for them.
        assert_eq!(notices.connected(), 0);
    }

    #[tokio::test]
    async fn a_release_counts_once_heard_from_more_nodes_than_a_failed_attempt_frees() {
        let notices = notices(3);
        assert_eq!(notices.threshold, 2);
        let a = Key::from("a\0released");
        let start = Instant::now();
        let mut one = notices.wait_for(vec![a.clone()]);
        let mut two = notices.wait_for(vec![a.clone(), Key::from("b\0released")]);
        let mut other = notices.wait_for(vec![Key::from("c\0released")]);
        // One node: what a failed attempt's clean-up looks like.
        notices.shared.notice(2, a.as_bytes(), Instant::now());
        notices.shared.notice(0, b"unknown", Instant::now());
        assert!(woken(&mut one).await && woken(&mut two).await);
        assert!(!woken(&mut other).await, "no notice for c");
        assert!(!one.released_since(start) && !two.released_since(start));
        // The same node again is no news.
        notices.shared.notice(2, a.as_bytes(), Instant::now());
        assert!(!one.released_since(start));
        // A second node: a quorum was freed.
        notices.shared.notice(0, a.as_bytes(), Instant::now());
        assert!(woken(&mut one).await);
        assert!(one.released_since(start) && two.released_since(start));
        assert!(!other.released_since(start));
        // Not for an attempt that started after the notices.
        assert!(!one.released_since(Instant::now()));

        // A late waiter is woken at once to look at the recent notices.
        let mut late = notices.wait_for(vec![a.clone()]);
        assert!(woken(&mut late).await);
        assert!(late.released_since(start));
        assert!(!woken(&mut late).await, "consumed");
    }

    #[tokio::test]
    async fn a_first_subscription_counts_as_a_release() {
        let notices = notices(5);
        assert_eq!(notices.threshold, 3);
        let a = Key::from("a\0released");
        let start = Instant::now();
        let mut waiter = notices.wait_for(vec![a.clone()]);
        notices
            .shared
            .subscribed(std::slice::from_ref(&a), Instant::now(), false);
        assert!(woken(&mut waiter).await);
        assert!(waiter.released_since(start));
        // Another node confirming the same channel is no news.
        let later = Instant::now();
        notices
            .shared
            .subscribed(std::slice::from_ref(&a), Instant::now(), false);
        assert!(!woken(&mut waiter).await);
        assert!(!waiter.released_since(later));
        // After a lost connection, releases may have been missed.
        notices
            .shared
            .subscribed(std::slice::from_ref(&a), Instant::now(), true);
        assert!(woken(&mut waiter).await);
        assert!(waiter.released_since(later));
    }

    #[test]
    fn thresholds() {
        let n = |count| notices_without_runtime(count).threshold;
        assert_eq!([n(1), n(2), n(3), n(4), n(5), n(7)], [1, 1, 2, 2, 3, 4]);
    }

    fn notices_without_runtime(n: usize) -> Notices {
        let client = redis::Client::open("redis://127.0.0.1:1").unwrap();
        Notices::new(
            (0..n).map(|i| (format!("n{i}"), client.clone())),
            Duration::from_millis(100),
        )
    }
}
