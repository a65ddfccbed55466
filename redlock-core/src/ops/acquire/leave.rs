//! How an acquisition ends without a lock: it withdraws what its attempt
//! may have set and, for a fair lock, leaves the masters' queues.

use super::*;

impl<R: Rng> Acquisition<R> {
    /// Ends the acquisition without a lock: withdraws the attempt in flight
    /// (if any) on every node and, for a fair lock, leaves every queue.
    pub(super) fn leave(&mut self, now: Instant) {
        match std::mem::replace(&mut self.state, State::Done) {
            State::Attempting {
                round,
                value,
                phase,
                ..
            } => {
                let skipped = skipped_by_lock_round(&round, &phase);
                self.queue_releases(&round, &skipped, &value, now, true);
                if self.notices.wanted && crate::ops::release::hands_over(&self.kind) {
                    self.hand_over = Some(self.channels());
                }
            }
            State::Waiting { .. } if matches!(self.kind, LockKind::Fair { .. }) => {
                // Between attempts nothing of ours is set, but our entries
                // wait in the queues.
                let round = Round::new(
                    RoundId(self.rng.next_u64()),
                    &self.settings,
                    now,
                    self.settings.release_timeout(),
                );
                let value = LockValue::random(&mut self.rng, self.settings.value_len());
                self.queue_leave(&round, &value, now);
            }
            State::Waiting { .. } | State::Done => {}
        }
    }

    /// Withdraws what the attempt of `round` may have set, except on the
    /// nodes its lock round `skipped` (known slow: they never saw its
    /// value); `last`: the acquisition ends, and a fair waiter leaves the
    /// queues too.
    pub(super) fn queue_releases(
        &mut self,
        round: &Round,
        skipped: &[crate::NodeId],
        value: &LockValue,
        now: Instant,
        last: bool,
    ) {
        let deadline = now + self.settings.release_timeout();
        let requests = round.fan_out(&self.keys, &self.kind, value, Command::Withdraw, deadline);
        // Where waiters listen, one may have marked our value as waited for
        // ([`waited`](crate::waited)), which a plain `DELIFEQ` leaves; the
        // script would then follow it ([`Request::follow_up`]), as it would
        // on every node where the attempt found another holder. So the
        // script at once, which deletes our value marked or not.
        let native = !self.settings.release_notices();
        let requests = requests
            .filter(|r| !skipped.contains(&r.node))
            .filter(|r| !(planted!(ReleaseSkipsTimedOut) && round.timed_out(r.node)))
            .map(|r| Request {
                native: r.native && native,
                ..r.undoing(self.ttl, self.drift)
            });
        self.requests.extend(requests);
        if last {
            self.queue_leave(round, value, now);
        }
    }

    /// A fair acquisition that ends without the lock leaves every queue.
    pub(super) fn queue_leave(&mut self, round: &Round, value: &LockValue, now: Instant) {
        if !matches!(self.kind, LockKind::Fair { .. }) || planted!(FairLeaveForgotten) {
            return;
        }
        let deadline = now + self.settings.release_timeout();
        let requests = round.fan_out(&self.keys, &self.kind, value, Command::Leave, deadline);
        self.requests
            .extend(requests.map(|r| r.undoing(self.ttl, self.drift)));
    }
}

/// The nodes the lock round of an attempt now in `round` and `phase`
/// skipped (known slow): its value never reached them. A node skipped only
/// by the fence round (its token not sent) did get the value.
pub(super) fn skipped_by_lock_round(round: &Round, phase: &Phase) -> Vec<crate::NodeId> {
    match phase {
        Phase::Lock => round.skipped_nodes(),
        Phase::Fence { lock_votes, .. } => skipped_in(lock_votes),
    }
}

/// The nodes `votes` say were not asked (known slow).
pub(super) fn skipped_in(votes: &crate::Votes) -> Vec<crate::NodeId> {
    votes
        .votes()
        .iter()
        .enumerate()
        .filter(
            |(_, vote)| matches!(vote, NodeVote::Failed(e) if e.kind == crate::NodeErrorKind::Slow),
        )
        .map(|(i, _)| crate::NodeId(i))
        .collect()
}
