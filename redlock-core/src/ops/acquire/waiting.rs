//! How an acquisition waits: the channels it listens on, its place behind
//! its client's other waiters, and the waiters' marks it sends before its
//! attempts (see [`Acquisition`], "Release notices").

use super::*;

#[cfg_attr(not(feature = "simulation"), allow(unreachable_pub))]
impl<R: Rng> Acquisition<R> {
    /// The release channels this acquisition listens on while it waits
    /// (for `WaitQueue`s: one client's waiters per
    /// channel, first come, first served).
    pub fn channels(&self) -> Vec<Key> {
        crate::config::release_channels(&self.keys, &self.kind)
    }

    /// Waits behind waiters that came first instead of attempting at once:
    /// its client's `WaitQueue` for the lock is not
    /// empty (`WaitQueue::may_attempt_now`).
    /// An attempt now could take the lock just freed for the first of them.
    ///
    /// `Hub::plan` calls it with the client's marks,
    /// and is what an adapter calls. Call it right after the constructor,
    /// before draining any request:
    /// the first attempt's requests are withdrawn (nothing was sent), and
    /// the acquisition waits as after a failed attempt (asking to listen,
    /// `poll_listen`) until a notice says its turn
    /// came or its retry timer fires. The first attempt made then counts
    /// as the first, not as a retry. Does nothing for one attempt
    /// ([`Attempts::Once`]: a `try_lock` never waits), for a reentrant lock
    /// (its owner may hold it already: taking it again must not wait behind
    /// others), for a fair lock (the masters' queues order its waiters, and
    /// its first attempt takes its place there, behind the waiters that came
    /// first), for a semaphore's permit (another permit may be free: behind
    /// the client's first waiter, k permits would be handed over one at a
    /// time, as a lock), with release notices off (nothing would say its turn
    /// came), or once a request was polled.
    ///
    /// It marks the lock as waited for at once ([`Command::MarkWaiting`]),
    /// off the path of the hand-over, unless the client's last mark on
    /// every key it would mark lives until its next one reaches the nodes
    /// (`client_marked`, from the queue:
    /// `WaitQueue::marked_until`). A
    /// release publishes for any mark, and the client's queue hears the
    /// notice for all its waiters; that mark was queued on each node's
    /// connection before this acquire began, so it reaches every node no
    /// later than one of its own would. Give the queue this acquisition's
    /// [`marked_until`](Self::marked_until) afterwards
    /// (`WaitQueue::handle_marked`). A
    /// holder that releases and asks again while others wait, the common
    /// case of a contended lock, then costs no mark per hold.
    pub fn queue_behind(&mut self, now: Instant, client_marked: Option<Instant>) {
        let fresh = self.retries.started() == 1
            && self.requests.len() == self.settings.node_names().len()
            && matches!(
                self.state,
                State::Attempting {
                    phase: Phase::Lock,
                    ..
                }
            );
        let own_order = matches!(
            self.kind,
            LockKind::Reentrant { .. } | LockKind::Fair { .. } | LockKind::Semaphore { .. }
        );
        if self.retries.limit_is_once() || own_order || !self.notices.wanted || !fresh {
            return;
        }
        self.requests.clear();
        self.retries.unstart();
        self.notices.restart(now);
        // No attempt seen: a notice from before now may be one the waiter
        // ahead was told and left unused.
        self.notices.since = None;
        self.notices.asked = true;
        self.notices.listen = Some(self.channels());
        let until = now + crate::retry_delay(&self.settings.retry(), &mut self.rng);
        let until = match self.retries.deadline() {
            Some(deadline) => until.min(deadline),
            None => until,
        };
        // Marked now, off the path of the hand-over: the attempt that a
        // release notice starts needs no mark of its own (see
        // `mark_waiting`). The client's mark serves as well as ours while
        // it lives past our retry, whose attempt marks.
        self.marked_until = self.marked_until.max(client_marked);
        if !self.mark_lives_past(Some(until), now)
            && let State::Attempting { round, value, .. } = &self.state
        {
            let (nodes, deadline, value) = (round.nodes(), round.deadline, value.clone());
            self.mark_waiting(nodes, &value, deadline, now);
        }
        self.state = State::Waiting { until };
    }

    /// Until when this acquisition's last mark ([`Command::MarkWaiting`])
    /// surely lives on the nodes it reached, or the client's mark it
    /// relies on ([`queue_behind`](Self::queue_behind)); `None` if it never
    /// marked.
    pub fn marked_until(&self) -> Option<Instant> {
        self.marked_until
    }

    /// A release notice: once the lock may have been released after the
    /// current attempt started (see below), the acquisition tries again at
    /// once instead of at the end of the retry delay, so a released lock
    /// passes to a waiter in about one round trip. A notice that comes
    /// during an attempt counts once that attempt has failed (the release may
    /// have reached a node just after the attempt's check there); one from
    /// before the attempt started was seen by it.
    ///
    /// The lock may have been released when notices came from more nodes than
    /// failed attempts can free while another client holds a quorum
    /// (N - quorum + 1: 2 of 3, 3 of 5), when the channels were newly
    /// subscribed, or when this client released the lock itself
    /// ([`Notice::HandedOver`]: its release runs on every node before the
    /// attempt, so the hand-over takes one round trip and no notice).
    /// Failed attempts release what they set, and those releases
    /// publish too; a holder of a quorum leaves at most N - quorum nodes to
    /// them, so their clean-ups alone never wake a waiter.
    ///
    /// Such an extra attempt does not use up the retry count: if it fails,
    /// the acquisition goes back to waiting for the retry it had scheduled.
    ///
    /// The notice's instant `at` counts against the attempt's start; the
    /// attempt it starts starts `now`: a notice replayed to a waiter that
    /// became first may be long past, and a round started then would be
    /// past its deadline before its first request left.
    pub(super) fn hear(&mut self, notice: Notice, at: Instant, now: Instant) {
        if self.is_done() || self.notices.since.is_some_and(|since| at < since) {
            return;
        }
        match notice {
            Notice::Released(node) => {
                if let Some(heard) = self.notices.heard.get_mut(node.0) {
                    *heard = true;
                }
            }
            Notice::Subscribed => self.notices.subscribed = true,
            Notice::HandedOver => self.notices.handed_over = true,
        }
        self.wake_if_released(now);
    }

    /// Between attempts, starts the next one at once if the lock may have
    /// been released since the last one started.
    pub(super) fn wake_if_released(&mut self, now: Instant) {
        let State::Waiting { until } = self.state else {
            return;
        };
        if !self.notices.released(self.settings.quorum()) {
            return;
        }
        if self.retries.is_past_deadline(now) {
            return self.handle_timeout(now);
        }
        self.start_attempt(now, Some(until));
    }

    /// Before an attempt of a waiter that listens for release notices: on
    /// every node, announce that we wait ([`Command::MarkWaiting`]), so that
    /// the holder's release publishes there. Queued before the attempt's
    /// requests, so each node marks before it checks the key: a release
    /// after that check sees the mark. A release before it is seen by the
    /// attempt itself. The mark lives until our next attempt marks again
    /// ([`Settings::waiters_mark_ttl`]). Exclusive and multi-resource locks
    /// only: their releases publish only for a mark; the other kinds always
    /// publish.
    ///
    /// An extra attempt between retries (one a notice starts) sends no mark
    /// when the last one lives past the retry it goes back to
    /// ([`mark_lives_past`](Self::mark_lives_past)): that mark was set on
    /// each node before this attempt's check there, and it lives until the
    /// next mark arrives. So the attempt that a hand-over or a release
    /// notice starts costs one request per node, not two.
    pub(super) fn mark_waiting(
        &mut self,
        nodes: impl Iterator<Item = NodeId> + Clone,
        value: &LockValue,
        deadline: Instant,
        now: Instant,
    ) {
        if !self.notices.asked
            || !matches!(
                self.kind,
                LockKind::Exclusive | LockKind::Multi | LockKind::Semaphore { .. }
            )
        {
            return;
        }
        self.marked_until = Some(now + self.settings.waiters_mark_span(self.node_timeout));
        let command = Command::MarkWaiting {
            ttl: self.settings.waiters_mark_ttl(self.node_timeout),
        };
        // Its own round: nobody counts its replies.
        let id = RoundId(self.rng.next_u64());
        for key in crate::config::held_keys(&self.keys, &self.kind) {
            let keys = self.settings.mark_keys(key);
            self.requests.extend(nodes.clone().map(|node| Request {
                round: id,
                node,
                keys: keys.clone(),
                value: value.clone(),
                kind: LockKind::Exclusive,
                command,
                client: self.settings.client_tag().cloned(),
                native: false,
                aof: false,
                form: Default::default(),
                deadline,
                give_up_at: deadline,
                payload: None,
            }));
        }
    }

    /// Whether an attempt starting at `now` may go without a mark: it is an
    /// extra attempt (`scheduled`: the retry it goes back to if it fails),
    /// and the last mark lives until the next one has reached the nodes:
    /// the retry's, or, when the attempt ends after the retry's time, the
    /// one its failure sends then (`fail_attempt`). A fenced attempt takes
    /// two rounds.
    pub(super) fn mark_lives_past(&self, scheduled: Option<Instant>, now: Instant) -> bool {
        let attempt = self.node_timeout * if self.fenced { 2 } else { 1 };
        match (scheduled, self.marked_until) {
            (Some(until), Some(marked)) => marked >= until.max(now + attempt) + self.node_timeout,
            _ => false,
        }
    }
}
