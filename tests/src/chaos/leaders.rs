//! The election checker: what a leader election's records show beside the
//! ordinary checker's.
//!
//! An election worker ([`worker`](super::worker), election mode) records
//! each leadership as a hold of the election's name: granted when its
//! campaign returned, ended when its loss signal fired (or when it stopped
//! leading to resign), its fencing token the term. So the ordinary checker
//! ([`checker`](super::checker)) already finds two leaders at once (an
//! overlap of two holds of the name) and a deposed leader's write the
//! resource accepted after a newer leader's (a stale write). This one adds:
//!
//! - **terms**: they rise strictly in grant order. A term not above the one
//!   granted before it is a violation: a resource that saw the earlier term
//!   would refuse every write of the later leader, or take both for one.
//! - **failover**: from a leader's death (the suite's SIGKILL) to the next
//!   leader's grant, a printed figure.

use std::collections::BTreeMap;

use super::checker::HoldId;
use super::record::Hold;

/// A leader whose term was not above the term granted before it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FallingTerm {
    /// The election's name.
    pub key: String,
    /// The leadership granted before.
    pub before: HoldId,
    /// Its term.
    pub before_term: u64,
    /// The leadership granted next.
    pub after: HoldId,
    /// Its term, no higher.
    pub after_term: u64,
}

/// Every pair of leaderships of one name, consecutive in grant order,
/// whose terms do not rise. Holds without a term are left out. The same for
/// any fenced lock's holds and tokens: the checker's
/// [`Analysis::falling_tokens`](super::checker::Analysis::falling_tokens).
pub fn falling_terms(holds: &[Hold]) -> Vec<FallingTerm> {
    let mut by_key: BTreeMap<&str, Vec<(&Hold, u64)>> = BTreeMap::new();
    for hold in holds {
        if let Some(term) = hold.fencing_token {
            by_key.entry(&hold.key).or_default().push((hold, term));
        }
    }
    let mut found = Vec::new();
    for (key, mut list) in by_key {
        list.sort_by_key(|(hold, _)| hold.granted_ns);
        for pair in list.windows(2) {
            let [(before, before_term), (after, after_term)] = pair else {
                continue;
            };
            if after_term <= before_term {
                found.push(FallingTerm {
                    key: key.to_owned(),
                    before: HoldId::of(before),
                    before_term: *before_term,
                    after: HoldId::of(after),
                    after_term: *after_term,
                });
            }
        }
    }
    found
}

/// For each death (an instant on the shared clock), the time in ms until
/// the next grant of any hold after it; `None` when none came.
pub fn failovers_ms(deaths_ns: &[u64], holds: &[Hold]) -> Vec<Option<f64>> {
    let mut grants: Vec<u64> = holds.iter().map(|h| h.granted_ns).collect();
    grants.sort_unstable();
    deaths_ns
        .iter()
        .map(|&death| {
            let next = grants.partition_point(|&g| g <= death);
            grants.get(next).map(|&g| super::clock::ms(g - death))
        })
        .collect()
}

/// The `q` quantile (0 to 1) of `values` by nearest rank; `None` when
/// empty.
pub fn quantile(values: &[f64], q: f64) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = (q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.saturating_sub(1)).copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chaos::checker::overlaps;

    /// A leadership of "leader" over `[granted, end)` ms with `term`.
    fn lead(worker: u32, hold: u64, granted_ms: u64, end_ms: u64, term: u64) -> Hold {
        let mut lead = Hold::made_up(
            worker,
            hold,
            "leader",
            granted_ms * 1_000_000,
            end_ms * 1_000_000,
        );
        lead.fencing_token = Some(term);
        lead
    }

    #[test]
    fn a_clean_history_has_no_overlap_and_rising_terms() {
        let history = [
            lead(0, 0, 0, 100, 1),
            // Granted as the first stepped down.
            lead(1, 0, 100, 250, 2),
            // A term may skip numbers (a campaign stored on a quorum lost).
            lead(0, 1, 400, 500, 5),
        ];
        assert!(overlaps(&history).is_empty());
        assert!(falling_terms(&history).is_empty());
    }

    #[test]
    fn a_planted_second_leader_and_its_falling_term_are_found() {
        // Worker 1 elected at 150 ms while worker 0 still leads (until
        // 200 ms), with a term no higher: what a master restarted empty
        // under an election held on exactly a quorum lets happen. Then
        // worker 2, after both, with a term below the first one's.
        let history = [
            lead(0, 0, 0, 200, 7),
            lead(1, 0, 150, 300, 7),
            lead(2, 0, 400, 500, 3),
            lead(2, 1, 600, 700, 8),
        ];
        let found = overlaps(&history);
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].first.worker, found[0].second.worker), (0, 1));
        assert!((found[0].overlap_ms - 50.0).abs() < 1e-9);
        let falling = falling_terms(&history);
        let pairs: Vec<(u32, u64, u32, u64)> = falling
            .iter()
            .map(|f| (f.before.worker, f.before_term, f.after.worker, f.after_term))
            .collect();
        assert_eq!(pairs, vec![(0, 7, 1, 7), (1, 7, 2, 3)]);
    }

    #[test]
    fn failover_is_the_time_to_the_next_grant() {
        let history = [lead(0, 0, 0, 100, 1), lead(1, 0, 900, 1000, 2)];
        let ms = 1_000_000;
        assert_eq!(
            failovers_ms(&[50 * ms, 950 * ms], &history),
            vec![Some(850.0), None]
        );
        assert_eq!(quantile(&[3.0, 1.0, 2.0, 4.0], 0.5), Some(2.0));
        assert_eq!(quantile(&[3.0, 1.0, 2.0, 4.0], 0.99), Some(4.0));
        assert_eq!(quantile(&[], 0.5), None);
    }
}
