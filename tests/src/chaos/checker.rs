//! The checker: merges every worker's records with the fault log and says
//! whether Redlock kept its promises.
//!
//! - **Safety**: two holds of one key (by different acquisitions) whose
//!   windows overlap are a violation. Windows are on the host's monotonic
//!   clock, shared by all worker processes.
//! - **Fencing**: writes the resource rejected (a higher token had been
//!   seen), writes sent after the writer's own hold had ended ("late") or
//!   after a newer hold of the key had been granted ("superseded"), and
//!   stale writes the resource accepted: a write applied after a write of a
//!   hold granted later. A resource that checks tokens, fed monotonic
//!   tokens, never accepts one.
//! - **Tokens**: the fencing tokens of one key's holds rise strictly in
//!   grant order ([`falling_terms`]; an election's terms are its tokens).
//!   A token that went back is a violation even where no stale write was
//!   accepted: the resource then refuses the newer holder's writes (it saw
//!   the older, higher token) and takes the older holder's late ones, which
//!   the stale-write count, judged on writes applied after a newer
//!   holder's, does not see.
//! - **Liveness** per fault window: while a majority is up, locks are
//!   granted; while a majority is down, no acquisition round started inside
//!   the window wins a lock, every acquire of a fresh key fails with the
//!   no-quorum error, none grossly slower than the per-node timeout (ten
//!   times it: that catches a client waiting out a response timeout or a
//!   TTL, not a busy machine), and the workers' acquires of contended keys
//!   fail with no-quorum or, when the masters still up answered that
//!   another owner holds the key, with held-by-other. How long they took is
//!   a printed figure, with calls made while the machine stalled apart.
//!
//! Every pass/fail condition here is one a slow or loaded machine cannot
//! trip: a count or a latency it could miss is reported, not judged.

use std::collections::{BTreeMap, HashMap};

use super::clock::ms;
use super::leaders::{FallingTerm, falling_terms};
use super::record::{Api, Attempt, Grant, Hold, Outcome, Record, Write};

/// A hold, named by its worker and its number there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HoldId {
    /// The worker process's id.
    pub worker: u32,
    /// The hold's number within the worker.
    pub hold: u64,
}

impl HoldId {
    /// The id of `hold`.
    pub fn of(hold: &Hold) -> Self {
        Self {
            worker: hold.worker,
            hold: hold.hold,
        }
    }
}

/// Two holds of one key whose windows overlap.
#[derive(Clone, Debug, PartialEq)]
pub struct Overlap {
    /// The resource name.
    pub key: String,
    /// The hold that started first.
    pub first: HoldId,
    /// The hold that started while `first` was still held.
    pub second: HoldId,
    /// How long both were held at once, in ms.
    pub overlap_ms: f64,
}

/// What the records of one scenario show.
#[derive(Clone, Debug, Default)]
pub struct Analysis {
    /// Acquire calls, by outcome.
    pub outcomes: BTreeMap<Outcome, usize>,
    /// Granted locks.
    pub holds: usize,
    /// Pairs of overlapping holds.
    pub overlaps: Vec<Overlap>,
    /// Writes to the protected resource.
    pub writes: usize,
    /// Writes the resource rejected because it had seen a higher token.
    pub fenced_writes_rejected: usize,
    /// Writes sent after the writer's own hold had ended.
    pub late_writes: usize,
    /// Writes sent after a newer hold of the key had been granted: without
    /// fencing, each of these would have clobbered the newer holder's work.
    pub superseded_writes: usize,
    /// Superseded writes the resource rejected.
    pub superseded_writes_rejected: usize,
    /// Writes the resource applied after it had applied a write of a hold
    /// granted later (the resource's state went back to an older holder).
    pub stale_writes_accepted: usize,
    /// Holds of one key, consecutive in grant order, whose fencing tokens
    /// (an election's terms) do not rise: the token went back.
    pub falling_tokens: Vec<FallingTerm>,
    /// Holds whose process stalled (was stopped) for longer than the
    /// validity it had.
    pub paused_past_validity: usize,
    /// Of those, the ones whose worker saw it had lost the lock.
    pub paused_and_noticed: usize,
    /// Holds whose worker noticed the loss (for any reason).
    pub noticed_losses: usize,
    /// Holds with at least one extension.
    pub extended_holds: usize,
    /// Holds of kept-alive locks.
    pub kept_alive_holds: usize,
    /// Holds whose worker was killed before they ended (taken to last
    /// until their validity ran out).
    pub open_holds: usize,
}

impl Analysis {
    /// Granted locks (a shorthand for `holds`).
    pub fn granted(&self) -> usize {
        self.holds
    }

    /// Acquire calls with this outcome.
    pub fn count(&self, outcome: Outcome) -> usize {
        self.outcomes.get(&outcome).copied().unwrap_or(0)
    }
}

/// The records of one scenario, split by kind.
#[derive(Clone, Debug, Default)]
pub struct Records {
    /// Every acquire call.
    pub attempts: Vec<Attempt>,
    /// Every granted lock.
    pub holds: Vec<Hold>,
    /// Every write to the protected resource.
    pub writes: Vec<Write>,
}

/// Holds without their end record become open holds, lasting until the
/// last validity their client was promised.
impl FromIterator<Record> for Records {
    fn from_iter<I: IntoIterator<Item = Record>>(iter: I) -> Self {
        let mut records = Records::default();
        let mut started: BTreeMap<HoldId, (Grant, u64)> = BTreeMap::new();
        for record in iter {
            match record {
                Record::Attempt(a) => records.attempts.push(a),
                Record::Grant(g) => {
                    let id = HoldId {
                        worker: g.worker,
                        hold: g.hold,
                    };
                    let until = g.valid_until_ns;
                    started.insert(id, (g, until));
                }
                Record::Extended(e) => {
                    let id = HoldId {
                        worker: e.worker,
                        hold: e.hold,
                    };
                    if let Some((_, until)) = started.get_mut(&id) {
                        *until = (*until).max(e.valid_until_ns);
                    }
                }
                Record::Hold(h) => {
                    started.remove(&HoldId::of(&h));
                    records.holds.push(h);
                }
                Record::Write(w) => records.writes.push(w),
            }
        }
        records.holds.extend(
            started
                .values()
                .map(|(grant, until)| Hold::open(grant, *until)),
        );
        records
    }
}

impl Records {
    /// The safety and fencing analysis.
    pub fn analyze(&self) -> Analysis {
        let mut analysis = Analysis {
            holds: self.holds.len(),
            overlaps: overlaps(&self.holds),
            falling_tokens: falling_terms(&self.holds),
            writes: self.writes.len(),
            ..Analysis::default()
        };
        for attempt in &self.attempts {
            *analysis.outcomes.entry(attempt.outcome).or_default() += 1;
        }
        for hold in &self.holds {
            if hold.paused_past_validity {
                analysis.paused_past_validity += 1;
                // A kept-alive lock must also have had its loss signalled.
                if hold.noticed_loss == Some(true) && (!hold.keep_alive || hold.loss.is_some()) {
                    analysis.paused_and_noticed += 1;
                }
            }
            if hold.noticed_loss == Some(true) {
                analysis.noticed_losses += 1;
            }
            if hold.extensions > 0 {
                analysis.extended_holds += 1;
            }
            if hold.keep_alive {
                analysis.kept_alive_holds += 1;
            }
            if hold.open {
                analysis.open_holds += 1;
            }
        }
        self.analyze_writes(&mut analysis);
        analysis
    }

    fn analyze_writes(&self, analysis: &mut Analysis) {
        let by_id: HashMap<HoldId, &Hold> = self.holds.iter().map(|h| (HoldId::of(h), h)).collect();
        let mut grants_by_key: HashMap<&str, Vec<u64>> = HashMap::new();
        for hold in &self.holds {
            grants_by_key
                .entry(&hold.key)
                .or_default()
                .push(hold.granted_ns);
        }
        for grants in grants_by_key.values_mut() {
            grants.sort_unstable();
        }
        for write in &self.writes {
            if !write.accepted {
                analysis.fenced_writes_rejected += 1;
            }
            let Some(hold) = by_id.get(&HoldId {
                worker: write.worker,
                hold: write.hold,
            }) else {
                continue;
            };
            if write.sent_ns >= hold.end_ns {
                analysis.late_writes += 1;
            }
            // A hold of the same key granted after this one and before the write.
            let grants = &grants_by_key[write.key.as_str()];
            let newer = grants.partition_point(|&g| g <= hold.granted_ns);
            if grants.get(newer).is_some_and(|&g| g < write.sent_ns) {
                analysis.superseded_writes += 1;
                if !write.accepted {
                    analysis.superseded_writes_rejected += 1;
                }
            }
        }
        // Replay the resource: accepted writes in the order it applied them.
        let mut applied: Vec<&Write> = self.writes.iter().filter(|w| w.accepted).collect();
        applied.sort_by_key(|w| w.seq);
        let mut newest: HashMap<&str, u64> = HashMap::new();
        for write in applied {
            let Some(hold) = by_id.get(&HoldId {
                worker: write.worker,
                hold: write.hold,
            }) else {
                continue;
            };
            let newest = newest.entry(&write.key).or_insert(0);
            if hold.granted_ns < *newest {
                analysis.stale_writes_accepted += 1;
            } else {
                *newest = hold.granted_ns;
            }
        }
    }
}

/// Every pair of holds of one key by two holders whose windows overlap,
/// found by the test kit's checker (`redlock_testkit::overlaps`, the one
/// users run on their own histories); an empty window is no hold.
pub fn overlaps(holds: &[Hold]) -> Vec<Overlap> {
    let id = |hold: &Hold| format!("{}/{}", hold.worker, hold.hold).into_bytes();
    let by_id: HashMap<Vec<u8>, &Hold> = holds.iter().map(|hold| (id(hold), hold)).collect();
    let windows: Vec<redlock_testkit::Hold> = holds
        .iter()
        .map(|hold| redlock_testkit::Hold {
            key: hold.key.clone().into_bytes(),
            holder: id(hold),
            from: std::time::Duration::from_nanos(hold.granted_ns),
            until: std::time::Duration::from_nanos(hold.end_ns),
            shared: false,
        })
        .collect();
    redlock_testkit::overlaps(&windows)
        .into_iter()
        .map(|overlap| {
            let (first, second) = (by_id[&overlap.first.holder], by_id[&overlap.second.holder]);
            Overlap {
                key: first.key.clone(),
                first: HoldId::of(first),
                second: HoldId::of(second),
                overlap_ms: ms(first.end_ns.min(second.end_ns) - second.granted_ns),
            }
        })
        .collect()
}

/// One fault, from the moment it took effect to the moment it was undone.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Window {
    /// What was done, for the report (`"pause node 3"`).
    pub label: String,
    /// The fault class (`"node_pause"`, `"majority_down"`, ...).
    pub class: String,
    /// Whether a majority of nodes stayed up and reachable.
    pub majority_up: bool,
    /// When the fault had taken effect.
    pub start_ns: u64,
    /// When it started being undone.
    pub end_ns: u64,
}

/// Intervals (start, end) on the shared clock during which the machine did
/// not run a thread that wanted to run for a long time (see
/// [`LagMonitor`](super::suite::LagMonitor)): timings then measure the
/// machine's load, not the client.
pub type Stalls = [(u64, u64)];

/// Nanoseconds of `stalls` inside `[start, end]`.
pub fn stalled_ns(stalls: &Stalls, start: u64, end: u64) -> u64 {
    stalls
        .iter()
        .map(|&(s, e)| e.min(end).saturating_sub(s.max(start)))
        .sum()
}

/// How long after a window's start an acquisition round may still have
/// been sent before the fault took effect: a signal is delivered, and a
/// proxy's flag seen, within microseconds; this is a wide margin.
pub const FAULT_EFFECT_NS: u64 = 5_000_000;

/// What happened during one fault window.
#[derive(Clone, Debug, PartialEq)]
pub struct WindowReport {
    /// The window.
    pub window: Window,
    /// Locks granted to workers inside the window.
    pub grants: usize,
    /// Probe attempts (one `try_lock` on a fresh key) made entirely inside
    /// it.
    pub probes: usize,
    /// Of those, the granted ones.
    pub probes_granted: usize,
    /// Of those, the ones that failed with the no-quorum error.
    pub probes_no_quorum: usize,
    /// The longest probe made while the machine was not stalled, in ms.
    pub probe_max_ms: f64,
    /// Probes that ran while the machine stalled: their timings are left
    /// out of `probe_max_ms`.
    pub probes_disturbed: usize,
    /// The longest probe including the disturbed ones, in ms.
    pub probe_max_all_ms: f64,
    /// Workers' acquire calls made entirely inside the window.
    pub worker_attempts: usize,
    /// Of those, the ones that failed with the no-quorum error.
    pub worker_no_quorum: usize,
    /// Of those, the ones that failed because the key was held by another
    /// owner on enough of the masters still up (the decision can come
    /// before the down masters' timeouts).
    pub worker_held: usize,
    /// The longest of the workers' single-attempt calls (`try_lock`) made
    /// entirely inside the window while the machine was not stalled, in ms.
    pub worker_try_lock_max_ms: f64,
    /// Workers' single-attempt calls that ran while the machine stalled.
    pub worker_calls_disturbed: usize,
    /// The longest single-attempt call including the disturbed ones, in ms.
    pub worker_try_lock_max_all_ms: f64,
    /// Locks won by an acquisition round that started inside the window,
    /// after the fault took effect: impossible with a majority down, however
    /// slow the machine (the round's start is exact, see
    /// [`Grant::round_started_ns`]).
    pub grants_without_majority: usize,
    /// How long the machine stalled during the window, in ms.
    pub stalled_ms: f64,
}

/// The verdict on one window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    /// The window kept its promise.
    Held,
    /// A majority was up but nothing was granted while the machine stalled
    /// for over a tenth of the window: no verdict on the client.
    Starved,
    /// The window broke its promise.
    Failed,
}

impl WindowReport {
    /// With a majority up: some lock was granted (to a worker or to the
    /// probe; the suite keeps such a fault in force until the probe got
    /// one, within a cap). With a majority down: no round started inside the
    /// window won a lock, every probe failed with no-quorum, none of those
    /// that ran while the machine was not stalled took longer than
    /// `gross_ms`, and every worker call failed with no-quorum or
    /// held-by-other.
    pub fn verdict(&self, gross_ms: f64) -> Verdict {
        if self.window.majority_up {
            if self.grants + self.probes_granted > 0 {
                Verdict::Held
            } else if self.stalled_ms * 10.0 > ms(self.window.end_ns - self.window.start_ns) {
                Verdict::Starved
            } else {
                Verdict::Failed
            }
        } else if self.grants_without_majority == 0
            && self.probes_no_quorum == self.probes
            && self.worker_no_quorum + self.worker_held == self.worker_attempts
            && self.probe_max_ms <= gross_ms
        {
            Verdict::Held
        } else {
            Verdict::Failed
        }
    }
}

/// Liveness per window. `probes` are the orchestrator's `try_lock` calls on
/// fresh keys; `stalls` the machine's stalls.
pub fn liveness(
    windows: &[Window],
    records: &Records,
    probes: &[Attempt],
    stalls: &Stalls,
) -> Vec<WindowReport> {
    let duration = |a: &&Attempt| ms(a.end_ns.saturating_sub(a.start_ns));
    let undisturbed = |a: &&&Attempt| stalled_ns(stalls, a.start_ns, a.end_ns) == 0;
    windows
        .iter()
        .map(|window| {
            let inside = |ns: u64| window.start_ns <= ns && ns <= window.end_ns;
            let within = |a: &&Attempt| inside(a.start_ns) && a.end_ns <= window.end_ns;
            let grants = records
                .holds
                .iter()
                .filter(|h| inside(h.granted_ns))
                .count();
            let grants_without_majority = if window.majority_up {
                0
            } else {
                records
                    .holds
                    .iter()
                    // A round that started while the majority was down and
                    // was decided before the faults were undone (they are
                    // undone after the window's end is taken). A round
                    // still open then may count the answers of healed nodes.
                    .filter(|h| {
                        h.round_started_ns > window.start_ns + FAULT_EFFECT_NS
                            && h.granted_ns <= window.end_ns
                    })
                    .count()
            };
            let attempts: Vec<&Attempt> = records.attempts.iter().filter(within).collect();
            let probes: Vec<&Attempt> = probes.iter().filter(within).collect();
            let try_locks: Vec<&Attempt> = attempts
                .iter()
                .copied()
                .filter(|a| a.api == Api::TryLock)
                .collect();
            let count =
                |list: &[&Attempt], outcome| list.iter().filter(|a| a.outcome == outcome).count();
            let max = |list: &[&Attempt]| list.iter().map(duration).fold(0.0, f64::max);
            let max_undisturbed = |list: &[&Attempt]| {
                list.iter()
                    .filter(undisturbed)
                    .map(duration)
                    .fold(0.0, f64::max)
            };
            WindowReport {
                window: window.clone(),
                grants,
                probes: probes.len(),
                probes_granted: count(&probes, Outcome::Granted),
                probes_no_quorum: count(&probes, Outcome::NoQuorum),
                probe_max_ms: max_undisturbed(&probes),
                probes_disturbed: probes.iter().filter(|p| !undisturbed(p)).count(),
                probe_max_all_ms: max(&probes),
                worker_attempts: attempts.len(),
                worker_no_quorum: count(&attempts, Outcome::NoQuorum),
                worker_held: count(&attempts, Outcome::Held),
                worker_try_lock_max_ms: max_undisturbed(&try_locks),
                worker_calls_disturbed: try_locks.iter().filter(|a| !undisturbed(a)).count(),
                worker_try_lock_max_all_ms: max(&try_locks),
                grants_without_majority,
                stalled_ms: ms(stalled_ns(stalls, window.start_ns, window.end_ns)),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chaos::record::TokenKind;

    fn hold(worker: u32, n: u64, key: &str, granted: u64, end: u64) -> Hold {
        Hold::made_up(worker, n, key, granted, end)
    }

    fn write(worker: u32, n: u64, key: &str, sent: u64, accepted: bool, seq: u64) -> Write {
        Write {
            worker,
            hold: n,
            key: key.into(),
            token: 0,
            token_kind: TokenKind::GrantInstant,
            sent_ns: sent,
            done_ns: sent + 1,
            believed_valid: true,
            accepted,
            seq,
        }
    }

    #[test]
    fn back_to_back_holds_do_not_overlap_but_nested_and_crossing_ones_do() {
        let holds = vec![
            hold(0, 0, "a", 0, 100),
            hold(1, 0, "a", 100, 200), // starts exactly at the end: fine
            hold(2, 0, "b", 50, 400),
            hold(3, 0, "b", 100, 150), // nested in the previous
            hold(4, 0, "b", 300, 500), // crosses the first "b"
            hold(5, 0, "c", 10, 10),   // empty window: ignored
            hold(6, 0, "c", 5, 20),
        ];
        let found = overlaps(&holds);
        let pairs: Vec<(u32, u32)> = found
            .iter()
            .map(|o| (o.first.worker, o.second.worker))
            .collect();
        assert_eq!(pairs, vec![(2, 3), (2, 4)]);
        assert!((found[1].overlap_ms - 100.0 / 1e6).abs() < 1e-12);
    }

    #[test]
    fn late_superseded_and_stale_writes_are_told_apart() {
        let records = Records {
            attempts: vec![],
            holds: vec![hold(0, 0, "k", 0, 100), hold(1, 0, "k", 200, 300)],
            writes: vec![
                write(0, 0, "k", 10, true, 1),   // in its hold
                write(0, 0, "k", 150, true, 2),  // late, nobody newer yet
                write(1, 0, "k", 210, true, 3),  // the new holder
                write(0, 0, "k", 250, false, 4), // late and superseded: fenced
                write(0, 0, "k", 260, true, 5),  // late, superseded, accepted: stale
            ],
        };
        let analysis = records.analyze();
        assert_eq!(analysis.late_writes, 3);
        assert_eq!(analysis.superseded_writes, 2);
        assert_eq!(analysis.superseded_writes_rejected, 1);
        assert_eq!(analysis.fenced_writes_rejected, 1);
        assert_eq!(analysis.stale_writes_accepted, 1);
        assert!(analysis.overlaps.is_empty());
    }

    /// A fenced hold of "k" over `[granted, end)` with `token`.
    fn fenced(worker: u32, n: u64, granted: u64, end: u64, token: u64) -> Hold {
        let mut hold = hold(worker, n, "k", granted, end);
        hold.fencing_token = Some(token);
        hold
    }

    /// A write of that hold, with its token.
    fn fenced_write(
        worker: u32,
        n: u64,
        (sent, token): (u64, u64),
        accepted: bool,
        seq: u64,
    ) -> Write {
        Write {
            token,
            token_kind: TokenKind::Fencing,
            ..write(worker, n, "k", sent, accepted, seq)
        }
    }

    #[test]
    fn a_token_that_went_back_after_every_master_restarted_empty_is_found() {
        // Worker 0 holds with the servers' clock under its token, is stopped
        // past its validity; every master restarts empty; worker 1 is
        // granted after the restart wait, then worker 0's late write comes.
        let clock = 1_700_000_000_000_000;
        let correct = Records {
            attempts: vec![],
            holds: vec![
                fenced(0, 0, 0, 100, clock),
                fenced(1, 0, 300, 400, clock + 400_000),
            ],
            writes: vec![
                fenced_write(0, 0, (10, clock), true, 1),
                fenced_write(1, 0, (310, clock + 400_000), true, 2),
                fenced_write(0, 0, (320, clock), false, 3), // late: fenced
            ],
        };
        let analysis = correct.analyze();
        assert!(analysis.falling_tokens.is_empty());
        assert_eq!(analysis.stale_writes_accepted, 0);
        assert_eq!(analysis.superseded_writes_rejected, 1);

        // Planted `TokenFromCounterOnly`: the empty masters' counters give
        // worker 1 token 1, below worker 0's 5. The resource refuses worker
        // 1's write and takes worker 0's late one: no write was applied
        // after a newer holder's, so only the falling token shows it.
        let planted = Records {
            attempts: vec![],
            holds: vec![fenced(0, 0, 0, 100, 5), fenced(1, 0, 300, 400, 1)],
            writes: vec![
                fenced_write(0, 0, (10, 5), true, 1),
                fenced_write(1, 0, (310, 1), false, 2),
                fenced_write(0, 0, (320, 5), true, 3),
            ],
        };
        let analysis = planted.analyze();
        assert_eq!(analysis.stale_writes_accepted, 0);
        let falling: Vec<(u32, u64, u32, u64)> = analysis
            .falling_tokens
            .iter()
            .map(|f| (f.before.worker, f.before_term, f.after.worker, f.after_term))
            .collect();
        assert_eq!(falling, vec![(0, 5, 1, 1)]);

        // The same with equal tokens (worker 0 held the first lock on fresh
        // masters): both writes are taken, the late one after the newer
        // holder's: a stale write accepted, and a token that did not rise.
        let equal = Records {
            attempts: vec![],
            holds: vec![fenced(0, 0, 0, 100, 1), fenced(1, 0, 300, 400, 1)],
            writes: vec![
                fenced_write(0, 0, (10, 1), true, 1),
                fenced_write(1, 0, (310, 1), true, 2),
                fenced_write(0, 0, (320, 1), true, 3),
            ],
        };
        let analysis = equal.analyze();
        assert_eq!(analysis.stale_writes_accepted, 1);
        assert_eq!(analysis.falling_tokens.len(), 1);
    }

    #[test]
    fn a_hold_whose_worker_died_lasts_until_its_last_validity() {
        let grant = |worker, hold, granted: u64, until| {
            Record::Grant(Grant {
                worker,
                hold,
                key: "k".into(),
                granted_ns: granted,
                valid_until_ns: until,
                round_started_ns: granted,
                fencing_token: None,
            })
        };
        let records: Records = vec![
            // Worker 0 is killed mid-hold after one extension to 500.
            grant(0, 7, 100, 300),
            Record::Extended(crate::chaos::record::Extended {
                worker: 0,
                hold: 7,
                valid_until_ns: 500,
            }),
            // Worker 1's hold ended normally, with both records.
            grant(1, 0, 600, 700),
            Record::Hold(hold(1, 0, "k", 600, 700)),
        ]
        .into_iter()
        .collect();
        let analysis = records.analyze();
        assert_eq!((analysis.holds, analysis.open_holds), (2, 1));
        assert!(analysis.overlaps.is_empty());
        let open = records.holds.iter().find(|h| h.open).unwrap();
        assert_eq!((open.worker, open.end_ns), (0, 500));

        // Granted to another before the dead holder's validity ran out: the
        // checker must see it.
        let early: Records = vec![
            grant(0, 7, 100, 500),
            Record::Hold(hold(1, 0, "k", 450, 600)),
        ]
        .into_iter()
        .collect();
        let overlaps = early.analyze().overlaps;
        assert_eq!(overlaps.len(), 1);
        assert_eq!(
            (overlaps[0].first.worker, overlaps[0].second.worker),
            (0, 1)
        );
    }

    #[test]
    fn liveness_with_and_without_a_majority() {
        let probe = |start: u64, end: u64, outcome| Attempt {
            worker: u32::MAX,
            key: "p".into(),
            api: Api::TryLock,
            start_ns: start,
            end_ns: end,
            outcome,
            error: None,
        };
        let ms = 1_000_000;
        let windows = vec![
            Window {
                label: "pause node 1".into(),
                class: "node_pause".into(),
                majority_up: true,
                start_ns: 1_000 * ms,
                end_ns: 2_000 * ms,
            },
            Window {
                label: "3 nodes down".into(),
                class: "majority_down".into(),
                majority_up: false,
                start_ns: 3_000 * ms,
                end_ns: 4_000 * ms,
            },
        ];
        // A grant inside the majority-down window whose round started
        // before it: an acquisition the fault caught half way.
        let mut caught = hold(0, 1, "k", 3_050 * ms, 3_060 * ms);
        caught.round_started_ns = 2_990 * ms;
        let records = Records {
            holds: vec![hold(0, 0, "k", 1_500 * ms, 1_600 * ms), caught],
            ..Records::default()
        };
        let probes = vec![
            probe(1_100 * ms, 1_200 * ms, Outcome::Granted),
            probe(3_100 * ms, 3_130 * ms, Outcome::NoQuorum),
            probe(3_500 * ms, 3_520 * ms, Outcome::NoQuorum),
        ];
        let reports = liveness(&windows, &records, &probes, &[]);
        assert_eq!(reports[0].grants, 1);
        assert_eq!(reports[0].verdict(250.0), Verdict::Held);
        assert_eq!(reports[1].grants_without_majority, 0);
        assert_eq!(reports[1].probes_no_quorum, 2);
        assert_eq!(reports[1].probe_max_ms, 30.0);
        assert_eq!(reports[1].verdict(250.0), Verdict::Held);
        // Grossly slow: the client waited out something it should not have.
        assert_eq!(reports[1].verdict(29.0), Verdict::Failed);
        // A probe that ran while the machine stalled is still judged on its
        // outcome, but its time is reported apart.
        let stalled = liveness(&windows, &records, &probes, &[(3_110 * ms, 3_120 * ms)]);
        assert_eq!(stalled[1].probes_disturbed, 1);
        assert_eq!(stalled[1].probe_max_ms, 20.0);
        assert_eq!(stalled[1].probe_max_all_ms, 30.0);
        assert_eq!(stalled[1].stalled_ms, 10.0);
        assert_eq!(stalled[1].verdict(29.0), Verdict::Held);
        // A round that started inside the window won before the faults
        // were undone: a lock without a majority.
        let mut impossible = hold(0, 0, "k", 3_900 * ms, 3_950 * ms);
        impossible.round_started_ns = 3_010 * ms;
        let late = Records {
            holds: vec![impossible],
            ..Records::default()
        };
        let report = &liveness(&windows, &late, &probes, &[])[1];
        assert_eq!(report.grants_without_majority, 1);
        assert_eq!(report.verdict(250.0), Verdict::Failed);
        // One still open when the faults were undone may have counted the
        // healed nodes: not judged, however close to the end it started.
        let mut healed = hold(0, 0, "k", 4_020 * ms, 4_100 * ms);
        healed.round_started_ns = 3_999 * ms;
        let healed = Records {
            holds: vec![healed],
            ..Records::default()
        };
        assert_eq!(
            liveness(&windows, &healed, &probes, &[])[1].grants_without_majority,
            0
        );
        // A probe granted with a majority down fails the window too.
        let granted_probe = vec![probe(3_100 * ms, 3_110 * ms, Outcome::Granted)];
        assert_eq!(
            liveness(&windows, &Records::default(), &granted_probe, &[])[1].verdict(250.0),
            Verdict::Failed
        );
        // Nothing granted with a majority up: a failure, unless the machine
        // stalled for over a tenth of the window. A probe grant counts.
        let none = Records::default();
        assert_eq!(
            liveness(&windows, &none, &[], &[])[0].verdict(250.0),
            Verdict::Failed
        );
        assert_eq!(
            liveness(&windows, &none, &probes, &[])[0].verdict(250.0),
            Verdict::Held
        );
        assert_eq!(
            liveness(&windows, &none, &[], &[(1_000 * ms, 1_200 * ms)])[0].verdict(250.0),
            Verdict::Starved
        );
    }
}
