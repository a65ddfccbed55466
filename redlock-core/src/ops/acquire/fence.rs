//! The second round of a fenced lock: once the lock round is won, the
//! fencing token is stored on a quorum before the lock is handed out.

use super::*;

/// What a node that granted a fenced lock puts under its token, from the
/// rest of its answer: `[counter]` or `[counter, clock]` (its clock in
/// microseconds, from the scripts' `TIME`). The token is above every
/// granting node's floor, so it is above the highest counter of the quorum
/// and at least the latest clock: a quorum that lost its counters (every
/// master restarted empty) still issues tokens above those issued before,
/// as long as no server's clock stepped back by more than the outage.
/// `None` when the answer is not numbers.
pub(crate) fn floor(answer: &[Response]) -> Option<u64> {
    let number = |reply: &Response| match reply {
        Response::Int(n) => u64::try_from(*n).ok(),
        _ => None,
    };
    match answer {
        [counter] => number(counter),
        [counter, _] if planted!(TokenFromCounterOnly) => number(counter),
        [counter, clock] => Some(number(counter)?.max(number(clock)?)),
        _ => None,
    }
}

impl<R: Rng> Acquisition<R> {
    /// The lock round was won on a fenced lock (a fenced semaphore's, on
    /// `slot`): store the token on a quorum. A permit's token comes from
    /// the counters of the masters that granted its slot, and is stored
    /// beside its slot key; the masters that granted another slot are
    /// withdrawn from now.
    pub(super) fn start_fence_round(&mut self, now: Instant, slot: Option<u64>) {
        let State::Attempting {
            round,
            value,
            scheduled,
            ..
        } = std::mem::replace(&mut self.state, State::Done)
        else {
            unreachable!("only called while attempting");
        };
        let token = round
            .nodes()
            .filter(|node| round.granted(*node))
            .filter(|node| slot.is_none() || self.slots[node.0] == slot)
            .filter_map(|node| self.counters[node.0])
            .max()
            .unwrap_or(0)
            .saturating_add(1);
        let (keys, lock_votes) = match slot {
            Some(slot) => {
                let (permit, withdraws, votes) = crate::ops::semaphore::take_permit(
                    &round,
                    &self.slots,
                    slot,
                    (&self.keys, &self.kind, &value),
                    &round.skipped_nodes(),
                    round.votes(now),
                    now + self.settings.release_timeout(),
                );
                self.requests.extend(withdraws);
                // The slot, its counter (`STORE_TOKEN`'s keys), and the
                // permits key that the permit's extensions keep alive.
                let counter = self.settings.fencing_key(&permit[0]);
                (
                    [permit[0].clone(), counter, permit[1].clone()].into(),
                    votes,
                )
            }
            None => (self.keys.clone(), round.votes(now)),
        };
        let fence = Round::new(
            RoundId(self.rng.next_u64()),
            &self.settings,
            now,
            self.node_timeout,
        );
        let command = Command::StoreToken { token };
        let requests = fence.fan_out(&keys, &LockKind::Exclusive, &value, command, fence.deadline);
        self.requests.extend(requests);
        self.state = State::Attempting {
            round: fence,
            value,
            phase: Phase::Fence {
                token,
                lock_started: round.started,
                lock_votes,
                keys,
            },
            scheduled,
        };
    }
}
