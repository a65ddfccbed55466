//! What a request asks for: the lock's kind and the operation, which
//! together pick its script and keys.

use std::sync::Arc;

use crate::Ttl;
#[cfg(doc)]
use crate::{NodeVote, Request, scripts};

/// What a lock excludes, which decides the scripts and keys of its requests.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockKind {
    /// One holder at a time (the classic Redlock lock).
    Exclusive,
    /// One of many readers; excludes writers.
    Read,
    /// The writer of a read-write lock; excludes readers and other writers.
    Write {
        /// While we wait for readers to finish, new readers are refused for
        /// this long (renewed by each of our attempts).
        readers_hold_off: Ttl,
    },
    /// Held by an owner id that may take it again while holding it.
    Reentrant {
        /// The owner id.
        owner: Arc<str>,
    },
    /// All of several resources at once, or none.
    Multi,
    /// One holder at a time, served in the order the masters' queues saw
    /// the waiters (see [`LockSpec::Fair`](crate::LockSpec::Fair)).
    Fair {
        /// This acquisition's place in the queues: random, drawn once per
        /// acquisition (its lock values change with each attempt).
        waiter: Arc<str>,
        /// How long a queue entry lives unless the waiter's next attempt
        /// renews it: a waiter that died holds the queue no longer.
        entry: Ttl,
        /// `true`: the lock is granted on a master only to the head of its
        /// queue; `false`: by the plain rule (free: granted), the bounded
        /// fall-back of a waiter the masters' queues could not agree on.
        by_queue: bool,
        /// The highest place in the queues (a score, the same order on
        /// every master) any master gave this waiter, `0` before one did.
        /// Each attempt sends it, and a master that ranks us lower raises
        /// our entry to it, so that masters that saw two waiters arrive in
        /// different orders come to agree on them (as in Lamport's bakery:
        /// the larger number goes after, ties go by waiter id).
        ticket: u64,
    },
    /// One permit of a counting semaphore, while it is acquired: one of
    /// the slot locks (see [`LockSpec::Semaphore`](crate::LockSpec::Semaphore)).
    /// A permit once held is an [`Exclusive`](Self::Exclusive) lock on its
    /// slot key.
    Semaphore {
        /// The slot each master tries first in this attempt (from 0), the
        /// same on every master: drawn per attempt from the acquisition's RNG.
        start: u32,
    },
}

impl LockKind {
    /// A short name for logs.
    pub fn name(&self) -> &'static str {
        match self {
            LockKind::Exclusive => "exclusive",
            LockKind::Read => "read",
            LockKind::Write { .. } => "write",
            LockKind::Reentrant { .. } => "reentrant",
            LockKind::Multi => "multi",
            LockKind::Fair { .. } => "fair",
            LockKind::Semaphore { .. } => "semaphore",
        }
    }
}

/// The operation a [`Request`] asks for; with the [`LockKind`] it picks one
/// script in [`scripts`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Command {
    /// Take the lock on this node ([`scripts::ACQUIRE`] and its kin).
    Acquire {
        /// The TTL to set.
        ttl: Ttl,
    },
    /// Reset the TTL of our lock where our value is there
    /// ([`scripts::EXTEND`] and its kin); a node where it is missing answers
    /// so and is left as it is.
    Extend {
        /// The new TTL.
        ttl: Ttl,
    },
    /// Set our lock again on a node where an extension found it missing (a
    /// master that restarted empty), with the same scripts as
    /// [`Extend`](Self::Extend). Sent only after a quorum of nodes confirmed
    /// that they still hold our value, so it can repair a minority but never
    /// bring back a lock that has ended.
    Restore {
        /// The TTL to set.
        ttl: Ttl,
    },
    /// Remove our lock and tell waiting clients ([`scripts::RELEASE`] and
    /// its kin).
    Release,
    /// Remove what a failed or abandoned attempt may have set, without a
    /// release notice: nobody held the lock, so waking waiters would only
    /// start a storm of attempts that fail while the real holder holds on.
    Withdraw,
    /// A fair lock only: leave the masters' queues, without touching the
    /// lock key ([`scripts::FAIR_RELEASE`]), when an acquisition ends: it
    /// won and leaves the queues of the masters that did not grant, or it
    /// failed or was abandoned (after the [`Withdraw`](Self::Withdraw) of
    /// its attempt, if one was in flight). A [`NodeVote::Granted`] when our
    /// entry was there, [`NodeVote::Missing`] when not.
    Leave,
    /// Set the key to our value if absent and read the node's fencing counter
    /// ([`scripts::ACQUIRE_FENCED`]).
    AcquireFenced {
        /// The TTL to set.
        ttl: Ttl,
    },
    /// Raise the node's fencing counter to the token where we hold the lock
    /// ([`scripts::STORE_TOKEN`]).
    StoreToken {
        /// The fencing token.
        token: u64,
    },
    /// Read the lock key, its PTTL and the resource's fencing counter
    /// ([`scripts::INSPECT`]), for an inspection ([`Operation::inspect`](crate::Operation::inspect)).
    /// Writes nothing; not a vote.
    Inspect,
    /// Announce that a client waits for the lock, so that its holder's
    /// release publishes a notice ([`scripts::MARK_WAITING`]; `keys` are
    /// the lock key and its
    /// `Settings::waiters_key`). Sent just
    /// before an attempt, on its own round: nobody reads its reply, and a
    /// lost one only leaves the waiter to its retry timer.
    MarkWaiting {
        /// How long the mark lives at least.
        ttl: Ttl,
    },
    /// Write a leader's value under its term where the lock key holds our
    /// value and no higher term is stored ([`scripts::PROCLAIM`]; `keys`:
    /// the lock key, its fencing counter and its leader record, see
    /// `Settings::leader_key`). The value
    /// goes in [`Request::payload`].
    Proclaim {
        /// Our term (the lock's fencing token).
        term: u64,
    },
    /// Read the lock key, its fencing counter and its leader record
    /// ([`scripts::READ_LEADER`]), for a [`Operation::read_leader`](crate::Operation::read_leader).
    /// Writes nothing; not a vote.
    ReadLeader,
}

impl Command {
    /// The TTL argument, for the commands that take one.
    pub fn ttl(&self) -> Option<Ttl> {
        match self {
            Command::Acquire { ttl }
            | Command::AcquireFenced { ttl }
            | Command::Extend { ttl }
            | Command::Restore { ttl } => Some(*ttl),
            Command::Release
            | Command::Withdraw
            | Command::Leave
            | Command::StoreToken { .. }
            | Command::Inspect
            | Command::MarkWaiting { .. }
            | Command::Proclaim { .. }
            | Command::ReadLeader => None,
        }
    }

    /// Whether the command removes what we set ([`Release`](Self::Release),
    /// [`Withdraw`](Self::Withdraw)). Such a command must reach its node even
    /// when nobody waits for its reply any more: the acquire it undoes may
    /// have reached the node, and would otherwise stay there for a whole TTL.
    /// Any other command may be dropped unsent once its deadline has passed
    /// (a vote that no longer counts).
    pub fn must_arrive(&self) -> bool {
        matches!(self, Command::Release | Command::Withdraw | Command::Leave)
    }

    machinery_fn! {
        /// Whether the node's yes must survive its crash for the lock to hold:
        /// what grants, keeps or proves a lock (acquires, extensions, restores,
        /// fencing tokens, a leader's proclamation). With
        /// [`Config::wait_for_aof`](crate::Config::wait_for_aof) such a vote
        /// counts only once the node's AOF has it ([`Request::aof`]).
        fn must_persist(&self) -> bool {
            matches!(
                self,
                Command::Acquire { .. }
                    | Command::AcquireFenced { .. }
                    | Command::Extend { .. }
                    | Command::Restore { .. }
                    | Command::StoreToken { .. }
                    | Command::Proclaim { .. }
            )
        }
    }

    machinery_fn! {
        /// Whether the command only reads (an inspection, who leads an
        /// election): it changes nothing a vote could count, and a node known
        /// slow is asked all the same.
        fn only_reads(&self) -> bool {
            matches!(self, Command::Inspect | Command::ReadLeader)
        }
    }

    /// A short name for logs: `acquire`, `extend`, `release`.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Acquire { .. } => "acquire",
            Command::Extend { .. } => "extend",
            Command::Restore { .. } => "restore",
            Command::Release => "release",
            Command::Withdraw => "withdraw",
            Command::Leave => "leave",
            Command::AcquireFenced { .. } => "acquire (fenced)",
            Command::StoreToken { .. } => "store token",
            Command::Inspect => "inspect",
            Command::MarkWaiting { .. } => "mark waiting",
            Command::Proclaim { .. } => "proclaim",
            Command::ReadLeader => "read leader",
        }
    }
}
