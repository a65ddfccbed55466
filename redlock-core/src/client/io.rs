//! The [`Client`]'s input and output paths: what happened (`handle_*`)
//! and what to do next (`poll_*`).

use std::collections::BTreeSet;
use std::time::Instant;

use rand_core::Rng;

use crate::{
    Connected, Form, HealthChange, Key, NodeError, NodeErrorKind, NodeId, Reply, WeakPersistence,
};

use super::node::{Link, NodeState};
use super::notices::NoticeLink;
use super::{Client, Output, RequestId};

impl<R: Rng> Client<R> {
    /// The answer to request `id` arrived at `now`. An answer to a request
    /// forgotten ([`Output::Forget`]) or unknown is ignored.
    ///
    /// An answer `NOSCRIPT` ([`NodeErrorKind::NoScript`]) sends the request
    /// again in full ([`Form::InFull`](crate::Form::InFull)) while it is the last request
    /// for its lock key sent to its node: the node runs the repeat after
    /// everything sent before it, as it would have run the first send, and
    /// nothing sent after it for the key can be overtaken. Where a later
    /// one was sent, the request fails with that error: its operation
    /// counts the node as failed, which it allows for. A request whose
    /// operation ended is sent again too, as the first send would have run:
    /// an acquire granted without this node's answer covers it too.
    pub fn handle_reply(&mut self, id: RequestId, reply: Reply, now: Instant) {
        let noscript = matches!(&reply.result, Err(error) if error.kind == NodeErrorKind::NoScript);
        // Asked before the flight lands, which may end its key's record.
        let last = noscript
            && self.links.flights.get(&id).is_some_and(|flight| {
                self.links.nodes[flight.node.0].is_last(flight.request.key(), id)
                    || planted!(NoScriptResendOvertakes)
            });
        let Some(flight) = self.links.land(id) else {
            return;
        };
        self.links.timers.remove(&(flight.timer(), id));
        // A cluster node's next request for the key goes once this one is
        // done with (below: after its repeat, if any, which goes first).
        let turn = self.links.nodes[flight.node.0]
            .holds()
            .then(|| (flight.node, flight.request.key().clone()));
        let node = &mut self.links.nodes[flight.node.0];
        let broken = matches!(&reply.result, Err(error) if error.kind == NodeErrorKind::Connection);
        let mut reply = reply;
        if flight.votes
            && reply.result.is_ok()
            && let Some(error) = node.not_counted_now(now)
        {
            // Sent before the client knew of the restart: not a vote.
            reply.result = Err(error);
        }
        if !broken {
            if let Some(change) = node.answered(now) {
                self.outputs.push_back(Output::Health(change));
            }
        } else if flight.request.command.must_arrive()
            && flight.request.give_up_at > now
            && node.owe(flight.request.clone())
        {
            // Maybe never sent, maybe run: sent again.
            node.retry_at
                .get_or_insert(now + self.settings.node_timeout());
        }
        if noscript {
            if last && flight.request.form != Form::InFull {
                self.links.send_in_full(&mut self.outputs, flight, now);
                return;
            }
            if !last {
                reply.result = Err(NodeError::new(
                    NodeErrorKind::NoScript,
                    "the node's script cache was flushed; not sent again, since a later \
                     request for the same key went to the node first",
                ));
            }
        }
        if let Some((node, key)) = turn {
            self.links.turn(&mut self.outputs, node, &key, now);
        }
        let mut pump = Vec::new();
        if let Some(op) = flight.op
            && let Some(running) = self.ops.get_mut(&op)
        {
            running.machine.handle_reply(reply, now);
            pump.push(op);
        }
        self.pump(pump, now);
    }

    /// Node `node` has a connection again at `now`, to a server that is
    /// what `found` says: each request sent to it from now on goes as a
    /// plain command where its server has one, as a script otherwise
    /// ([`Request::form`](crate::Request::form)), and what it is owed is
    /// sent at once. A run id seen before and gone now means the server
    /// restarted under the client, and may have lost locks it granted: its
    /// votes do not count ([`NodeErrorKind::Restarted`]) until the longest
    /// TTL this client knows of has passed (the default TTL, or a longer
    /// one it asked for), with the drift allowance ([`Output::Health`]
    /// tells). A server that may evict lock keys, or lose them at a
    /// restart, is said there too ([`HealthChange::MayEvict`],
    /// [`HealthChange::MayLoseLocks`]), as the settings ask.
    pub fn handle_connected(&mut self, node: NodeId, found: &Connected, now: Instant) {
        let ttl = self.links.longest_ttl.max(self.settings.default_ttl());
        let wait = ttl.as_duration() + self.settings.drift(ttl);
        let state = &mut self.links.nodes[node.0];
        state.link = Link::Up;
        state.facts = found.facts;
        state.backoff.reset();
        if let Some(wait) = state.connected(&found.run_ids, wait, now) {
            self.outputs
                .push_back(Output::Health(HealthChange::Restarted { node, wait }));
        }
        if let Some(policy) = found.evicting.clone()
            && !self.settings.allow_eviction()
        {
            self.outputs
                .push_back(Output::Health(HealthChange::MayEvict { node, policy }));
        }
        if let Some(reason) = found.weak_persistence.clone()
            && self.settings.weak_persistence() != WeakPersistence::Accept
            && !std::mem::replace(&mut state.weak_told, true)
        {
            self.outputs
                .push_back(Output::Health(HealthChange::MayLoseLocks { node, reason }));
        }
        self.links.resend(&mut self.outputs, node, now);
    }

    /// Node `node` lost its connection at `now` (its driver saw it break):
    /// a new one is asked for at once ([`Output::Connect`]). Ignored while
    /// the node has no connection anyway.
    pub fn handle_disconnected(&mut self, node: NodeId, now: Instant) {
        let state = &mut self.links.nodes[node.0];
        if state.link == Link::Up {
            state.link = Link::Down { retry_at: now };
            self.connect_due(now);
        }
    }

    /// A connection attempt to `node` ([`Output::Connect`]) failed at
    /// `now`: the next one is asked for after the node's backoff, which
    /// doubles with each failure (`Backoff::reconnect`).
    pub fn handle_connect_failed(&mut self, node: NodeId, now: Instant) {
        let state = &mut self.links.nodes[node.0];
        if state.link == Link::Up {
            // Connected meanwhile (a connection made elsewhere): kept.
            return;
        }
        let mut wait = state.backoff.next(&mut self.rng);
        if planted!(ReconnectWithoutBackoff) {
            wait = std::time::Duration::ZERO;
        }
        state.link = Link::Down {
            retry_at: now + wait,
        };
    }

    /// Asks for a connection to each node whose attempt is due at `now`.
    fn connect_due(&mut self, now: Instant) {
        for (index, state) in self.links.nodes.iter_mut().enumerate() {
            if matches!(state.link, Link::Down { retry_at } if retry_at <= now) {
                state.link = Link::Connecting;
                self.outputs.push_back(Output::Connect(NodeId(index)));
            }
        }
    }

    /// A release notice from `node` on `channel` arrived at `now`.
    pub fn handle_notice(&mut self, node: NodeId, channel: &[u8], now: Instant) {
        self.hub.handle_notice(node, channel, now);
        self.pump(Vec::new(), now);
    }

    /// The pub/sub connection to `node` asked for
    /// ([`Output::ConnectNotices`]) is up at `now`: it is subscribed to the
    /// channels waited on.
    pub fn handle_notices_connected(&mut self, node: NodeId, now: Instant) {
        self.notices[node.0].connected();
        self.reconcile_notices(now);
    }

    /// The pub/sub connection to `node` failed at `now`: its attempt, a
    /// subscription not confirmed, or the connection itself. Another is
    /// asked for after a backoff of 50 ms doubling up to 2 s, while some
    /// acquire waits; a link that subscribed resets it. Until then the
    /// node's releases wake nobody: its waiters retry on their timers.
    pub fn handle_notices_lost(&mut self, node: NodeId, now: Instant) {
        self.notices[node.0].lost(now, &mut self.rng);
        self.reconcile_notices(now);
    }

    /// `node` confirmed the subscription asked ([`Output::Subscribe`]) at
    /// `now`. A channel's first, or one on a connection that replaced a
    /// lost one, is a [`Notice::Subscribed`](crate::Notice::Subscribed) to
    /// its waiters: a release before it went unheard, so they try again.
    pub fn handle_subscribed(&mut self, node: NodeId, now: Instant) {
        if let Some((channels, resubscribed)) = self.notices[node.0].confirmed() {
            self.hub.handle_subscribed(&channels, resubscribed, now);
        }
        self.reconcile_notices(now);
        self.pump(Vec::new(), now);
    }

    /// `node` confirmed the unsubscription asked ([`Output::Unsubscribe`])
    /// at `now`.
    pub fn handle_unsubscribed(&mut self, node: NodeId, now: Instant) {
        self.notices[node.0].confirmed();
        self.reconcile_notices(now);
    }

    /// How many nodes have a pub/sub connection up that subscribed.
    pub fn notice_links_up(&self) -> usize {
        self.notices
            .iter()
            .filter(|link| link.is_listening())
            .count()
    }

    /// Asks, of each node's pub/sub link, what brings it to the channels
    /// waited on now.
    pub(super) fn reconcile_notices(&mut self, now: Instant) {
        let wanted: BTreeSet<Key> = self.hub.wanted().cloned().collect();
        for (node, link) in self.notices.iter_mut().enumerate() {
            link.reconcile(NodeId(node), &wanted, now, &mut self.outputs);
        }
    }

    /// Time reached `now`: requests past their deadline make their node
    /// overdue, requests past their give-up instant are forgotten, owed
    /// requests are tried again, and operations whose timeout came run.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&(at, id)) = self.links.timers.first()
            && at <= now
        {
            self.links.timers.pop_first();
            let flight = self
                .links
                .flights
                .get_mut(&id)
                .expect("every timer is a flight's");
            if !flight.overdue {
                flight.overdue = true;
                if let Some(change) = self.links.nodes[flight.node.0].health.handle_overdue(now) {
                    self.outputs.push_back(Output::Health(change));
                }
                // Only a request that must arrive gives up later than its
                // deadline (`Request::give_up_at`).
                if flight.give_up_at > now {
                    self.links.timers.insert((flight.give_up_at, id));
                    continue;
                }
            }
            if let Some(flight) = self.links.land(id) {
                self.outputs.push_back(Output::Forget(id));
                if self.links.nodes[flight.node.0].holds() {
                    self.links
                        .turn(&mut self.outputs, flight.node, flight.request.key(), now);
                }
            }
        }
        self.connect_due(now);
        if self
            .notices
            .iter()
            .any(|link| link.retry_at().is_some_and(|at| at <= now))
        {
            self.reconcile_notices(now);
        }
        for node in 0..self.links.nodes.len() {
            let state = &mut self.links.nodes[node];
            state.forget_given_up(now);
            if state.retry_at.is_some_and(|at| at <= now) {
                self.links.resend(&mut self.outputs, NodeId(node), now);
            }
        }
        let mut due = Vec::new();
        while let Some(&(at, op)) = self.op_timers.first()
            && at <= now
        {
            self.op_timers.pop_first();
            if let Some(running) = self.ops.get_mut(&op) {
                running.timeout = None;
                running.machine.handle_timeout(now);
                due.push(op);
            }
        }
        self.pump(due, now);
    }

    /// What to do next, in order; `None` once there is nothing.
    pub fn poll_output(&mut self) -> Option<Output<R>> {
        self.outputs.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) is due next; `None`
    /// when nothing waits for time.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let flights = self.links.timers.first().map(|(at, _)| *at);
        let ops = self.op_timers.first().map(|(at, _)| *at);
        let owed = self
            .links
            .nodes
            .iter()
            .filter_map(NodeState::next_timeout)
            .min();
        // A lost pub/sub link is made again only while someone waits.
        let notices = (self.hub.wanted_len() > 0)
            .then(|| self.notices.iter().filter_map(NoticeLink::retry_at).min())
            .flatten();
        [flights, ops, owed, notices].into_iter().flatten().min()
    }
}
