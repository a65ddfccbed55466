//! What the nodes saw, and the checks a test runs on it.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// One change to a lock key on one node, at a virtual instant (since the
/// [`Quorum`](crate::Quorum) was made).
///
/// Recorded for every kind of lock: the key a lock value is written to
/// (plain, fenced, fair, multi-resource and write locks, semaphore permits
/// on their slot keys, elections), a reader on its lock's name (shared),
/// and a reentrant lock's owner on its key.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Event {
    /// When, in virtual time since the quorum was made.
    pub at: Duration,
    /// The node, by index.
    pub node: usize,
    /// The key.
    pub key: Vec<u8>,
    /// The lock value (the holder's; a reentrant lock's owner).
    pub value: Vec<u8>,
    /// What happened.
    pub kind: EventKind,
    /// A reader's: shared with other readers ([`Hold::shared`]).
    pub shared: bool,
}

/// What happened to a key in an [`Event`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventKind {
    /// The value was set where the key was free, to expire after `ttl` on
    /// the node's clock.
    Granted {
        /// The time to live it was set with.
        ttl: Duration,
    },
    /// The value's expiry moved: it now expires after `ttl`.
    Extended {
        /// The time to live from this instant.
        ttl: Duration,
    },
    /// The value was deleted (a release, a withdraw).
    Released,
}

/// Per node, the intervals a value held a key there.
type PerNode = BTreeMap<usize, Vec<(Duration, Duration)>>;

/// Every [`Event`] the nodes of a quorum saw, in order.
#[derive(Clone, Debug, Default)]
pub struct History {
    pub(crate) nodes: usize,
    pub(crate) events: Vec<Event>,
}

impl History {
    /// The events, in the order the nodes ran them.
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// The grants among the events.
    pub fn grants(&self) -> impl Iterator<Item = &Event> {
        self.events
            .iter()
            .filter(|event| matches!(event.kind, EventKind::Granted { .. }))
    }

    /// Each value's holds of each key, as the nodes granted them: from the
    /// instant a majority of nodes had granted it until fewer than a
    /// majority would still hold it, had every node kept its data and its
    /// clock (its grants and extensions running their full TTL unless
    /// released).
    ///
    /// A correct quorum never gives two values overlapping holds of one
    /// key (but to readers); a node restarted empty or whose clock jumped can
    /// ([`overlaps`]). A client's own validity is a little shorter than
    /// its hold (the acquire's round trip and the clock drift allowance),
    /// so a hold can also be one whose client gave up on it.
    pub fn holds(&self) -> Vec<Hold> {
        let majority = self.nodes / 2 + 1;
        // Per key and value, per node: the intervals it was held there.
        let mut held: BTreeMap<(&[u8], &[u8], bool), PerNode> = BTreeMap::new();
        for event in &self.events {
            let spans = held
                .entry((&event.key, &event.value, event.shared))
                .or_default()
                .entry(event.node)
                .or_default();
            match event.kind {
                EventKind::Granted { ttl } => spans.push((event.at, event.at + ttl)),
                EventKind::Extended { ttl } => match spans.last_mut() {
                    Some(span) => span.1 = event.at + ttl,
                    // Restored where it had expired.
                    None => spans.push((event.at, event.at + ttl)),
                },
                EventKind::Released => {
                    if let Some(span) = spans.last_mut() {
                        span.1 = span.1.min(event.at);
                    }
                }
            }
        }
        let mut holds = Vec::new();
        for ((key, value, shared), nodes) in held {
            // A sweep over the intervals' ends: +1 at a start, -1 at an end.
            let mut edges: Vec<(Duration, i32)> = nodes
                .values()
                .flatten()
                .filter(|(from, until)| from < until)
                .flat_map(|&(from, until)| [(from, 1), (until, -1)])
                .collect();
            // Ends before starts at one instant: touching is no overlap.
            edges.sort();
            let mut count = 0_i32;
            let mut since = None;
            for (at, step) in edges {
                count += step;
                let enough = usize::try_from(count).unwrap_or(0) >= majority;
                match (since, enough) {
                    (None, true) => since = Some(at),
                    (Some(from), false) => {
                        holds.push(Hold {
                            key: key.to_vec(),
                            holder: value.to_vec(),
                            from,
                            until: at,
                            shared,
                        });
                        since = None;
                    }
                    _ => {}
                }
            }
        }
        holds.sort_by(|a, b| (&a.key, a.from).cmp(&(&b.key, b.from)));
        holds
    }

    /// [`overlaps`] of [`holds`](Self::holds): empty while the quorum kept
    /// its promise.
    pub fn overlaps(&self) -> Vec<Overlap> {
        overlaps(&self.holds())
    }
}

/// One holder's hold of one key, from `from` until `until` (virtual time
/// since the quorum was made): from [`History::holds`], or built by a test
/// from its own guards (`guard.acquired_at()` to `guard.valid_until()`,
/// taken from [`Quorum::elapsed_at`](crate::Quorum::elapsed_at)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    /// The key.
    pub key: Vec<u8>,
    /// Who held it: its lock value, or any name the test gives.
    pub holder: Vec<u8>,
    /// From.
    pub from: Duration,
    /// Until (exclusive).
    pub until: Duration,
    /// A shared hold (a read lock's, a semaphore's permit on the
    /// semaphore's name): shared holds of one key may overlap each other,
    /// never an exclusive one.
    pub shared: bool,
}

/// Two holders that held one key at once.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Overlap {
    /// The earlier hold.
    pub first: Hold,
    /// The later one, which began before the first ended.
    pub second: Hold,
}

impl fmt::Display for Overlap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} held by {} from {:?} to {:?} and by {} from {:?}",
            String::from_utf8_lossy(&self.first.key),
            String::from_utf8_lossy(&self.first.holder),
            self.first.from,
            self.first.until,
            String::from_utf8_lossy(&self.second.holder),
            self.second.from,
        )
    }
}

/// Every pair of holds of one key by different holders that overlap in
/// time (touching is no overlap), unless both are
/// [`shared`](Hold::shared): empty when each key had one exclusive holder
/// (or only shared ones) at a time.
pub fn overlaps(holds: &[Hold]) -> Vec<Overlap> {
    let mut sorted: Vec<&Hold> = holds.iter().filter(|hold| hold.from < hold.until).collect();
    sorted.sort_by(|a, b| (&a.key, a.from).cmp(&(&b.key, b.from)));
    let mut found = Vec::new();
    for (i, first) in sorted.iter().enumerate() {
        for second in &sorted[i + 1..] {
            if second.key != first.key || second.from >= first.until {
                break;
            }
            if second.holder != first.holder && !(first.shared && second.shared) {
                found.push(Overlap {
                    first: (*first).clone(),
                    second: (*second).clone(),
                });
            }
        }
    }
    found
}

/// A write to a fenced resource, with the fencing token it carried (see
/// `LockGuard::fencing_token`), as the test's resource received it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FencedWrite {
    /// The resource written (a semaphore's permits are fenced per slot:
    /// name the slot).
    pub resource: String,
    /// The token the write carried.
    pub token: u64,
}

/// The writes, in the order given (the order the resource received them),
/// that carried a token lower than one an earlier write to the same
/// resource carried: a holder that had lost its lock wrote after its
/// successor. A resource that checks tokens refuses exactly these; one
/// that does not, was corrupted by them.
pub fn stale_writes(writes: &[FencedWrite]) -> Vec<FencedWrite> {
    let mut highest: BTreeMap<&str, u64> = BTreeMap::new();
    let mut stale = Vec::new();
    for write in writes {
        let seen = highest.entry(&write.resource).or_insert(write.token);
        if write.token < *seen {
            stale.push(write.clone());
        } else {
            *seen = write.token;
        }
    }
    stale
}
