//! The semaphore checker: how many holders one semaphore had at once.
//!
//! A worker that takes permits (`worker::Config::permits`) records each hold
//! as `<semaphore>/permit<slot>`: each slot is a lock of its own, so the
//! ordinary checker ([`checker`](super::checker)) finds two holders of one
//! slot and stale writes per slot. This one counts the holders of every slot
//! of a semaphore together: at any instant there must be at most k, while
//! the lock's assumptions hold. A hold counts over `[granted, end)` on the
//! shared monotonic clock, as the overlap check counts it.

use std::collections::BTreeMap;

use super::record::Hold;

/// Between a semaphore's name and its slot in a hold's key.
pub const SLOT_SEPARATOR: &str = "/permit";

/// The semaphore a hold's key names, if it is a permit.
pub fn semaphore_of(key: &str) -> Option<&str> {
    key.rsplit_once(SLOT_SEPARATOR).map(|(name, _)| name)
}

/// The most holders each semaphore had at one instant, by name. Keys that
/// are not permits are left out.
pub fn max_concurrent_holders(holds: &[Hold]) -> BTreeMap<String, usize> {
    let mut edges: BTreeMap<&str, Vec<(u64, i64)>> = BTreeMap::new();
    for hold in holds.iter().filter(|hold| hold.end_ns > hold.granted_ns) {
        if let Some(name) = semaphore_of(&hold.key) {
            let list = edges.entry(name).or_default();
            list.push((hold.granted_ns, 1));
            list.push((hold.end_ns, -1));
        }
    }
    edges
        .into_iter()
        .map(|(name, mut list)| {
            // An end and a start at one instant do not overlap: ends first.
            list.sort_unstable();
            let (mut open, mut most) = (0i64, 0i64);
            for (_, step) in list {
                open += step;
                most = most.max(open);
            }
            (name.to_owned(), usize::try_from(most).unwrap_or(0))
        })
        .collect()
}

/// The most holders any semaphore had at one instant.
pub fn max_over_all(holds: &[Hold]) -> usize {
    max_concurrent_holders(holds)
        .into_values()
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(worker: u32, key: &str, granted_ms: u64, end_ms: u64) -> Hold {
        Hold::made_up(worker, 0, key, granted_ms * 1_000_000, end_ms * 1_000_000)
    }

    #[test]
    fn k_holders_of_k_slots_count_k() {
        let holds = [
            hold(0, "sem/permit0", 0, 100),
            hold(1, "sem/permit1", 10, 100),
            // Starts as the first ends: no overlap with it.
            hold(2, "sem/permit0", 100, 200),
            hold(3, "lock", 0, 200),
        ];
        assert_eq!(
            max_concurrent_holders(&holds),
            BTreeMap::from([("sem".to_owned(), 2)])
        );
    }

    #[test]
    fn a_planted_holder_beyond_k_is_found() {
        // Three holders of a semaphore of two permits at 50 ms: what a
        // master that forgot its slots (restarted empty) lets happen.
        let holds = [
            hold(0, "sem/permit0", 0, 100),
            hold(1, "sem/permit1", 10, 100),
            hold(2, "sem/permit0", 50, 150),
            hold(3, "other/permit0", 0, 10),
        ];
        assert_eq!(max_over_all(&holds), 3);
        let per = max_concurrent_holders(&holds);
        assert_eq!(per["sem"], 3);
        assert_eq!(per["other"], 1);
        // The ordinary checker sees the same violation as two holders of
        // one slot.
        let overlaps = crate::chaos::checker::overlaps(&holds);
        assert_eq!(overlaps.len(), 1);
        assert_eq!(overlaps[0].key, "sem/permit0");
    }

    #[test]
    fn a_permit_name_is_the_semaphore_and_its_slot() {
        let name = crate::chaos::worker::permit_name("sem", b"{sem}\0permit12");
        assert_eq!(name, "sem/permit12");
        assert_eq!(semaphore_of(&name), Some("sem"));
        assert_eq!(semaphore_of("k0"), None);
    }
}
