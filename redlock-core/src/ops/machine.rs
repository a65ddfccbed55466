//! The one surface of every state machine in the core.

use std::time::Instant;

use crate::{Key, NodeId, Reply, Request};

/// What every state machine of the core ([`Acquisition`](crate::Acquisition),
/// [`Extension`](crate::Extension), [`Release`](crate::Release), the
/// keep-alive [`KeptLock`](crate::KeptLock) and the status read
/// [`Inspection`](crate::Inspection)) offers its driver: inputs `handle_*`,
/// each with the time, and outputs `poll_*`. One driver loop runs them all,
/// so every request of every path takes the same way to its node.
///
/// # Calling order
///
/// A driver runs any machine with one loop:
///
/// 1. Drain [`poll_request`](Self::poll_request) and send every request at
///    once, in the order given (one node's requests must reach it in that
///    order: a withdraw before the next attempt, a release after the extend
///    it undoes).
/// 2. Drain [`poll_listen`](Self::poll_listen) and start listening for release
///    notices on those channels, if the driver can; drain
///    [`poll_hand_over`](Self::poll_hand_over) and give it to the driver's
///    own waiters on those channels through its [`Hub`](crate::Hub)
///    ([`Hub::handle_join`](crate::Hub::handle_join),
///    [`Hub::handle_hand_over`](crate::Hub::handle_hand_over)).
/// 3. Drain [`poll_event`](Self::poll_event). Once [`is_done`](Self::is_done),
///    the last event drained was the final one: stop (requests still in
///    flight may complete in the background; late answers change nothing).
/// 4. Wait for whichever comes first: a node's answer
///    ([`handle_reply`](Self::handle_reply)), the instant of
///    [`poll_timeout`](Self::poll_timeout)
///    ([`handle_timeout`](Self::handle_timeout)), or a release notice
///    ([`handle_notice`](Self::handle_notice), or
///    [`handle_delivery`](Self::handle_delivery) for a hub's). Then go to 1.
///
/// A driver that stops before the end (a cancelled future) calls
/// [`abandon`](Self::abandon) and sends the requests it queues.
///
/// ```
/// use std::sync::Arc;
/// use std::time::{Duration, Instant};
/// use rand::{SeedableRng, rngs::StdRng};
/// use redlock_core::{Acquisition, Attempts, Config, Machine, Reply, Response};
///
/// let settings = Arc::new(Config::new(["a", "b", "c"]).validate().unwrap());
/// let start = Instant::now();
/// let mut machine = Acquisition::new(
///     settings.clone(), b"report", settings.default_ttl(), Attempts::Once, start,
///     StdRng::seed_from_u64(1),
/// );
/// // Every node says yes at once, here.
/// let now = start + Duration::from_millis(1);
/// let answer = |request| Reply::to(&request, Ok(Response::Int(1)));
/// let mut last = None;
/// while !machine.is_done() {
///     for request in std::iter::from_fn(|| machine.poll_request()).collect::<Vec<_>>() {
///         machine.handle_reply(answer(request), now);
///     }
///     while let Some(event) = machine.poll_event() {
///         last = Some(event);
///     }
/// }
/// assert!(matches!(last, Some(redlock_core::AcquireEvent::Acquired(_))));
/// ```
#[cfg_attr(not(feature = "simulation"), allow(unreachable_pub))]
pub trait Machine {
    /// What the machine reports.
    type Event;

    /// The next request to send, if any.
    fn poll_request(&mut self) -> Option<Request>;

    /// The next event, if any.
    fn poll_event(&mut self) -> Option<Self::Event>;

    /// When [`handle_timeout`](Self::handle_timeout) is due next; `None` once
    /// done.
    fn poll_timeout(&self) -> Option<Instant>;

    /// Release channels to listen on from now on (see
    /// [`Settings::release_channel`](crate::Settings::release_channel)); at
    /// most once per machine. Only a waiting acquisition asks.
    fn poll_listen(&mut self) -> Option<Vec<Key>> {
        None
    }

    /// Whether the masters order this machine's waiters, not its client: a
    /// fair lock's queues on the masters decide who is next, across
    /// processes and inside one. Its driver then tells it every release
    /// notice of its channels ([`WaitQueue::handle_join_by_masters`](crate::WaitQueue::handle_join_by_masters)),
    /// not only when it is the first of its client's waiters.
    fn ordered_by_masters(&self) -> bool {
        false
    }

    /// What a release tells the driver's own waiters on its channels,
    /// through its [`Hub`](crate::Hub)
    /// ([`Hub::handle_hand_over`](crate::Hub::handle_hand_over)):
    /// first that it is queued on every node
    /// ([`HandOver::Queued`], once every request was drained), then, for an
    /// exclusive lock, whether its nodes saw a waiter of another client
    /// ([`HandOver::Answered`], once every node answered or timed out).
    /// Only a [`Release`](crate::Release) of a fair or an exclusive lock
    /// hands over, and an [`Acquisition`](crate::Acquisition) of one that
    /// ends during an attempt: its withdraws are a release of what the
    /// attempt may have taken ([`HandOver::Queued`] only).
    fn poll_hand_over(&mut self) -> Option<HandOver> {
        None
    }

    /// Feeds one node's answer. Answers of other rounds, of unknown nodes or
    /// of nodes that already answered are ignored.
    fn handle_reply(&mut self, reply: Reply, now: Instant);

    /// Advances time to `now`.
    fn handle_timeout(&mut self, now: Instant);

    #[cfg(feature = "simulation")]
    /// Feeds a release notice that arrived at `now`. Only an acquisition
    /// uses them.
    fn handle_notice(&mut self, notice: Notice, now: Instant) {
        self.handle_delivery(notice, now, now);
    }

    /// Feeds a release notice delivered at `now` for an event at `at`, as
    /// a [`Hub`](crate::Hub) gives it ([`Delivery`](crate::Delivery)): a
    /// replay, or a hand-over told at its answer, carries the instant of its
    /// event, earlier than its delivery. `at` is what is compared with the
    /// attempt's start; an attempt the notice starts starts `now`.
    fn handle_delivery(&mut self, notice: Notice, at: Instant, now: Instant) {
        let _ = (notice, at, now);
    }

    /// True once the final event is queued.
    fn is_done(&self) -> bool;

    /// The driver stops before the end: queue whatever must be undone (an
    /// acquisition releases the attempt in flight). No event follows; a
    /// release still gives what it tells its client's waiters
    /// ([`poll_hand_over`](Self::poll_hand_over)).
    fn abandon(&mut self, now: Instant) {
        let _ = now;
    }
}

/// What a release tells its client's waiters ([`Machine::poll_hand_over`]).
#[cfg_attr(not(feature = "simulation"), allow(unreachable_pub))]
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HandOver {
    /// The release is queued on every node ahead of anything sent from
    /// now: an attempt sent now meets the key freed on every node that
    /// runs the release ([`Notice::HandedOver`]).
    Queued {
        /// The lock's release channels.
        channels: Vec<Key>,
    },
    /// The release's nodes answered.
    Answered {
        /// The lock's release channels.
        channels: Vec<Key>,
        /// Whether a waiter of another client may wait for the lock: some
        /// node that deleted our key found one marked, or could not say
        /// ([`scripts::RELEASE_IF_WAITED`](crate::scripts::RELEASE_IF_WAITED)
        /// answers `3` or `2`), or no node deleted it.
        others_waiting: bool,
        /// Whether some node deleted our key and published no notice
        /// (`RELEASE_IF_WAITED` answers `1`): the client's own waiters
        /// marked there hear of this release only from their client.
        unheard: bool,
    },
}

#[cfg_attr(not(feature = "simulation"), allow(unreachable_pub))]
impl HandOver {
    /// The release channels it concerns.
    pub fn channels(&self) -> &[Key] {
        match self {
            HandOver::Queued { channels } | HandOver::Answered { channels, .. } => channels,
        }
    }
}

/// A release notice, for `Machine::handle_notice`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Notice {
    /// A node announced that a lock on one of the channels was released.
    Released(NodeId),
    /// The channels became subscribed (first, or again after a lost
    /// connection): a release before this instant may not have been heard.
    Subscribed,
    /// The client released a lock on one of the channels itself, and its
    /// release is queued on every node ahead of anything sent from this
    /// instant (`Machine::poll_hand_over`): an attempt now meets the key
    /// freed on every node that runs the release, one round trip after it,
    /// without waiting for the nodes' notices.
    HandedOver,
}
