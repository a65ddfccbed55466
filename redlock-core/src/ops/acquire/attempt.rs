//! One attempt: its round sent to every node, and the decision on its
//! votes (the lock handed out, the fence round started, or the attempt
//! failed).

use super::*;

impl<R: Rng> Acquisition<R> {
    pub(super) fn start_attempt(&mut self, now: Instant, scheduled: Option<Instant>) {
        self.retries.start();
        self.notices.restart(now);
        // Random ids: a late reply to any earlier round, of this machine or of
        // another one the caller routes to us by mistake, is never counted.
        let attempt = RoundId(self.rng.next_u64());
        let value = LockValue::random(&mut self.rng, self.settings.value_len());
        let round = Round::new(attempt, &self.settings, now, self.node_timeout);
        if let LockKind::Semaphore { start } = &mut self.kind {
            // One first slot for every master of the attempt.
            let permits = crate::ops::semaphore::permits(&self.keys, false) as u64;
            *start = ((self.rng.next_u64() >> 40) % permits) as u32;
        }
        let command = if self.fenced {
            Command::AcquireFenced { ttl: self.ttl }
        } else {
            Command::Acquire { ttl: self.ttl }
        };
        // Reset in place: an attempt allocates nothing for them, and a kind
        // that never reads one keeps it empty (its writes are `get_mut`).
        let read = [
            self.fenced,
            matches!(self.kind, LockKind::Fair { .. }),
            matches!(self.kind, LockKind::Semaphore { .. }),
        ];
        for (slots, read) in [&mut self.counters, &mut self.positions, &mut self.slots]
            .into_iter()
            .zip(read)
        {
            slots.clear();
            if read {
                slots.resize(round.nodes().len(), None);
            }
        }
        self.scores = 0;
        self.theirs = None;
        self.unmarked = self.mark_lives_past(scheduled, now);
        if !self.unmarked {
            self.mark_waiting(round.nodes(), &value, round.deadline, now);
        }
        self.send_round(&round, &value, command);
        self.state = State::Attempting {
            round,
            value,
            phase: Phase::Lock,
            scheduled,
        };
    }

    /// Queues an attempt's requests. A waiter's (it listens for notices,
    /// on an exclusive or multi-resource lock) name its client, or its
    /// value for a client without a tag: each node then marks the holder it
    /// finds as waited for, in the same step as the check
    /// ([`waited`](crate::waited)), so that a release that deletes with one
    /// plain `DELIFEQ` where nobody waited still publishes to this waiter.
    /// The mark sent before the attempt ([`Command::MarkWaiting`]) cannot do
    /// that alone: a holder may take the key between the mark and the
    /// check.
    fn send_round(&mut self, round: &Round, value: &LockValue, command: Command) {
        let waiter =
            self.notices.asked && matches!(self.kind, LockKind::Exclusive | LockKind::Multi);
        let client = waiter.then(|| self.settings.client_tag().unwrap_or(value).clone());
        let keys = &self.acquire_keys;
        let requests = round.fan_out(keys, &self.kind, value, command, round.deadline);
        self.requests.extend(requests.map(|request| Request {
            client: client.clone(),
            ..request
        }));
    }

    pub(super) fn decide(&mut self, now: Instant) {
        if !matches!(self.state, State::Attempting { .. }) {
            return;
        }
        // The deadline is hard: a quorum counted at or after it (replies and
        // the timer became ready together, or the caller was slow to call
        // `handle_timeout`) is no lock. Its keys are released.
        if self.retries.is_past_deadline(now) {
            self.give_up_at_deadline(now);
            return;
        }
        let State::Attempting { round, phase, .. } = &self.state else {
            return;
        };
        if let Some(theirs) = self.theirs {
            // A master keeps another k: refused, and never retried.
            let error = AcquireError::PermitsMismatch {
                key: self
                    .semaphore
                    .clone()
                    .expect("only a semaphore is refused so"),
                ours: crate::ops::semaphore::permits(&self.keys, false) as u32,
                theirs,
                votes: round.votes(now),
                attempts: self.retries.started(),
            };
            self.fail_attempt(error, now);
            return;
        }
        let (tally, slot) = match (&self.kind, phase) {
            (LockKind::Semaphore { .. }, Phase::Lock) => {
                crate::ops::semaphore::tally(round, &self.slots, self.settings.quorum())
            }
            _ => (round.tally(), None),
        };
        let error = match tally {
            Tally::Open => return,
            Tally::Won => {
                // Validity always counts from the start of the lock round.
                let started = match phase {
                    Phase::Lock => round.started,
                    Phase::Fence { lock_started, .. } => *lock_started,
                };
                let started = if planted!(ValidityFromDecisionTime) {
                    now
                } else {
                    started
                };
                let until = valid_until(started, self.ttl, self.drift);
                if let Some(until) = until.filter(|&until| remaining(until, now).is_some()) {
                    if matches!(phase, Phase::Lock) && self.fenced {
                        self.start_fence_round(now, slot);
                        return;
                    }
                    let State::Attempting {
                        round,
                        value,
                        phase,
                        ..
                    } = std::mem::replace(&mut self.state, State::Done)
                    else {
                        unreachable!("matched Attempting above");
                    };
                    if matches!(self.kind, LockKind::Fair { .. }) {
                        // Our entry stays where we were granted, until the
                        // release; the others keep it until told.
                        let deadline = now + self.settings.release_timeout();
                        let leave = round
                            .fan_out(&self.keys, &self.kind, &value, Command::Leave, deadline)
                            .filter(|request| !round.granted(request.node))
                            .map(|request| request.undoing(self.ttl, self.drift));
                        self.requests.extend(leave);
                    }
                    // Nodes the lock round skipped never saw our value.
                    let untouched = skipped_by_lock_round(&round, &phase);
                    let (votes, fencing_token, fenced_keys) = match phase {
                        Phase::Lock => (round.votes(now), None, None),
                        Phase::Fence {
                            token,
                            lock_votes,
                            keys,
                            ..
                        } => (lock_votes, Some(token), Some(keys)),
                    };
                    let (keys, kind, votes) = match (slot, fenced_keys) {
                        // A fenced lock, or a fenced permit on its slot.
                        (_, Some(keys)) => (keys, LockKind::Exclusive, votes),
                        (Some(slot), None) => {
                            let (keys, withdraws, votes) = crate::ops::semaphore::take_permit(
                                &round,
                                &self.slots,
                                slot,
                                (&self.keys, &self.kind, &value),
                                &untouched,
                                votes,
                                now + self.settings.release_timeout(),
                            );
                            self.requests.extend(
                                withdraws
                                    .into_iter()
                                    .map(|request| request.undoing(self.ttl, self.drift)),
                            );
                            (keys, LockKind::Exclusive, votes)
                        }
                        (None, None) => (self.keys.clone(), self.kind.clone(), votes),
                    };
                    let lock = Lock {
                        settings: self.settings.clone(),
                        keys,
                        kind,
                        value,
                        ttl: self.ttl,
                        longest_ttl: self.ttl,
                        acquired_at: started,
                        valid_until: until,
                        votes,
                        fencing_token,
                        next_round: self.rng.next_u64(),
                        extensions: 0,
                        untouched,
                        semaphore: slot.map(|_| self.keys.clone()),
                    };
                    self.events.push_back(AcquireEvent::Acquired(lock));
                    return;
                }
                AcquireError::ValidityExhausted {
                    votes: round.votes(now),
                    ttl: self.ttl.as_duration(),
                    attempts: self.retries.started(),
                }
            }
            Tally::Lost if round.wrong_type_rules_out_quorum() => AcquireError::WrongType {
                keys: match self.kind {
                    LockKind::Multi => self.keys.to_vec(),
                    _ => vec![self.keys[0].clone()],
                },
                votes: round.votes(now),
                attempts: self.retries.started(),
            },
            Tally::Lost if round.failures_rule_out_quorum() => AcquireError::NoQuorum {
                votes: round.votes(now),
                attempts: self.retries.started(),
            },
            Tally::Lost => AcquireError::Held {
                votes: round.votes(now),
                attempts: self.retries.started(),
            },
        };
        self.fail_attempt(error, now);
    }
}
