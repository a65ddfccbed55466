//! Bugs planted in the client for the client sim to find (feature
//! `planted-bugs`, switched on per client by its
//! [`Simulation`](crate::sim::Simulation)): wrappers around the core's
//! machines, so that the production driver has no planted-bug branch.

use std::time::Instant;

use redlock_core::{HandOver, Key, Machine, Notice, Reply, Request};

/// A machine whose driver, cancelled, sends nothing of what the machine
/// queues then: a cancelled acquire sends no withdraws, and the nodes it
/// won keep its key for a whole TTL
/// ([`Simulation::skip_cancelled_withdraws`](crate::sim::Simulation::skip_cancelled_withdraws)).
pub(crate) struct SkipsCancelledWithdraws<'a, M> {
    machine: &'a mut M,
    abandoned: bool,
}

impl<'a, M> SkipsCancelledWithdraws<'a, M> {
    pub(crate) fn new(machine: &'a mut M) -> Self {
        Self {
            machine,
            abandoned: false,
        }
    }
}

impl<M: Machine> Machine for SkipsCancelledWithdraws<'_, M> {
    type Event = M::Event;

    fn poll_request(&mut self) -> Option<Request> {
        if self.abandoned {
            // The bug: dropped unsent.
            while self.machine.poll_request().is_some() {}
            return None;
        }
        self.machine.poll_request()
    }

    fn poll_event(&mut self) -> Option<M::Event> {
        self.machine.poll_event()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.machine.poll_timeout()
    }

    fn poll_listen(&mut self) -> Option<Vec<Key>> {
        self.machine.poll_listen()
    }

    fn ordered_by_masters(&self) -> bool {
        self.machine.ordered_by_masters()
    }

    fn poll_hand_over(&mut self) -> Option<HandOver> {
        self.machine.poll_hand_over()
    }

    fn handle_reply(&mut self, reply: Reply, now: Instant) {
        self.machine.handle_reply(reply, now);
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.machine.handle_timeout(now);
    }

    fn handle_delivery(&mut self, notice: Notice, at: Instant, now: Instant) {
        self.machine.handle_delivery(notice, at, now);
    }

    fn is_done(&self) -> bool {
        self.machine.is_done()
    }

    fn abandon(&mut self, now: Instant) {
        self.machine.abandon(now);
        self.abandoned = true;
    }
}
