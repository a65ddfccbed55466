//! Deliberately broken variants of the core, to show that the checkers catch
//! real bugs in the algorithm (feature `planted-bugs`, for tests only).
//!
//! Each [`Bug`] is a one-line hook in the decision code, written
//! `planted!(Bug)`: a constant `false` without the feature, and with it true
//! only on a thread that switched that bug on with [`set`]. Tests running in
//! parallel threads therefore never see each other's bug, and a model
//! checker that explores on worker threads sets the switch on each of them
//! before it calls into the core.

use std::cell::Cell;

/// A bug that can be planted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Bug {
    /// An acquisition takes its validity from the instant of the decision
    /// instead of the start of the round: the time the requests spent on the
    /// way is counted twice in the client's favour.
    ValidityFromDecisionTime,
    /// The quorum is N/2 instead of N/2 + 1: two clients can each hold half.
    QuorumHalf,
    /// A node's repeated answer is counted again, as if another node had
    /// answered the same.
    DuplicateVoteCounted,
    /// An extension takes a key that was missing and set again for one that
    /// was still ours, so a lock released on a quorum is taken back.
    ExtendMissingAsOurs,
    /// A failed acquisition attempt withdraws its value only from the nodes
    /// that answered, not from those that timed out (whose set may have
    /// happened, with the answer lost).
    ReleaseSkipsTimedOut,
    /// A fair acquisition never falls back on the plain rule: masters whose
    /// queues disagree on the head (or whose head died) keep every waiter
    /// waiting.
    FairNeverFallsBack,
    /// A fair acquisition that ends without the lock withdraws its attempt
    /// but keeps its place in the queues: its entry holds the others back
    /// until it expires.
    FairLeaveForgotten,
    /// A release decides once a quorum of nodes *less one* could still
    /// hold its value, one confirmation too early, and its report counts
    /// only failed nodes against the lock, not those it did not wait for:
    /// it claims a lock free that a quorum may still hold.
    ReleaseDecidesEarly,
    /// The notice hub forgets to replay a channel's recent events to a
    /// waiter that becomes first after one that left without the lock: a
    /// release the leaver was told of is told to nobody, and the next
    /// waiter sleeps through its turn.
    HubForgetsReplay,
    /// A semaphore counts a master's grant of any slot towards a quorum: the naive per-master counter.
    SemaphoreCountsAnySlot,
    /// An election's leader steps down at its lock key's expiry on an
    /// exact clock (start + TTL), without the drift allowance or the renew
    /// deadline's margin, and takes renewals that only lacked answers for
    /// no loss: a master whose clock runs fast lets another process win a
    /// higher term while the deposed leader still leads.
    ElectionLosesAtExpiry,
    /// An election's term is counted by the client (its renewals plus
    /// one), not taken from the quorum's fencing token: two leaders share
    /// a term.
    ElectionTermFromClient,
    /// A release that may go as a plain `DELIFEQ` hands over to its
    /// client's first waiter as soon as it is queued, and the hub lets it
    /// go so even where the client's own waiters wait (issue 52): where a
    /// waiter marked the holder's value, the `DELIFEQ` deletes nothing and
    /// the script that deletes it follows its answer, behind the attempt
    /// the hand-over sent. That attempt is turned away, the script
    /// publishes nothing for the client's own waiter, and the waiter sleeps
    /// out its retry.
    HandOverBeforeFollowUp,
    /// A cancelled operation's releases and withdraws are not sent
    /// ([`Client::cancel`](crate::Client::cancel)): an acquire dropped
    /// during its attempt leaves its key on the nodes that granted it, held
    /// for a whole TTL by nobody.
    CancelSkipsWithdraws,
    /// Work under a lock or a leadership (`run`) is polled before the loss
    /// is asked about: after a pause past the validity, the work's own
    /// wake-up runs one more step under a hold that ended. The hook is the
    /// adapter's (redlock-tokio's `held.rs`), where the work is polled.
    WorkPolledAfterLoss,
    /// A fenced lock's token is the quorum's highest counter plus one,
    /// without the servers' clocks under it: once every master restarted
    /// empty, tokens and terms start again from 1, below those issued
    /// before, and the resource takes the old holder's writes again.
    TokenFromCounterOnly,
    /// A server that restarted under the client (its run id changed) votes
    /// at once, not after the longest TTL: where it lost a lock it had
    /// granted, it grants it again while the holder still counts it.
    RestartedNodeVotes,
    /// With `wait_for_aof`, a node's yes counts whatever its `WAITAOF`
    /// answered: a grant its AOF never had counts, and a crash of that
    /// server can lose a lock the client holds.
    VoteBeforeAof,
    /// A client's close ([`Client::close`](crate::Client::close)) stops
    /// its keep-alives and terms without releasing their locks: a service
    /// that shuts down leaves them held by nobody for a whole TTL.
    CloseKeepsHeldLocks,
    /// A failed connection attempt is made again at once, not after the
    /// node's backoff (its connection for requests, or for release
    /// notices): a master that refuses connections, or a client of many
    /// nodes after a network cut, makes a storm of connects.
    ReconnectWithoutBackoff,
    /// A semaphore's permit is extended without its semaphore's k, so the
    /// masters do not keep its permits key alive: the key expires under a
    /// held slot, and a client asking for another number of permits is let
    /// in beside the holder, past the bound of the smaller number.
    PermitsNotKeptAlive,
    /// A semaphore's permit is released as a plain exclusive lock (its slot
    /// alone, without its semaphore's keys): the masters delete the slot
    /// but keep the permits key until it expires, up to one TTL after the
    /// last release, refusing meanwhile a user who counts another number
    /// of permits on a semaphore nobody holds.
    PermitReleaseKeepsPermits,
    /// A won permit's withdraw from a master not heard from
    /// ([`SEMAPHORE_WITHDRAW`](crate::scripts::SEMAPHORE_WITHDRAW) with a
    /// slot to keep) keeps our value at whatever slot holds it, not only
    /// at the permit's: a late grant of another slot stays, held by nobody
    /// for a whole TTL, one permit fewer for everyone. The hook is the
    /// model checker's model of the script (`verify/`), where the masters
    /// run it.
    LateGrantKeptAtAnySlot,
    /// A request its node answered `NOSCRIPT` is sent again in full even
    /// though a later request for its lock key went to that node
    /// meanwhile: the repeat runs after it, so an extend refused that way
    /// takes the key back after the release that followed it, held by
    /// nobody for a whole TTL.
    NoScriptResendOvertakes,
    /// A driver task started while the client's closing one still runs (a
    /// release that came after the shutdown began) runs beside it, with a
    /// core of its own: the two keep no common order on a node, and on a
    /// cluster node the release can overtake the acquire the closing task
    /// still waits on, leaving the key held by nobody for a whole TTL. The
    /// hook is the adapter's (redlock-tokio's `driver.rs`), where tasks
    /// start.
    DriverTasksOverlap,
}

impl Bug {
    /// Every bug, in a fixed order.
    pub const ALL: [Bug; 25] = [
        Bug::ValidityFromDecisionTime,
        Bug::QuorumHalf,
        Bug::DuplicateVoteCounted,
        Bug::ExtendMissingAsOurs,
        Bug::ReleaseSkipsTimedOut,
        Bug::FairNeverFallsBack,
        Bug::FairLeaveForgotten,
        Bug::ReleaseDecidesEarly,
        Bug::HubForgetsReplay,
        Bug::SemaphoreCountsAnySlot,
        Bug::ElectionLosesAtExpiry,
        Bug::ElectionTermFromClient,
        Bug::HandOverBeforeFollowUp,
        Bug::CancelSkipsWithdraws,
        Bug::WorkPolledAfterLoss,
        Bug::TokenFromCounterOnly,
        Bug::RestartedNodeVotes,
        Bug::VoteBeforeAof,
        Bug::CloseKeepsHeldLocks,
        Bug::ReconnectWithoutBackoff,
        Bug::PermitsNotKeptAlive,
        Bug::PermitReleaseKeepsPermits,
        Bug::LateGrantKeptAtAnySlot,
        Bug::NoScriptResendOvertakes,
        Bug::DriverTasksOverlap,
    ];
}

thread_local! {
    static ACTIVE: Cell<Option<Bug>> = const { Cell::new(None) };
}

/// Switches `bug` on for the current thread (`None`: the correct core).
pub fn set(bug: Option<Bug>) {
    ACTIVE.with(|active| active.set(bug));
}

/// The bug switched on for the current thread, if any.
pub fn active() -> Option<Bug> {
    ACTIVE.with(Cell::get)
}

/// Whether `bug` is on for the current thread: what `planted!` expands to.
pub(crate) fn is_on(bug: Bug) -> bool {
    active() == Some(bug)
}
