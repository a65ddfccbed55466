//! After an attempt that did not win: a retry, when, and giving up (the
//! deadline, or a stall that no retry can end).

use super::*;

impl<R: Rng> Acquisition<R> {
    pub(super) fn fail_attempt(&mut self, error: AcquireError, now: Instant) {
        let State::Attempting {
            round,
            value,
            phase,
            scheduled,
        } = std::mem::replace(&mut self.state, State::Done)
        else {
            return;
        };
        let skipped = skipped_by_lock_round(&round, &phase);
        let reordered = self.count_stall(&round);
        if error.is_wrong_type() || error.is_permits_mismatch() {
            // Permanent: every retry would find the same key.
            self.queue_releases(&round, &skipped, &value, now, true);
            self.events.push_back(AcquireEvent::Failed(error));
            return;
        }
        // A fenced attempt takes two rounds.
        let attempt = self.node_timeout * if self.fenced { 2 } else { 1 };
        match self.retries.after_failure(
            scheduled,
            now,
            attempt,
            &self.settings.retry(),
            &mut self.rng,
        ) {
            Next::Retry(until) => {
                // Release everywhere, also where the node seemed to say no
                // or timed out: a reply can be lost after the node set the
                // key. A fair waiter keeps its place in the queues.
                self.queue_releases(&round, &skipped, &value, now, false);
                if self.unmarked && scheduled.is_some_and(|scheduled| scheduled <= now) {
                    // It took the place of the retry whose mark the last
                    // one was to live until: mark now, for the next.
                    self.mark_waiting(round.nodes(), &value, now + self.node_timeout, now);
                }
                self.wait_for_retry(error, until, now);
                if reordered && matches!(self.state, State::Waiting { .. }) {
                    // As for a notice: an extra attempt, the retry stays.
                    self.start_attempt(now, Some(until));
                }
            }
            Next::OutOfAttempts => {
                self.queue_releases(&round, &skipped, &value, now, true);
                self.events.push_back(AcquireEvent::Failed(error))
            }
        }
    }

    /// Fair locks: counts the attempts that found the key free somewhere
    /// but another waiter's turn, and no quorum holding it, and switches to
    /// the plain rule after [`FAIR_PATIENCE`] of them in a row.
    ///
    /// Also takes the highest score the masters gave us as our ticket, and
    /// says whether to try again at once: the key was free somewhere and
    /// held by no quorum, and a master ranked us higher than the ticket
    /// this attempt carried. Masters that saw waiters arrive in different
    /// orders may each have a different head, and then no release comes to
    /// end the wait; the next attempt carries the higher ticket, so each of
    /// them ranks us alike (each waiter's ticket only rises, and rises once
    /// per place a master gave it: a bounded number of extra attempts).
    pub(super) fn count_stall(&mut self, round: &Round) -> bool {
        let LockKind::Fair {
            by_queue, ticket, ..
        } = &mut self.kind
        else {
            return false;
        };
        let raised = self.scores > *ticket;
        *ticket = (*ticket).max(self.scores);
        // A fair acquire's "held by another" carries the holder's value;
        // without one, the key was free and another waiter was first.
        let held = round.count(|vote| matches!(vote, NodeVote::HeldByOther(Some(_))));
        let queued = round.count(|vote| matches!(vote, NodeVote::HeldByOther(None)));
        let best = self.positions.iter().flatten().min().copied();
        let nearer = match (best, self.best_position) {
            (Some(now), Some(before)) => now < before,
            _ => false,
        };
        if best.is_some() {
            self.best_position = best;
        }
        let held_by_quorum = held >= self.settings.quorum();
        if held_by_quorum || nearer {
            self.stalls = 0;
        } else if queued > 0 {
            self.stalls = self.stalls.saturating_add(1);
        }
        *by_queue = self.stalls < FAIR_PATIENCE || planted!(FairNeverFallsBack);
        raised && queued > 0 && !held_by_quorum
    }

    pub(super) fn wait_for_retry(&mut self, error: AcquireError, until: Instant, now: Instant) {
        // Only a release can help a lock held by someone else; nodes that
        // failed do not publish.
        if error.is_held_by_other() && self.notices.wanted && !self.notices.asked {
            self.notices.asked = true;
            self.notices.listen = Some(self.channels());
        }
        self.state = State::Waiting { until };
        self.events.push_back(AcquireEvent::AttemptFailed {
            error: error.clone(),
            retry_at: until,
        });
        self.last_error = Some(error);
        // Notices that came during the attempt.
        self.wake_if_released(now);
    }

    pub(super) fn give_up_at_deadline(&mut self, now: Instant) {
        self.leave(now);
        let error = self.deadline_error();
        self.events.push_back(AcquireEvent::Failed(error));
    }

    pub(super) fn deadline_error(&mut self) -> AcquireError {
        AcquireError::DeadlineExceeded {
            deadline: self.retries.limit().unwrap_or_default(),
            attempts: self.retries.started(),
            last: self.last_error.take().map(Box::new),
        }
    }
}
