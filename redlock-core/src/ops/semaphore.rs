//! A counting semaphore on a quorum ([`LockSpec::Semaphore`](crate::LockSpec::Semaphore)):
//! the rules an [`Acquisition`](crate::Acquisition) of one permit follows.
//!
//! # Why at most k holders
//!
//! A semaphore of k permits is k slot locks, `{<name>}\0permit0` ..
//! `{<name>}\0permit<k-1>`. A permit is one slot whose key holds our value
//! on a quorum of masters, counted as any lock is (validity from the start
//! of the round, drift, the same TTL expiry). Two holders of one slot would
//! need two quorums holding two values at one key, and two quorums share a
//! master: so each slot has at most one holder, and k slots at most k, while
//! the lock's assumptions hold. Nothing else is counted: a master's grant of
//! another slot than the quorum's is no vote, and is withdrawn.
//!
//! A per-master counter voted on by a majority has no such bound: each
//! master admits k, and a holder needs any N/2+1 of them, so up to
//! `N * k / (N/2 + 1)` clients each find a majority (3 masters, k = 2:
//! clients admitted by AB, BC and CA). The planted bug
//! `SemaphoreCountsAnySlot` is that counter: it counts grants of any slot.
//!
//! # One round trip
//!
//! Each attempt sends one [`scripts::SEMAPHORE_ACQUIRE`](crate::scripts::SEMAPHORE_ACQUIRE)
//! per master with the same first slot to try, drawn from the
//! acquisition's RNG: masters that agree on which slots are taken (the
//! common case) grant the same slot, and contenders start at different
//! slots instead of all racing for the first. An attempt whose masters
//! disagree and reach no quorum on one slot withdraws everywhere
//! ([`scripts::SEMAPHORE_WITHDRAW`](crate::scripts::SEMAPHORE_WITHDRAW)); a
//! won attempt withdraws from the masters that granted another slot, and
//! from the masters not heard from yet all but the won slot: a late grant
//! of it stays, and the permit is held there too. The
//! permit is then an ordinary exclusive lock on its slot key: extended,
//! kept alive, released (with its release notice) like one, except that
//! its extensions keep the permits key alive and its release
//! ([`scripts::SEMAPHORE_RELEASE`](crate::scripts::SEMAPHORE_RELEASE))
//! deletes it with the last slot held on a master.
//!
//! # One k for every holder
//!
//! Users that counted different k would each be bounded by their own k
//! only. So each master keeps k in the semaphore's permits key
//! ([`Settings::permits_key`](crate::Settings::permits_key)) and refuses a
//! request for another k; the acquisition then fails at once with
//! [`AcquireError::PermitsMismatch`](crate::AcquireError::PermitsMismatch)
//! and withdraws everything. Two quorums of different k share a master,
//! whose permits key lives at least as long as any slot held there (the
//! grant and each extension keep it so): only one k holds at a time.

use std::sync::Arc;
use std::time::Instant;

use crate::quorum::{Round, Tally};
use crate::{
    Command, Key, LockKind, LockValue, NodeError, NodeId, NodeVote, Request, Response, Votes,
};

/// The most permits one semaphore may have: each master's acquire may read
/// every slot, one `GET` each.
pub const MAX_PERMITS: u32 = 1024;

impl crate::Settings {
    /// The lock key of permit `slot` (from 0) of the semaphore on
    /// `resource`: `{<key>}\0permit<slot>`, in the key's hash slot. A held
    /// permit is an exclusive lock on it.
    pub fn permit_key(&self, resource: &[u8], slot: u32) -> Key {
        permit_key(&self.key(resource), slot)
    }
}

fn permit_key(key: &Key, slot: u32) -> Key {
    key.derived(format!("\0permit{slot}").as_bytes())
}

/// The slot keys of a semaphore of `permits` on the lock key `key`, in the
/// key's hash slot (see [`Key::derived`]).
pub(crate) fn slot_keys(key: &Key, permits: u32) -> Arc<[Key]> {
    (0..permits).map(|slot| permit_key(key, slot)).collect()
}

/// A fenced semaphore's acquire keys, from its `keys` (the slots, then its
/// permits key): the slots, each slot's fencing counter
/// ([`Settings::fencing_key`](crate::Settings::fencing_key) of the slot
/// key) in the same order, then the permits key.
pub(crate) fn with_counters(settings: &crate::Settings, keys: &[Key]) -> Arc<[Key]> {
    let (permits, slots) = keys.split_last().expect("a semaphore has its permits key");
    let counters = slots.iter().map(|slot| settings.fencing_key(slot));
    let slots = slots.iter().cloned().chain(counters);
    slots.chain([permits.clone()]).collect()
}

/// The number of permits (k) of a semaphore's request with `keys`: its
/// slots, then (fenced acquire) their counters, then its permits key.
pub(crate) fn permits(keys: &[Key], fenced: bool) -> usize {
    let slots = keys.len().saturating_sub(1);
    if fenced { slots / 2 } else { slots }
}

/// The number of permits a master keeps for the semaphore, from its answer
/// to `SEMAPHORE_ACQUIRE`, when it is not ours and the master refused
/// (`{0, k}`; `0` when what it keeps is not a number).
pub(crate) fn refused(result: &Result<Response, NodeError>) -> Option<u32> {
    match result {
        Ok(Response::Array(items)) => match items.as_slice() {
            [Response::Int(0), Response::Int(theirs)] => Some(u32::try_from(*theirs).unwrap_or(0)),
            _ => None,
        },
        _ => None,
    }
}

/// The slot a master granted, from its answer to `SEMAPHORE_ACQUIRE`, with
/// that slot's fencing counter if the answer carries one (fenced).
pub(crate) fn granted(result: &Result<Response, NodeError>) -> Option<(u64, Option<u64>)> {
    match result {
        Ok(Response::Array(items)) => match items.as_slice() {
            [Response::Int(1), Response::Int(slot)] => Some((u64::try_from(*slot).ok()?, None)),
            [Response::Int(1), Response::Int(slot), counter @ ..] => Some((
                u64::try_from(*slot).ok()?,
                Some(crate::ops::acquire::floor(counter)?),
            )),
            _ => None,
        },
        _ => None,
    }
}

/// The slot a master granted, from its answer to `SEMAPHORE_ACQUIRE`.
pub(crate) fn granted_slot(result: &Result<Response, NodeError>) -> Option<u64> {
    granted(result).map(|(slot, _)| slot)
}

/// Where an attempt stands: won, with the slot a quorum granted; lost, once
/// no slot can reach a quorum with the masters not heard from; else open.
/// `slots[i]`: the slot master `i` granted, if it did.
pub(crate) fn tally(round: &Round, slots: &[Option<u64>], quorum: usize) -> (Tally, Option<u64>) {
    let granted = |node: NodeId| {
        if round.granted(node) {
            slots.get(node.0).copied().flatten()
        } else {
            None
        }
    };
    let pending = round.count(|vote| matches!(vote, NodeVote::Pending));
    let mut best: Option<(usize, u64)> = None;
    for slot in round.nodes().filter_map(granted) {
        let same = round
            .nodes()
            .filter(|&node| match granted(node) {
                // The naive counter: any grant counts for any slot.
                Some(_) if planted!(SemaphoreCountsAnySlot) => true,
                other => other == Some(slot),
            })
            .count();
        if best.is_none_or(|(count, _)| same > count) {
            best = Some((same, slot));
        }
    }
    match best {
        Some((count, slot)) if count >= quorum => (Tally::Won, Some(slot)),
        Some((count, _)) if count + pending >= quorum => (Tally::Open, None),
        None if pending >= quorum => (Tally::Open, None),
        _ => (Tally::Lost, None),
    }
}

/// The masters a won attempt on `slot` must withdraw from: those that did
/// not grant that slot (another slot, no answer yet, a failure), except the
/// ones never asked (`skipped`); each with whether it had not answered at
/// the decision (its vote still pending).
pub(crate) fn others(
    round: &Round,
    slots: &[Option<u64>],
    slot: u64,
    skipped: &[NodeId],
) -> Vec<(NodeId, bool)> {
    round
        .nodes()
        .filter(|node| !(round.granted(*node) && slots.get(node.0) == Some(&Some(slot))))
        .filter(|node| !skipped.contains(node))
        .map(|node| (node, matches!(round.vote(node), Some(NodeVote::Pending))))
        .collect()
}

/// The won round's votes as the permit's lock tells them: a master that
/// granted another slot holds no part of this one.
pub(crate) fn permit_votes(mut votes: Votes, slots: &[Option<u64>], slot: u64) -> Votes {
    for (node, granted) in slots.iter().enumerate() {
        if granted.is_some_and(|granted| granted != slot) {
            votes.set(NodeId(node), NodeVote::HeldByOther(None));
        }
    }
    votes
}

/// A won attempt on `slot`: the permit's lock keys (its slot key, then the
/// semaphore's permits key, which its extensions keep alive), the
/// withdraws of our value from the masters that did not grant that slot,
/// and the permit's votes.
///
/// A master not heard from yet may still grant: its withdraw keeps our
/// value at `slot` (`ARGV[2]` of
/// [`SEMAPHORE_WITHDRAW`](crate::scripts::SEMAPHORE_WITHDRAW), the slot in
/// [`Request::payload`]) and deletes it from every other slot. Queued
/// behind its acquire on its connection, it runs after it: a late grant of
/// our slot stays, one more master holding the permit (its extensions and
/// release go to every master asked), and a late grant of another slot is
/// given back. A master that answered with another slot, or failed, gets
/// the plain withdraw. The permit's votes still tell the late master as
/// not heard from.
pub(crate) fn take_permit(
    round: &Round,
    slots: &[Option<u64>],
    slot: u64,
    (keys, kind, value): (&Arc<[Key]>, &LockKind, &LockValue),
    skipped: &[NodeId],
    votes: Votes,
    deadline: Instant,
) -> (Arc<[Key]>, Vec<Request>, Votes) {
    let others = others(round, slots, slot, skipped);
    let kept: Arc<[u8]> = slot.to_string().into_bytes().into();
    let withdraws = round
        .fan_out(keys, kind, value, Command::Withdraw, deadline)
        .filter_map(|request| {
            let &(_, pending) = others.iter().find(|(node, _)| *node == request.node)?;
            Some(Request {
                payload: pending.then(|| kept.clone()),
                ..request
            })
        })
        .collect();
    let index = usize::try_from(slot).expect("a granted slot is one of the keys");
    let permits = keys.last().expect("a semaphore has its permits key");
    let permit: Arc<[Key]> = vec![keys[index].clone(), permits.clone()].into();
    (permit, withdraws, permit_votes(votes, slots, slot))
}
