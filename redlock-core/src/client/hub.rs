//! One client's release notices, decided: who waits for which lock, whom a
//! notice wakes and with which instant, and which channels are wanted.
// Public with the `simulation` feature only (`machinery!` in lib.rs).
#![cfg_attr(not(feature = "simulation"), allow(unreachable_pub))]

use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

use rand_core::Rng;

use crate::{Acquisition, HandOver, Key, NodeId, Notice, Release, WaitQueue, WaiterId, Wake};

/// What the [`Hub`] asks its caller to deliver, drained with
/// [`Hub::poll_delivery`]: give `notice` to `waiter`'s acquisition
/// ([`Machine::handle_delivery`](crate::Machine::handle_delivery)) with `at`,
/// at the instant it is delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Delivery {
    /// Whose acquisition hears it.
    pub waiter: WaiterId,
    /// What it hears.
    pub notice: Notice,
    /// The instant the acquisition compares with its attempt's start: when
    /// the notice arrived, the subscription was confirmed, or the client's
    /// own release was queued on every node.
    pub at: Instant,
}

/// The release notices of one client, without sockets or clock: per release
/// channel, a [`WaitQueue`] of the client's waiters and what was heard there.
///
/// The adapter keeps one pub/sub connection per node, subscribed to the
/// channels the hub [wants](Self::wanted), and only moves bytes: what
/// arrives goes in through `handle_*`, and each [`Delivery`] drained from
/// [`poll_delivery`](Self::poll_delivery) goes to its waiter. The hub
/// decides:
///
/// - **who waits behind whom** ([`plan`](Self::plan)): a new acquisition of
///   the client queues behind the client's waiters on any of its channels,
///   marking the lock only where the client's last mark (the earliest, over
///   its channels, of the instants each channel's mark surely lives) does
///   not outlive its wait;
/// - **whom a notice wakes**: the first waiter of the channel, and every
///   waiter the masters order (a fair lock), as [`WaitQueue`] says;
/// - **what an event means**: a node's notice is a
///   [`Notice::Released`]; a channel's first subscription, or any after a
///   lost connection, a [`Notice::Subscribed`] (a release before it was not
///   heard); the client's own release ([`HandOver`]) a
///   [`Notice::HandedOver`] carrying the instant the release was queued,
///   also when it is told at its answer;
/// - **what to replay**: a waiter that comes or becomes first is told the
///   channel's recent events with their instants (its acquisition ignores
///   those its attempt saw);
/// - **which channels are wanted**: those some waiter waits on.
///
/// # Calling order
///
/// Under one lock: build the acquisition, [`plan`](Self::plan) it, then
/// drive it; when it asks to listen
/// ([`Machine::poll_listen`](crate::Machine::poll_listen)),
/// [`handle_join`](Self::handle_join); give the hub every notice
/// ([`handle_notice`](Self::handle_notice)), confirmed subscription
/// ([`handle_subscribed`](Self::handle_subscribed)) and hand-over
/// ([`handle_hand_over`](Self::handle_hand_over)); when the acquisition
/// ends, [`handle_leave`](Self::handle_leave). After each input, drain
/// [`poll_delivery`](Self::poll_delivery) and, if
/// [`poll_wanted_changed`](Self::poll_wanted_changed), bring the
/// subscriptions to [`wanted`](Self::wanted).
///
/// ```
/// use std::time::{Duration, Instant};
/// use redlock_core::{Hub, Key, NodeId, Notice};
///
/// let now = Instant::now();
/// let mut hub = Hub::new(3);
/// let channel = Key::from("r\0released");
/// let first = hub.handle_join(vec![channel.clone()], false, now);
/// let second = hub.handle_join(vec![channel.clone()], false, now);
/// assert!(hub.poll_wanted_changed(), "subscribe to it");
/// // The first is first: told what it may have missed (nothing yet).
/// assert_eq!(hub.poll_delivery(), None);
/// let later = now + Duration::from_millis(1);
/// hub.handle_notice(NodeId(2), channel.as_bytes(), later);
/// let told = hub.poll_delivery().unwrap();
/// assert_eq!((told.waiter, told.notice, told.at), (first, Notice::Released(NodeId(2)), later));
/// assert_eq!(hub.poll_delivery(), None, "one waiter per notice");
/// // It leaves without the lock: the second is told what it missed.
/// hub.handle_leave(first, false, later);
/// let replayed = hub.poll_delivery().unwrap();
/// assert_eq!((replayed.waiter, replayed.at), (second, later));
/// hub.handle_leave(second, false, later);
/// assert!(hub.poll_wanted_changed() && hub.wanted().next().is_none());
/// ```
#[derive(Clone, Debug)]
pub struct Hub {
    nodes: usize,
    channels: BTreeMap<Key, Channel>,
    /// The channels each waiter waits on.
    waiters: BTreeMap<WaiterId, Vec<Key>>,
    next_waiter: u64,
    deliveries: VecDeque<Delivery>,
    wanted_changed: bool,
}

/// One channel some waiters wait on.
#[derive(Clone, Debug)]
struct Channel {
    /// Whose turn it is.
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

impl Hub {
    /// A hub for a client of `nodes` masters, nobody waiting.
    pub fn new(nodes: usize) -> Self {
        Self {
            nodes,
            channels: BTreeMap::new(),
            waiters: BTreeMap::new(),
            next_waiter: 0,
            deliveries: VecDeque::new(),
            wanted_changed: false,
        }
    }

    /// Whether some waiter waits on any channel: a release of the client
    /// has nothing to hand over otherwise.
    pub fn is_waiting(&self) -> bool {
        !self.channels.is_empty()
    }

    /// How many channels are wanted.
    pub fn wanted_len(&self) -> usize {
        self.channels.len()
    }

    /// The channels some waiter waits on: subscribe to these, and to no
    /// other.
    pub fn wanted(&self) -> impl Iterator<Item = &Key> {
        self.channels.keys()
    }

    /// Whether the wanted channels changed since the last call.
    pub fn poll_wanted_changed(&mut self) -> bool {
        std::mem::take(&mut self.wanted_changed)
    }

    /// The next notice to deliver.
    pub fn poll_delivery(&mut self) -> Option<Delivery> {
        self.deliveries.pop_front()
    }

    /// Plans a new acquisition of this client: first come, first served,
    /// it waits behind the client's waiters on any of its channels
    /// ([`Acquisition::queue_behind`]), marking the lock only where the
    /// client's last mark does not outlive its wait; the channels then
    /// record its mark. Call it once, on an acquisition just built, before
    /// driving it: this is the one place that rule is kept.
    #[must_use = "drive the planned acquisition"]
    pub fn plan<R: Rng>(
        &mut self,
        mut acquisition: Acquisition<R>,
        now: Instant,
    ) -> Acquisition<R> {
        if self.channels.is_empty() {
            return acquisition;
        }
        let channels = acquisition.channels();
        let queues = || channels.iter().map(|channel| self.channels.get(channel));
        if !queues().any(|entry| entry.is_some_and(|entry| !entry.queue.may_attempt_now())) {
            return acquisition;
        }
        // On every channel, or none: `None` is the least `Option`.
        let marked = queues()
            .map(|entry| entry.and_then(|entry| entry.queue.marked_until()))
            .min()
            .flatten();
        acquisition.queue_behind(now, marked);
        if let Some(until) = acquisition.marked_until() {
            for channel in &channels {
                if let Some(entry) = self.channels.get_mut(channel) {
                    entry.queue.handle_marked(until);
                }
            }
        }
        acquisition
    }

    /// Plans a release of this client ([`Lock::release`](crate::Lock::release),
    /// [`Release::new`]): where some of its waiters wait for the lock, it
    /// goes as the release script on every node, never as a plain
    /// `DELIFEQ` (Valkey 9), so that it is final once queued and hands over
    /// then ([`HandOver::Queued`]): the waiter told attempts behind it on
    /// every node. A waiter's mark makes a `DELIFEQ` delete nothing, and the
    /// script that deletes the value follows the `DELIFEQ`'s answer
    /// ([`Request::follow_up`](crate::Request::follow_up)), behind an
    /// attempt told at once, which then meets the value it waits for and
    /// sleeps out its retry. Nobody of this client waiting, it stays one
    /// `DELIFEQ` per node; a waiter that comes while such a release is on
    /// its way is handed over once the release's nodes answered. Call it
    /// once, on a release just made, before driving it.
    #[must_use = "drive the planned release"]
    pub fn plan_release(&self, release: Release) -> Release {
        let waited = release
            .hand_over_channel()
            .is_some_and(|channel| self.channels.contains_key(&channel));
        if waited && !planted!(HandOverBeforeFollowUp) {
            release.for_own_waiters()
        } else {
            release
        }
    }

    /// A waiter starts waiting on `channels`, last in their queues, at
    /// `now`; `by_masters`: the masters order the waiters of its lock (a
    /// fair lock, [`Machine::ordered_by_masters`](crate::Machine::ordered_by_masters)),
    /// and it is told every notice. A waiter that finds nobody ahead of it
    /// is told the channel's recent events at once.
    pub fn handle_join(&mut self, channels: Vec<Key>, by_masters: bool, now: Instant) -> WaiterId {
        let waiter = WaiterId(self.next_waiter);
        self.next_waiter += 1;
        for key in &channels {
            let nodes = self.nodes;
            let channel = self.channels.entry(key.clone()).or_insert_with(|| {
                self.wanted_changed = true;
                Channel::new(nodes)
            });
            if by_masters {
                channel.queue.handle_join_by_masters(waiter);
            } else {
                channel.queue.handle_join(waiter);
            }
            channel.deliver(&mut self.deliveries, now);
        }
        self.waiters.insert(waiter, channels);
        waiter
    }

    /// `waiter` stops waiting at `now`; `served`: its acquisition got a
    /// lock that excludes the next waiter (any kind but a read lock). A
    /// channel nobody waits on any more is no longer wanted.
    pub fn handle_leave(&mut self, waiter: WaiterId, served: bool, now: Instant) {
        let Some(channels) = self.waiters.remove(&waiter) else {
            return;
        };
        self.deliveries.retain(|delivery| delivery.waiter != waiter);
        for key in &channels {
            let Some(channel) = self.channels.get_mut(key) else {
                continue;
            };
            channel.queue.handle_leave(waiter, served);
            channel.deliver(&mut self.deliveries, now);
            if channel.queue.is_empty() {
                self.channels.remove(key);
                self.wanted_changed = true;
            }
        }
    }

    /// A release notice from `node` arrived on `channel` at `now`. A
    /// channel nobody waits on is ignored.
    pub fn handle_notice(&mut self, node: NodeId, channel: &[u8], now: Instant) {
        if let Some(channel) = self.channels.get_mut(&Key::from(channel))
            && let Some(heard) = channel.heard.get_mut(node.0)
        {
            *heard = Some(now);
            channel.tell(&mut self.deliveries, Notice::Released(node), now);
        }
    }

    /// A node confirmed its subscription to `channels` at `now`. A channel's
    /// first confirmation, or any on a connection that replaces a lost one
    /// (`resubscribed`), is a [`Notice::Subscribed`]: a release before it
    /// was not heard. Another node confirming a live channel is no news.
    pub fn handle_subscribed(&mut self, channels: &[Key], resubscribed: bool, now: Instant) {
        for key in channels {
            if let Some(channel) = self.channels.get_mut(key)
                && (!channel.active || resubscribed)
            {
                channel.active = true;
                channel.subscribed_at = Some(now);
                channel.tell(&mut self.deliveries, Notice::Subscribed, now);
            }
        }
    }

    /// What a release of this client tells its waiters
    /// ([`Machine::poll_hand_over`](crate::Machine::poll_hand_over)) at
    /// `now`: their queues decide who hears it, with the instant the
    /// release was queued (also when it is told at its answer).
    pub fn handle_hand_over(&mut self, hand_over: &HandOver, now: Instant) {
        for key in hand_over.channels() {
            if let Some(channel) = self.channels.get_mut(key) {
                let at = match hand_over {
                    HandOver::Queued { .. } => *channel.handed_over_at.insert(now),
                    _ => channel.handed_over_at.unwrap_or(now),
                };
                channel.queue.handle_hand_over(hand_over);
                channel.deliver(&mut self.deliveries, at);
            }
        }
    }
}

impl Channel {
    fn new(nodes: usize) -> Self {
        Self {
            queue: WaitQueue::new(),
            heard: vec![None; nodes].into(),
            subscribed_at: None,
            handed_over_at: None,
            active: false,
        }
    }

    /// A notice of the channel, for the waiters the queue says.
    fn tell(&mut self, deliveries: &mut VecDeque<Delivery>, notice: Notice, at: Instant) {
        self.queue.handle_notice(notice);
        self.deliver(deliveries, at);
    }

    /// What the queue asks; `at` is the instant of the notice told.
    fn deliver(&mut self, deliveries: &mut VecDeque<Delivery>, at: Instant) {
        while let Some(wake) = self.queue.poll_wake() {
            match wake {
                Wake::Tell { waiter, notice } => {
                    deliveries.push_back(Delivery { waiter, notice, at })
                }
                Wake::Replay { waiter } => {
                    if planted!(HubForgetsReplay) {
                        continue;
                    }
                    self.replay(deliveries, waiter);
                }
            }
        }
    }

    /// The channel's events so far, for a waiter that is first now: they
    /// may be newer than its attempt (its acquisition tells).
    fn replay(&self, deliveries: &mut VecDeque<Delivery>, waiter: WaiterId) {
        let heard = self.heard.iter().enumerate();
        let notices = heard.filter_map(|(node, at)| Some((Notice::Released(NodeId(node)), (*at)?)));
        let subscribed = self.subscribed_at.map(|at| (Notice::Subscribed, at));
        // The client's own releases publish nothing for its own waiters.
        let handed_over = self.handed_over_at.map(|at| (Notice::HandedOver, at));
        for (notice, at) in notices.chain(subscribed).chain(handed_over) {
            deliveries.push_back(Delivery { waiter, notice, at });
        }
    }
}
