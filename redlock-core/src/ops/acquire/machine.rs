//! The acquisition as a [`Machine`]: requests, events, timers and
//! channels out; replies, timeouts and release notices in.

use super::*;

impl<R: Rng> Machine for Acquisition<R> {
    type Event = AcquireEvent;

    fn poll_request(&mut self) -> Option<Request> {
        self.requests.pop_front()
    }

    fn poll_event(&mut self) -> Option<AcquireEvent> {
        self.events.pop_front()
    }

    /// The per-node timeout of the attempt in flight, the end of a retry
    /// wait, or the overall deadline, whichever comes first.
    fn poll_timeout(&self) -> Option<Instant> {
        let own = match &self.state {
            State::Attempting { round, .. } => round.deadline,
            State::Waiting { until } => *until,
            State::Done => return None,
        };
        Some(match self.retries.deadline() {
            Some(deadline) => own.min(deadline),
            None => own,
        })
    }

    /// The lock's release channels, once, after the first attempt that
    /// found the lock held by another client (an acquire that gets its lock
    /// at once never listens), if notices are on
    /// ([`Config::release_notices`](crate::Config::release_notices)).
    fn poll_listen(&mut self) -> Option<Vec<Key>> {
        self.notices.listen.take()
    }

    /// The lock's channels, once the withdraws of an attempt cut short
    /// (the acquisition ended with it in flight: cancelled, or past its
    /// deadline) are queued on every node: that attempt may have taken
    /// the lock, and its withdraws release it, so the client's waiters
    /// learn of it as of a release (a waiter's attempt that met the
    /// withdrawn value saw it held, and no notice would come).
    fn poll_hand_over(&mut self) -> Option<HandOver> {
        if !self.requests.is_empty() {
            return None;
        }
        let channels = self.hand_over.take()?;
        Some(HandOver::Queued { channels })
    }

    /// A fair lock's waiters are ordered by the masters' queues.
    fn ordered_by_masters(&self) -> bool {
        matches!(self.kind, LockKind::Fair { .. })
    }

    fn handle_reply(&mut self, reply: Reply, now: Instant) {
        let State::Attempting { round, phase, .. } = &mut self.state else {
            return;
        };
        let command = match phase {
            Phase::Lock if self.fenced => Command::AcquireFenced { ttl: self.ttl },
            Phase::Lock => Command::Acquire { ttl: self.ttl },
            Phase::Fence { token, .. } => Command::StoreToken { token: *token },
        };
        let (position, score) = match (&self.kind, &reply.result) {
            (LockKind::Fair { .. }, Ok(Response::Array(items))) => match items.as_slice() {
                [
                    Response::Int(0),
                    Response::Int(position),
                    Response::Int(score),
                ] => (u64::try_from(*position).ok(), u64::try_from(*score).ok()),
                _ => (None, None),
            },
            _ => (None, None),
        };
        let (slot, counter) = match (&self.kind, &command, &reply.result) {
            // A slot that is not one of ours counts for none.
            (LockKind::Semaphore { .. }, _, result) => crate::ops::semaphore::granted(result)
                .filter(|&(slot, _)| {
                    slot < crate::ops::semaphore::permits(&self.keys, false) as u64
                })
                .map_or((None, None), |(slot, counter)| (Some(slot), counter)),
            (_, Command::AcquireFenced { .. }, Ok(Response::Array(items))) => {
                match items.as_slice() {
                    [Response::Int(1), counter @ ..] => (None, crate::ops::acquire::floor(counter)),
                    _ => (None, None),
                }
            }
            _ => (None, None),
        };
        let theirs = match (&self.kind, &command) {
            (
                LockKind::Semaphore { .. },
                Command::Acquire { .. } | Command::AcquireFenced { .. },
            ) => crate::ops::semaphore::refused(&reply.result),
            _ => None,
        };
        let vote = interpret_acquire(&self.kind, command, reply.native, reply.result);
        if round.record(reply.round, reply.node, vote) {
            self.theirs = self.theirs.or(theirs);
            if let Some(granted) = self.slots.get_mut(reply.node.0) {
                *granted = slot;
            }
            if let Some(slot) = self.counters.get_mut(reply.node.0) {
                *slot = counter;
            }
            if let Some(slot) = self.positions.get_mut(reply.node.0) {
                *slot = position;
            }
            self.scores = self.scores.max(score.unwrap_or(0));
            self.decide(now);
        }
    }

    /// Times out silent nodes, starts the next attempt after a retry wait,
    /// or gives up at the overall deadline.
    fn handle_timeout(&mut self, now: Instant) {
        if self.retries.is_past_deadline(now) && !self.is_done() {
            self.give_up_at_deadline(now);
            return;
        }
        match &mut self.state {
            State::Attempting { round, .. } if now >= round.deadline => {
                round.expire();
                self.decide(now);
            }
            State::Waiting { until } if now >= *until => {
                self.retries.count_scheduled();
                self.start_attempt(now, None);
            }
            _ => {}
        }
    }

    /// A release notice for an event at `at`, delivered `now`: it counts
    /// unless `at` is older than the current attempt, and an attempt it
    /// starts starts `now`.
    fn handle_delivery(&mut self, notice: Notice, at: Instant, now: Instant) {
        self.hear(notice, at, now);
    }

    fn is_done(&self) -> bool {
        matches!(self.state, State::Done)
    }

    /// Queues a release of the attempt in flight (if any) on every node and
    /// ends with no event: an attempt in flight may already hold some nodes.
    fn abandon(&mut self, now: Instant) {
        self.leave(now);
    }
}
