//! What the state machines ask the caller to send, and what the caller feeds back.

pub(crate) mod election_scripts;
pub(crate) mod fair_scripts;
pub(crate) mod semaphore_scripts;

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use crate::native::Native;
use crate::{Key, LockValue, NodeId, RoundId, Ttl, scripts};

pub use crate::vote::{NodeError, NodeErrorKind, NodeVote};
pub(crate) use crate::vote::{interpret, interpret_acquire, interpret_extend};

/// One script call to one node, emitted by a state machine's `poll_request`.
///
/// The caller runs [`Request::script`] on node [`Request::node`] with
/// `KEYS = `[`Request::keys`] and `ARGV = `[`Request::arguments`], and feeds
/// the result back as a [`Reply`] with the same `attempt` and `node`. It need
/// not wait past `deadline`: the state machine counts a node that has not
/// answered by then as timed out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The round this request belongs to; copy it into the reply.
    pub round: RoundId,
    /// The node to send it to.
    pub node: NodeId,
    /// The script's `KEYS`; the first is the lock key.
    pub keys: Arc<[Key]>,
    /// Our lock value.
    pub value: LockValue,
    /// The kind of lock.
    pub kind: LockKind,
    /// What to run.
    pub command: Command,
    /// The client that sends it, for the scripts that name it to the
    /// masters (a waiter's mark, and an exclusive lock's release,
    /// [`Settings::with_client_tag`](crate::Settings::with_client_tag));
    /// `None` for every other request and for a client without a tag. A
    /// waiter's attempt always names one (its value where its client has
    /// no tag): it marks the holder it finds as waited for
    /// ([`waited`](crate::waited)).
    pub client: Option<LockValue>,
    /// Whether the core may send it as a plain command where the node's
    /// server has one ([`Request::form`],
    /// [`Config::native_commands`](crate::Config::native_commands)).
    pub native: bool,
    /// Whether the node's vote counts only once its append-only file has
    /// the write: `WAITAOF` follows the request on its node, and its answer
    /// judges the reply ([`Reply::on_disk`]). Set on the votes that write
    /// (`Command::must_persist`) where
    /// [`Config::wait_for_aof`](crate::Config::wait_for_aof) is on.
    pub aof: bool,
    /// How it goes on the wire ([`words`](Self::words)): chosen by the
    /// [`Client`](crate::Client) as it sends it, by what the node's server
    /// has ([`NodeFacts`](crate::native::NodeFacts)); [`Form::Digest`]
    /// where a request is made.
    pub form: Form,
    /// When the state machine stops waiting for this node.
    pub deadline: Instant,
    /// When the caller may forget this request unanswered: its
    /// [`deadline`](Self::deadline), except for a request that must arrive
    /// ([`Command::must_arrive`]), whose answer may be waited for until what
    /// it undoes has surely expired on the node by itself: any key this
    /// client set there, by a request the node ran before this one's
    /// deadline, with the longest TTL the lock ever asked for
    /// (one TTL and its drift past the deadline). Past it nothing is left to undo, so nothing
    /// is gained by waiting, and nothing by another connection: the request
    /// is in its node's connection queue already, behind what it undoes, and
    /// runs when the node reads it.
    pub give_up_at: Instant,
    /// Bytes the command carries besides the lock's own: a leader's value
    /// for [`Command::Proclaim`]; for the [`Extend`](Command::Extend) or
    /// [`Restore`](Command::Restore) of a semaphore's permit, the
    /// semaphore's k in decimal (the last key is its
    /// [permits key](crate::Settings::permits_key), which the extend keeps
    /// alive); for a permit's [`Release`](Command::Release) or
    /// [`Withdraw`](Command::Withdraw), the same k, which makes it
    /// [`scripts::SEMAPHORE_RELEASE`] (its keys name every slot and the
    /// permits key; the script counts k from them); for a semaphore's
    /// [`Withdraw`](Command::Withdraw) from a master not heard from when
    /// its attempt won, the won slot in decimal, which the master keeps
    /// ([`scripts::SEMAPHORE_WITHDRAW`]'s `ARGV[2]`); `None` for every
    /// other request.
    pub payload: Option<Arc<[u8]>>,
}

impl Request {
    /// This request (a release, a withdraw or a leave) undoing keys set
    /// with a TTL of at most `ttl`: it may be given up once they have
    /// surely expired ([`give_up_at`](Self::give_up_at)), one TTL and the
    /// expiry's drift past its deadline.
    pub(crate) fn undoing(self, ttl: Ttl, drift: std::time::Duration) -> Self {
        Self {
            give_up_at: self.deadline + ttl.as_duration() + drift,
            ..self
        }
    }

    /// The command to send, name first, as its [`form`](Self::form)
    /// says: `EVALSHA digest numkeys keys.. arguments..`, `EVAL` of the
    /// source in its place, or the plain command's words.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use std::time::Instant;
    /// use redlock_core::{Argument, Form, scripts};
    /// # let mut request = redlock_core::Request {
    /// #     round: redlock_core::RoundId(0), node: redlock_core::NodeId(0),
    /// #     keys: Arc::from(vec![redlock_core::Key::from("k")]),
    /// #     value: redlock_core::LockValue::from_string("v".repeat(16)),
    /// #     kind: redlock_core::LockKind::Exclusive,
    /// #     command: redlock_core::Command::Release,
    /// #     client: None, native: false, aof: false, form: Form::Digest, deadline: Instant::now(),
    /// #     give_up_at: Instant::now(), payload: None,
    /// # };
    /// let words = request.words();
    /// assert_eq!(words[0], Argument::Bytes(b"EVALSHA"));
    /// let digest = scripts::digest(request.script()).unwrap();
    /// assert_eq!(words[1], Argument::Bytes(digest.as_bytes()));
    /// assert_eq!(words[2], Argument::Int(1)); // one key
    /// request.form = Form::InFull;
    /// assert_eq!(request.words()[1], Argument::Bytes(request.script().as_bytes()));
    /// ```
    pub fn words(&self) -> Vec<Argument<'_>> {
        let (verb, script): (&[u8], &str) = match self.form {
            Form::Native(native) => return native.words(self).to_vec(),
            Form::Digest => (
                b"EVALSHA",
                scripts::digest(self.script()).expect("every script of a request is in ALL"),
            ),
            Form::InFull => (b"EVAL", self.script()),
        };
        let mut words = Vec::with_capacity(3 + self.keys.len() + 6);
        words.extend([
            Argument::Bytes(verb),
            Argument::Bytes(script.as_bytes()),
            Argument::Int(self.keys.len() as u64),
        ]);
        words.extend(self.keys.iter().map(|key| Argument::Bytes(key.as_bytes())));
        words.extend(self.arguments());
        words
    }

    /// The lock key (the first of [`keys`](Self::keys)).
    pub fn key(&self) -> &Key {
        &self.keys[0]
    }

    /// The Lua source of the script to run.
    pub fn script(&self) -> &'static str {
        use Command::*;
        match (&self.kind, self.command) {
            (LockKind::Semaphore { .. }, AcquireFenced { .. }) => scripts::SEMAPHORE_ACQUIRE,
            (_, AcquireFenced { .. }) => scripts::ACQUIRE_FENCED,
            (_, StoreToken { .. }) => scripts::STORE_TOKEN,
            (_, MarkWaiting { .. }) => scripts::MARK_WAITING,
            // A permit's release (it names its semaphore's k): its slot,
            // and the permits key with the last slot held on the node.
            (LockKind::Exclusive, Release | Withdraw) if self.payload.is_some() => {
                scripts::SEMAPHORE_RELEASE
            }
            (LockKind::Exclusive, Release) => scripts::RELEASE_IF_WAITED,
            (LockKind::Exclusive, Acquire { .. }) => scripts::ACQUIRE,
            (LockKind::Exclusive, Extend { .. } | Restore { .. }) => scripts::EXTEND,
            (LockKind::Exclusive | LockKind::Write { .. }, Release | Withdraw) => scripts::RELEASE,
            (LockKind::Read, Acquire { .. }) => scripts::READ_ACQUIRE,
            (LockKind::Read, Extend { .. } | Restore { .. }) => scripts::READ_EXTEND,
            (LockKind::Read, Release | Withdraw) => scripts::READ_RELEASE,
            (LockKind::Write { .. }, Acquire { .. }) => scripts::WRITE_ACQUIRE,
            (LockKind::Write { .. }, Extend { .. } | Restore { .. }) => scripts::WRITE_EXTEND,
            (LockKind::Reentrant { .. }, Acquire { .. }) => scripts::REENTRANT_ACQUIRE,
            (LockKind::Reentrant { .. }, Extend { .. } | Restore { .. }) => {
                scripts::REENTRANT_EXTEND
            }
            (LockKind::Reentrant { .. }, Release | Withdraw) => scripts::REENTRANT_RELEASE,
            (LockKind::Multi, Acquire { .. }) => scripts::MULTI_ACQUIRE,
            (LockKind::Multi, Extend { .. } | Restore { .. }) => scripts::MULTI_EXTEND,
            (LockKind::Multi, Release | Withdraw) => scripts::MULTI_RELEASE,
            (LockKind::Fair { .. }, Acquire { .. }) => scripts::FAIR_ACQUIRE,
            (LockKind::Fair { .. }, Extend { .. } | Restore { .. }) => scripts::EXTEND,
            (LockKind::Fair { .. }, Release | Withdraw | Leave) => scripts::FAIR_RELEASE,
            (LockKind::Semaphore { .. }, Acquire { .. }) => scripts::SEMAPHORE_ACQUIRE,
            (LockKind::Semaphore { .. }, Release | Withdraw) => scripts::SEMAPHORE_WITHDRAW,
            // A held permit is an exclusive lock on its slot: never asked.
            (LockKind::Semaphore { .. }, Extend { .. } | Restore { .. }) => scripts::EXTEND,
            (_, Inspect) => scripts::INSPECT,
            (_, Proclaim { .. }) => scripts::PROCLAIM,
            (_, ReadLeader) => scripts::READ_LEADER,
            // Only a fair lock has a place in a queue to leave.
            (_, Leave) => scripts::RELEASE,
        }
    }

    /// The script's `ARGV`: our value; then the TTL in milliseconds (or the
    /// fencing token, or for a release whether to publish a release notice:
    /// `1` for [`Command::Release`], `0` for [`Command::Withdraw`]); then, for
    /// a write lock's acquire, how long readers are held off, for a
    /// reentrant lock, the owner, for a waiter's mark, a waiter's attempt
    /// (exclusive, fenced or multi-resource) and an exclusive lock's
    /// release, the [client](Self::client) if it has one, and for a fair lock's acquire and release
    /// its waiter id, then (acquire) how long its queue entry lives and
    /// whether it waits for its turn (`1`) or takes the lock by the plain rule
    /// (`0`) and its ticket (the place it asks for), or (release) `0` to keep its place in the queue (a withdraw),
    /// `1` to leave it (a release), `2` to leave it without touching the
    /// lock key ([`Command::Leave`]); for an extend script, whether it may
    /// set a missing lock again: `1` for [`Command::Restore`], `0` for
    /// [`Command::Extend`], and last, for a permit's, the semaphore's k
    /// ([`payload`](Self::payload)). A semaphore's acquire sends k fourth.
    /// A semaphore's withdraw sends our value alone, or with the slot it
    /// keeps second ([`payload`](Self::payload)); never a flag there.
    pub fn arguments(&self) -> impl Iterator<Item = Argument<'_>> {
        let second = match self.command {
            Command::Acquire { ttl }
            | Command::AcquireFenced { ttl }
            | Command::Extend { ttl }
            | Command::Restore { ttl }
            | Command::MarkWaiting { ttl } => Some(ttl.as_millis()),
            Command::StoreToken { token } | Command::Proclaim { term: token } => Some(token),
            Command::Release => Some(1),
            Command::Withdraw | Command::Leave => Some(0),
            Command::Inspect | Command::ReadLeader => None,
        };
        let third = match (&self.kind, self.command) {
            (LockKind::Write { readers_hold_off }, Command::Acquire { .. }) => {
                Some(Argument::Int(readers_hold_off.as_millis()))
            }
            (LockKind::Reentrant { owner }, _) => Some(Argument::Bytes(owner.as_bytes())),
            (
                LockKind::Semaphore { start },
                Command::Acquire { .. } | Command::AcquireFenced { .. },
            ) => Some(Argument::Int(u64::from(*start))),
            (_, Command::Proclaim { .. }) => self
                .payload
                .as_deref()
                .map(Argument::Bytes)
                .or(Some(Argument::Bytes(b""))),
            (
                LockKind::Exclusive,
                Command::Release | Command::MarkWaiting { .. } | Command::AcquireFenced { .. },
            )
            | (LockKind::Exclusive | LockKind::Multi, Command::Acquire { .. }) => self
                .client
                .as_ref()
                .map(|client| Argument::Bytes(client.as_bytes())),
            _ => None,
        };
        // A semaphore's withdraw: `ARGV[2]` is the slot it keeps, if any.
        let semaphore_withdraw = matches!(
            (&self.kind, self.command),
            (
                LockKind::Semaphore { .. },
                Command::Release | Command::Withdraw
            )
        );
        let kept = self
            .payload
            .as_deref()
            .filter(|_| semaphore_withdraw)
            .map(Argument::Bytes);
        let second = if semaphore_withdraw { None } else { second };
        let second = match (second, &third) {
            (Some(n), _) => Some(Argument::Int(n)),
            (None, Some(_)) => Some(Argument::Int(0)),
            (None, None) => None,
        };
        // A semaphore's k, which the masters keep in its permits key.
        let permits = match (&self.kind, self.command) {
            (
                LockKind::Semaphore { .. },
                Command::Acquire { .. } | Command::AcquireFenced { .. },
            ) => {
                let fenced = matches!(self.command, Command::AcquireFenced { .. });
                Some(Argument::Int(
                    crate::ops::semaphore::permits(&self.keys, fenced) as u64,
                ))
            }
            _ => None,
        };
        let restore = match self.command {
            Command::Extend { .. } => Some(Argument::Int(0)),
            Command::Restore { .. } => Some(Argument::Int(1)),
            _ => None,
        };
        // A permit's extension: its semaphore's k, to keep its permits key.
        let keeps = match self.command {
            Command::Extend { .. } | Command::Restore { .. } => {
                self.payload.as_deref().map(Argument::Bytes)
            }
            _ => None,
        };
        // A fair lock's waiter id and what goes with it.
        let (waiter, fair) = match (&self.kind, self.command) {
            (
                LockKind::Fair {
                    waiter,
                    entry,
                    by_queue,
                    ticket,
                },
                Command::Acquire { .. },
            ) => (
                Some(Argument::Bytes(waiter.as_bytes())),
                [
                    Some(Argument::Int(entry.as_millis())),
                    Some(Argument::Int(u64::from(*by_queue))),
                    Some(Argument::Int(*ticket)),
                ],
            ),
            (LockKind::Fair { waiter, .. }, Command::Release) => (
                Some(Argument::Bytes(waiter.as_bytes())),
                [Some(Argument::Int(1)), None, None],
            ),
            (LockKind::Fair { waiter, .. }, Command::Leave) => (
                Some(Argument::Bytes(waiter.as_bytes())),
                [Some(Argument::Int(2)), None, None],
            ),
            (LockKind::Fair { waiter, .. }, Command::Withdraw) => (
                Some(Argument::Bytes(waiter.as_bytes())),
                [Some(Argument::Int(0)), None, None],
            ),
            _ => (None, [None, None, None]),
        };
        std::iter::once(Argument::Bytes(self.value.as_bytes()))
            .chain(kept)
            .chain(second)
            .chain(third)
            .chain(permits)
            .chain(waiter)
            .chain(fair.into_iter().flatten())
            .chain(restore)
            .chain(keeps)
    }
}

/// The command to send at `now` behind `requests`, one node's batch, once
/// for all of them, if any waits for the AOF ([`Request::aof`]): `WAITAOF
/// 1 0 <timeout ms>`, which answers once the node's own AOF has every
/// write its connection sent before it (`1`), or at the timeout with `0`.
/// The timeout ends three quarters of the way to the earliest deadline
/// among them, so that a `0` arrives while their votes are still awaited
/// and reads as [`NodeErrorKind::NotOnDisk`], not as a timeout. Its answer
/// goes to [`Reply::on_disk`].
pub fn waitaof(requests: &[Request], now: Instant) -> Option<[Argument<'static>; 4]> {
    let deadline = requests
        .iter()
        .filter(|request| request.aof)
        .map(|request| request.deadline)
        .min()?;
    let left = deadline.saturating_duration_since(now) * 3 / 4;
    // WAITAOF's timeout 0 waits for ever: at least one millisecond.
    let millis = u64::try_from(left.as_millis()).unwrap_or(u64::MAX).max(1);
    Some([
        Argument::Bytes(b"WAITAOF"),
        Argument::Int(1),
        Argument::Int(0),
        Argument::Int(millis),
    ])
}

/// How a [`Request`] goes on the wire: its script by digest or in full,
/// or a plain command the node's server has instead.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Form {
    /// `EVALSHA` of its script's digest: the node loaded the scripts at
    /// connect.
    #[default]
    Digest,
    /// `EVAL` of its script's source: the node answered `NOSCRIPT`
    /// ([`NodeErrorKind::NoScript`]), and the [`Client`](crate::Client)
    /// sends it again where it may, so that the repeat cannot meet the
    /// same answer (and the node caches the script for the requests to
    /// come).
    InFull,
    /// This plain command ([`native`](crate::native)): its answers mean
    /// other things ([`Reply::native`]).
    Native(Native),
}

/// One word of a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Argument<'a> {
    /// Bytes, sent as they are.
    Bytes(&'a [u8]),
    /// An integer, sent in decimal.
    Int(u64),
}

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

/// A node's answer to a [`Request`], fed back through `handle_reply`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// Copied from the request.
    pub round: RoundId,
    /// Copied from the request.
    pub node: NodeId,
    /// What the node said, or why it could not be asked.
    pub result: Result<Response, NodeError>,
    /// The plain command that was sent instead of the request's script, if
    /// one was ([`Request::form`]): its answers mean other things.
    pub native: Option<Native>,
}

impl Reply {
    /// The reply to `request`, sent as its [`form`](Request::form) says,
    /// carrying `result`.
    pub fn to(request: &Request, result: Result<Response, NodeError>) -> Self {
        Self {
            round: request.round,
            node: request.node,
            result,
            native: match request.form {
                Form::Native(native) => Some(native),
                Form::Digest | Form::InFull => None,
            },
        }
    }

    /// This reply to `request`, judged by the node's answer to the
    /// `WAITAOF` sent behind it ([`waitaof`]; `answer`, or the error that
    /// kept it from coming) when the request waits for the AOF
    /// ([`Request::aof`]): a yes counts only where the answer says the
    /// node's AOF has the write (its first number at least 1); otherwise
    /// the vote fails ([`NodeErrorKind::NotOnDisk`]). A no, an error, or a
    /// request that does not wait is returned as it is.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use std::time::Instant;
    /// use redlock_core::{NodeErrorKind, Reply, Response};
    /// # let request = redlock_core::Request {
    /// #     round: redlock_core::RoundId(0), node: redlock_core::NodeId(0),
    /// #     keys: Arc::from(vec![redlock_core::Key::from("k")]),
    /// #     value: redlock_core::LockValue::from_string("v".repeat(16)),
    /// #     kind: redlock_core::LockKind::Exclusive,
    /// #     command: redlock_core::Command::StoreToken { token: 7 },
    /// #     client: None, native: false, aof: true, form: Default::default(), deadline: Instant::now(),
    /// #     give_up_at: Instant::now(), payload: None,
    /// # };
    /// let granted = Reply::to(&request, Ok(Response::Int(1)));
    /// let synced = Ok(Response::Array(vec![Response::Int(1), Response::Int(0)]));
    /// let late = Ok(Response::Array(vec![Response::Int(0), Response::Int(0)]));
    /// assert_eq!(granted.clone().on_disk(&request, &synced), granted);
    /// let refused = granted.on_disk(&request, &late).result.unwrap_err();
    /// assert_eq!(refused.kind, NodeErrorKind::NotOnDisk);
    /// ```
    pub fn on_disk(mut self, request: &Request, answer: &Result<Response, NodeError>) -> Reply {
        if !request.aof || planted!(VoteBeforeAof) {
            return self;
        }
        let vote = interpret(request.command, self.native, self.result.clone());
        if !vote.is_yes() {
            return self;
        }
        let error = match answer {
            Ok(Response::Array(counts)) => match counts.first() {
                Some(Response::Int(synced)) if *synced >= 1 => return self,
                Some(Response::Int(_)) => NodeError::not_on_disk(
                    "WAITAOF timed out before the server's AOF had the write",
                ),
                _ => NodeError::not_on_disk(format!("WAITAOF answered {counts:?}")),
            },
            Ok(other) => NodeError::not_on_disk(format!("WAITAOF answered {other:?}")),
            Err(error) => NodeError::not_on_disk(format!("WAITAOF failed: {error}")),
        };
        self.result = Err(error);
        self
    }

    /// The answer the driver gives for `request` itself, sent to no node:
    /// its node is known slow and `NodeHealth::admit`
    /// did not admit it. It counts as a failure of that node.
    pub fn skipped(request: &Request) -> Self {
        Self::to(request, Err(NodeError::slow()))
    }
}

/// A script's return value as Redis sent it, before interpretation.
///
/// The adapter maps its client library's reply type onto this; the state
/// machine decides what it means for the command, so a node that answers
/// something a script never returns is reported as
/// [`NodeErrorKind::Protocol`], not misread as a vote.
#[derive(Clone, PartialEq, Eq)]
pub enum Response {
    /// An integer reply.
    Int(i64),
    /// A bulk string reply.
    Data(Vec<u8>),
    /// A nil reply.
    Nil,
    /// An array reply.
    Array(Vec<Response>),
    /// Anything else (a status, an array, ...), described for the error message.
    Other(String),
}

impl fmt::Debug for Response {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Response::Int(n) => write!(f, "Int({n})"),
            Response::Data(bytes) => write!(f, "Data({})", Key::from(bytes.as_slice())),
            Response::Nil => write!(f, "Nil"),
            Response::Array(items) => f.debug_list().entries(items).finish(),
            Response::Other(text) => write!(f, "Other({text})"),
        }
    }
}
