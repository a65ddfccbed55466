//! What the state machines ask the caller to send, and what the caller feeds back.

mod command;
pub(crate) mod election_scripts;
pub(crate) mod fair_scripts;
pub(crate) mod kind_scripts;
mod reply;
pub(crate) mod semaphore_scripts;

pub use command::{Command, LockKind};
pub use reply::{Reply, Response, waitaof};

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
