//! The driver's pub/sub connections for release notices, one per node: it
//! opens one, subscribes and unsubscribes it as the core asks
//! ([`Output::ConnectNotices`](redlock_core::Output::ConnectNotices),
//! [`Output::Subscribe`](redlock_core::Output::Subscribe),
//! [`Output::Unsubscribe`](redlock_core::Output::Unsubscribe)), and hands
//! back each outcome and each message. It decides nothing: when to connect
//! again, what to subscribe to and what a notice means are the core's.
//!
//! Nothing depends on it: a node whose pub/sub connection is down, paused
//! or slow sends no notices, and its waiters retry on their timers.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::{AbortHandle, BoxStream, FuturesUnordered, SelectAll};
use futures::{FutureExt, StreamExt};
use redis::aio::PubSubSink;
use redlock_core::{Key, NodeId};
use tracing::{debug, warn};

use crate::metrics;
use crate::node::map_error;
use crate::sim::Simulation;

/// What opens each node's pub/sub connection, shared with the client's
/// handles for [`listening`](Self::listening).
pub(crate) struct NoticeNodes {
    nodes: Box<[NoticeNode]>,
    connect_timeout: Duration,
    metrics: metrics::Nodes,
    /// How many nodes listen, as the core last said.
    listening: AtomicUsize,
}

struct NoticeNode {
    name: Arc<str>,
    client: redis::Client,
    /// A simulated client's connections.
    simulation: Option<Simulation>,
}

impl NoticeNodes {
    /// For these nodes (name and client each), in the order of the votes.
    pub(crate) fn new(
        nodes: impl IntoIterator<Item = (String, redis::Client)>,
        connect_timeout: Duration,
        metrics: metrics::Nodes,
        simulation: Option<&Simulation>,
    ) -> Self {
        Self {
            nodes: nodes
                .into_iter()
                .map(|(name, client)| NoticeNode {
                    name: name.into(),
                    client,
                    simulation: simulation.cloned(),
                })
                .collect(),
            connect_timeout,
            metrics,
            listening: AtomicUsize::new(0),
        }
    }

    /// How many nodes have a pub/sub connection up that subscribed.
    pub(crate) fn listening(&self) -> usize {
        self.listening.load(Ordering::Relaxed)
    }

    pub(super) fn set_listening(&self, count: usize) {
        self.listening.store(count, Ordering::Relaxed);
    }

    async fn connect(&self, index: usize) -> Result<redis::aio::PubSub, String> {
        let node = &self.nodes[index];
        let connecting = async {
            match &node.simulation {
                None => node.client.get_async_pubsub().await,
                Some(simulation) => {
                    let stream = simulation.connect(index).await?;
                    let info = node.client.get_connection_info().redis_settings();
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
}

/// What happened to a node's pub/sub connection, for the core.
pub(super) enum Event {
    Connected(NodeId),
    /// Its attempt failed, a (un)subscription was refused or not confirmed
    /// in time, or the connection closed.
    Lost(NodeId),
    Subscribed(NodeId),
    Unsubscribed(NodeId),
    Notice(NodeId, Vec<u8>),
}

/// How an asked step ended.
enum Done {
    Connected(redis::aio::PubSub),
    Subscribed,
    Unsubscribed,
    Failed(String),
}

/// A message, or `None` once the connection closed.
type Message = (usize, u64, Option<Result<Vec<u8>, String>>);

/// The pub/sub connections of one driver.
pub(super) struct PubSub {
    nodes: Arc<NoticeNodes>,
    /// Each node's sink, while connected.
    sinks: Box<[Option<PubSubSink>]>,
    /// Each node's current connection: what an older one says is ignored.
    generation: Box<[u64]>,
    /// Each node's message stream, to stop it when the link is dropped.
    streams: Box<[Option<AbortHandle>]>,
    messages: SelectAll<BoxStream<'static, Message>>,
    steps: FuturesUnordered<BoxFuture<'static, (usize, u64, Done)>>,
}

impl PubSub {
    pub(super) fn new(nodes: Arc<NoticeNodes>) -> Self {
        let count = nodes.nodes.len();
        Self {
            sinks: (0..count).map(|_| None).collect(),
            generation: vec![0; count].into(),
            streams: (0..count).map(|_| None).collect(),
            messages: SelectAll::new(),
            steps: FuturesUnordered::new(),
            nodes,
        }
    }

    pub(super) fn nodes(&self) -> &NoticeNodes {
        &self.nodes
    }

    /// Opens `node`'s connection, dropping the one it had.
    pub(super) fn connect(&mut self, node: NodeId) {
        let generation = self.drop_link(node.0);
        let nodes = Arc::clone(&self.nodes);
        self.steps.push(
            async move {
                let done = match nodes.connect(node.0).await {
                    Ok(pubsub) => Done::Connected(pubsub),
                    Err(error) => Done::Failed(error),
                };
                (node.0, generation, done)
            }
            .boxed(),
        );
    }

    /// Subscribes (`subscribe`) or unsubscribes `node`'s connection to
    /// `channels`, confirmed within the connect timeout.
    pub(super) fn change(&mut self, node: NodeId, channels: Vec<Key>, subscribe: bool) {
        let generation = self.generation[node.0];
        let Some(mut sink) = self.sinks[node.0].clone() else {
            // No connection to ask it of: the core hears it as lost, and
            // does not wait for a confirmation that cannot come.
            let done = Done::Failed("no pub/sub connection".to_owned());
            self.steps
                .push(futures::future::ready((node.0, generation, done)).boxed());
            return;
        };
        let timeout = self.nodes.connect_timeout;
        self.steps.push(
            async move {
                let names: Vec<&[u8]> = channels.iter().map(Key::as_bytes).collect();
                let (command, request) = if subscribe {
                    ("SUBSCRIBE", sink.subscribe(names).boxed())
                } else {
                    ("UNSUBSCRIBE", sink.unsubscribe(names).boxed())
                };
                let done = match tokio::time::timeout(timeout, request).await {
                    Ok(Ok(())) if subscribe => Done::Subscribed,
                    Ok(Ok(())) => Done::Unsubscribed,
                    Ok(Err(error)) => {
                        Done::Failed(format!("{command} failed: {}", map_error(&error)))
                    }
                    Err(_) => Done::Failed(format!(
                        "{command} not confirmed within {} ms",
                        timeout.as_millis()
                    )),
                };
                (node.0, generation, done)
            }
            .boxed(),
        );
    }

    /// The next outcome or message; pending while there is none.
    pub(super) fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Event> {
        while let Poll::Ready(Some((node, generation, done))) = self.steps.poll_next_unpin(cx) {
            if generation != self.generation[node] {
                continue;
            }
            let name = &self.nodes.nodes[node].name;
            return Poll::Ready(match done {
                Done::Connected(pubsub) => {
                    let (sink, stream) = pubsub.split();
                    let (stream, abort) = futures::stream::abortable(
                        stream
                            .map(move |message| {
                                let channel = message
                                    .get_channel::<Vec<u8>>()
                                    .map_err(|error| error.to_string());
                                (node, generation, Some(channel))
                            })
                            .chain(futures::stream::once(
                                async move { (node, generation, None) },
                            )),
                    );
                    self.messages.push(stream.boxed());
                    self.sinks[node] = Some(sink);
                    self.streams[node] = Some(abort);
                    debug!(node = %name, "pub/sub connection up");
                    Event::Connected(NodeId(node))
                }
                Done::Subscribed => Event::Subscribed(NodeId(node)),
                Done::Unsubscribed => Event::Unsubscribed(NodeId(node)),
                Done::Failed(error) => {
                    debug!(node = %name, error = %error, "pub/sub connection unusable; release notices from this node wait");
                    self.drop_link(node);
                    Event::Lost(NodeId(node))
                }
            });
        }
        while let Poll::Ready(Some((node, generation, message))) = self.messages.poll_next_unpin(cx)
        {
            if generation != self.generation[node] {
                continue;
            }
            let name = &self.nodes.nodes[node].name;
            match message {
                Some(Ok(channel)) => {
                    self.nodes.metrics.notice(node);
                    return Poll::Ready(Event::Notice(NodeId(node), channel));
                }
                Some(Err(error)) => {
                    warn!(node = %name, error = %error, "pub/sub message without a channel name");
                }
                None => {
                    // The node's own connection reports a master down; this
                    // one only delays notices.
                    debug!(node = %name, "pub/sub connection closed");
                    self.drop_link(node);
                    return Poll::Ready(Event::Lost(NodeId(node)));
                }
            }
        }
        Poll::Pending
    }

    /// Drops `node`'s connection, if any: what it still says is ignored.
    /// Returns the generation of the next one.
    fn drop_link(&mut self, node: usize) -> u64 {
        self.sinks[node] = None;
        if let Some(abort) = self.streams[node].take() {
            abort.abort();
        }
        self.generation[node] += 1;
        self.generation[node]
    }
}
