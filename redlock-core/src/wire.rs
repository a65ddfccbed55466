//! What the state machines ask the caller to send, and what the caller feeds back.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{Key, LockValue, Native, NodeId, RoundId, Ttl, scripts};

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
    /// masters (a waiter's mark and an exclusive lock's release,
    /// [`Settings::with_client_tag`](crate::Settings::with_client_tag));
    /// `None` for every other request and for a client without a tag.
    pub client: Option<LockValue>,
    /// Whether the core may send it as a plain command where the node's
    /// server has one ([`Request::call`],
    /// [`Config::native_commands`](crate::Config::native_commands)).
    pub native: bool,
    /// When the state machine stops waiting for this node.
    pub deadline: Instant,
    /// Bytes the command carries besides the lock's own: a leader's value
    /// for [`Command::Proclaim`]; `None` for every other command.
    pub payload: Option<Arc<[u8]>>,
}

impl Request {
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
    /// reentrant lock, the owner, for a waiter's mark and an exclusive
    /// lock's release, the [client](Self::client) if it has one, and for a fair lock's acquire and release
    /// its waiter id, then (acquire) how long its queue entry lives and
    /// whether it waits for its turn (`1`) or takes the lock by the plain rule
    /// (`0`) and its ticket (the place it asks for), or (release) `0` to keep its place in the queue (a withdraw),
    /// `1` to leave it (a release), `2` to leave it without touching the
    /// lock key ([`Command::Leave`]); last, for an extend script, whether it may
    /// set a missing lock again: `1` for [`Command::Restore`], `0` for
    /// [`Command::Extend`].
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
            (LockKind::Exclusive, Command::Release | Command::MarkWaiting { .. }) => self
                .client
                .as_ref()
                .map(|client| Argument::Bytes(client.as_bytes())),
            _ => None,
        };
        let second = match (second, &third) {
            (Some(n), _) => Some(Argument::Int(n)),
            (None, Some(_)) => Some(Argument::Int(0)),
            (None, None) => None,
        };
        // A fenced semaphore's k: its keys are the slots, then their counters.
        let permits = match (&self.kind, self.command) {
            (LockKind::Semaphore { .. }, Command::AcquireFenced { .. }) => {
                Some(Argument::Int((self.keys.len() / 2) as u64))
            }
            _ => None,
        };
        let restore = match self.command {
            Command::Extend { .. } => Some(Argument::Int(0)),
            Command::Restore { .. } => Some(Argument::Int(1)),
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
            .chain(second)
            .chain(third)
            .chain(permits)
            .chain(waiter)
            .chain(fair.into_iter().flatten())
            .chain(restore)
    }
}

/// One script argument.
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
    /// ([`scripts::INSPECT`]), for an [`Inspection`](crate::Inspection).
    /// Writes nothing; not a vote.
    Inspect,
    /// Announce that a client waits for the lock, so that its holder's
    /// release publishes a notice ([`scripts::MARK_WAITING`]; `keys` are
    /// the lock key and its
    /// [`Settings::waiters_key`](crate::Settings::waiters_key)). Sent just
    /// before an attempt, on its own round: nobody reads its reply, and a
    /// lost one only leaves the waiter to its retry timer.
    MarkWaiting {
        /// How long the mark lives at least.
        ttl: Ttl,
    },
    /// Write a leader's value under its term where the lock key holds our
    /// value and no higher term is stored ([`scripts::PROCLAIM`]; `keys`:
    /// the lock key, its fencing counter and its leader record, see
    /// [`Settings::leader_key`](crate::Settings::leader_key)). The value
    /// goes in [`Request::payload`].
    Proclaim {
        /// Our term (the lock's fencing token).
        term: u64,
    },
    /// Read the lock key, its fencing counter and its leader record
    /// ([`scripts::READ_LEADER`]), for a [`LeaderRead`](crate::LeaderRead).
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
    /// one was ([`Request::call`]): its answers mean other things.
    pub native: Option<Native>,
}

impl Reply {
    /// The reply to `request` carrying `result`.
    pub fn to(request: &Request, result: Result<Response, NodeError>) -> Self {
        Self {
            round: request.round,
            node: request.node,
            result,
            native: None,
        }
    }

    /// The answer the driver gives for `request` itself, sent to no node:
    /// its node is known slow and [`NodeHealth::admit`](crate::NodeHealth::admit)
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

/// Why one node could not give a usable answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeError {
    /// The class of failure.
    pub kind: NodeErrorKind,
    /// What happened, in words (never containing credentials).
    pub detail: String,
}

impl NodeError {
    /// An error of `kind` with a description.
    pub fn new(kind: NodeErrorKind, detail: impl Into<String>) -> Self {
        Self {
            kind,
            detail: detail.into(),
        }
    }

    /// Not sent: the node is known slow ([`NodeHealth`](crate::NodeHealth)).
    pub fn slow() -> Self {
        Self::new(
            NodeErrorKind::Slow,
            format!(
                "not asked: {} requests in a row went unanswered; probed until it answers",
                crate::SLOW_AFTER
            ),
        )
    }

    /// The node did not answer within the per-node timeout.
    pub fn timeout(after: Duration) -> Self {
        Self::new(
            NodeErrorKind::Timeout,
            format!("no answer within {}", crate::limits::Millis(after)),
        )
    }
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            NodeErrorKind::Timeout => write!(f, "timed out: {}", self.detail),
            NodeErrorKind::Connection => write!(f, "unreachable: {}", self.detail),
            NodeErrorKind::Auth => write!(f, "authentication failed: {}", self.detail),
            NodeErrorKind::WrongType => write!(
                f,
                "the key holds a value of another type, not a lock: {}",
                self.detail
            ),
            NodeErrorKind::Server => write!(f, "server error: {}", self.detail),
            NodeErrorKind::NoPermission => write!(f, "not permitted: {}", self.detail),
            NodeErrorKind::Protocol => write!(f, "unexpected answer: {}", self.detail),
            NodeErrorKind::Tls => write!(f, "TLS handshake rejected: {}", self.detail),
            NodeErrorKind::Slow => write!(f, "known slow: {}", self.detail),
        }
    }
}

impl std::error::Error for NodeError {}

impl NodeErrorKind {
    /// The class of an error reply from a node, by its error code (the
    /// reply's first word), exactly: `WRONGTYPE` is [`WrongType`](Self::WrongType),
    /// `NOAUTH` and `WRONGPASS` are [`Auth`](Self::Auth), `NOPERM` is
    /// [`NoPermission`](Self::NoPermission), any other code is
    /// [`Server`](Self::Server). Adapters call this for every error reply, so
    /// that the core, which knows what its scripts answer, decides what an
    /// error means; no other text of the message is looked at.
    ///
    /// A script whose `redis.call` fails on a key of another type answers
    /// with the code `WRONGTYPE` (Redis 7 keeps the failed command's code;
    /// the reentrant scripts check the type themselves and answer with that
    /// code on any version).
    ///
    /// ```
    /// use redlock_core::NodeErrorKind;
    /// assert_eq!(NodeErrorKind::from_error_code("WRONGTYPE"), NodeErrorKind::WrongType);
    /// assert_eq!(NodeErrorKind::from_error_code("ERR"), NodeErrorKind::Server);
    /// assert_eq!(NodeErrorKind::from_error_code("wrongtype"), NodeErrorKind::Server);
    /// ```
    pub fn from_error_code(code: &str) -> Self {
        match code {
            "WRONGTYPE" => NodeErrorKind::WrongType,
            "NOAUTH" | "WRONGPASS" => NodeErrorKind::Auth,
            "NOPERM" => NodeErrorKind::NoPermission,
            _ => NodeErrorKind::Server,
        }
    }
}

/// The classes of node failure, so callers can react without parsing text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NodeErrorKind {
    /// No answer within the per-node timeout (node down, paused or slow).
    Timeout,
    /// No connection: refused, reset, DNS failure, a server that does not
    /// speak TLS on a TLS connection.
    Connection,
    /// The node refused our credentials (wrong password, unknown ACL user, or a
    /// password is required).
    Auth,
    /// A key of the lock exists and holds another type than the lock's (a
    /// list where a lock value should be, a string where a reentrant lock's
    /// hash should be). Permanent: no retry can fix it, so an acquire that
    /// finds it on too many nodes fails at once with
    /// [`AcquireError::WrongType`](crate::AcquireError::WrongType).
    WrongType,
    /// The node answered with an error (out of memory, read-only replica,
    /// loading, scripts disabled, ...).
    Server,
    /// The node refused a command, a key or a channel to our ACL user
    /// (`NOPERM`). A configuration error, like [`Auth`](Self::Auth). A
    /// release refused for the waiters' marks alone is sent again without
    /// them ([`Release`](crate::Release)).
    NoPermission,
    /// The node answered something that is not a valid reply to the script.
    Protocol,
    /// The TLS handshake was refused by either side: the server's
    /// certificate is not trusted (unknown CA, wrong host name, expired) or
    /// the server wants a client certificate. A configuration error, like
    /// [`Auth`](Self::Auth): waiting will not fix it.
    Tls,
    /// Not sent: the node left several requests in a row unanswered past
    /// their timeout and is skipped until it answers a probe
    /// ([`NodeHealth`](crate::NodeHealth)).
    Slow,
}

/// How one node voted in a round.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeVote {
    /// No answer yet (the round was decided before this node answered).
    Pending,
    /// The node did what was asked: set, extended or deleted our key.
    Granted,
    /// Restore only: our key was missing (the node restarted empty or
    /// expired it early) and was set again, after a quorum of other nodes
    /// confirmed the lock (see [`Extension`](crate::Extension)).
    Restored,
    /// The key is held by another value. Acquire replies carry (up to 64 bytes
    /// of) that value, for diagnostics; it is never printed, since whoever
    /// knows a lock's value can release it.
    HeldByOther(Option<Vec<u8>>),
    /// Release: the key was already gone. Extend: our value was not there
    /// and nothing was set (the key is gone or, for a read lock, our entry).
    Missing,
    /// Release only: our value was not there; the key was gone or held by
    /// another value (a native compare-and-delete does not tell which).
    NotOurs,
    /// The node failed or timed out.
    Failed(NodeError),
    /// Release only: not asked, because the lock's value was never sent
    /// there (its acquire skipped the node, known slow then: see
    /// [`NodeHealth`](crate::NodeHealth)), so nothing of ours is there.
    NotAsked,
}

impl NodeVote {
    pub(crate) fn is_yes(&self) -> bool {
        matches!(self, NodeVote::Granted | NodeVote::Restored)
    }
}

impl fmt::Display for NodeVote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // The round was decided without this answer: the node may be up
            // or down, so not "no answer yet" (it may have answered since).
            NodeVote::Pending => f.write_str("not waited for"),
            NodeVote::Granted => f.write_str("granted"),
            NodeVote::Restored => f.write_str("granted (key was missing and was set again)"),
            // Never print the other owner's value: it is what releases its
            // lock, and messages end up in logs.
            NodeVote::HeldByOther(_) => f.write_str("held by another owner"),
            NodeVote::Missing => f.write_str("key already gone"),
            NodeVote::NotOurs => f.write_str("not ours (gone, or another owner's)"),
            NodeVote::Failed(error) => write!(f, "{error}"),
            NodeVote::NotAsked => f.write_str("not asked (known slow when locked; never held it)"),
        }
    }
}

/// Reads a node's answer to a command, sent as its script or as `native`
/// ([`Reply::native`]), as a vote. Anything the command sent never returns
/// becomes a protocol error, so garbage is never counted as a yes.
pub(crate) fn interpret(
    command: Command,
    native: Option<Native>,
    result: Result<Response, NodeError>,
) -> NodeVote {
    let response = match result {
        Ok(response) => response,
        Err(error) => return NodeVote::Failed(error),
    };
    if let Some(native) = native {
        return interpret_native(command, native, response);
    }
    let vote = match (command, &response) {
        (Command::Acquire { .. }, Response::Int(1)) => Some(NodeVote::Granted),
        (Command::AcquireFenced { .. }, Response::Array(items)) if matches!(items.as_slice(), [Response::Int(1), Response::Int(c)] if *c >= 0) => {
            Some(NodeVote::Granted)
        }
        (Command::Acquire { .. } | Command::AcquireFenced { .. }, Response::Data(holder)) => {
            Some(NodeVote::HeldByOther(Some(holder.clone())))
        }
        (Command::StoreToken { .. }, Response::Int(1)) => Some(NodeVote::Granted),
        (Command::StoreToken { .. }, Response::Int(0)) => Some(NodeVote::HeldByOther(None)),
        (Command::StoreToken { .. }, Response::Int(-1)) => Some(NodeVote::Missing),
        (Command::Proclaim { .. }, Response::Int(1)) => Some(NodeVote::Granted),
        // 0: the key holds another value or none; -1: a higher term is stored.
        (Command::Proclaim { .. }, Response::Int(0 | -1)) => Some(NodeVote::HeldByOther(None)),
        (Command::Extend { .. } | Command::Restore { .. }, Response::Int(1)) => {
            Some(NodeVote::Granted)
        }
        (Command::Extend { .. }, Response::Int(-1)) if planted!(ExtendMissingAsOurs) => {
            Some(NodeVote::Granted)
        }
        (Command::Extend { .. }, Response::Int(-1)) => Some(NodeVote::Missing),
        (Command::Restore { .. }, Response::Int(2)) => Some(NodeVote::Restored),
        (
            Command::Extend { .. }
            | Command::Restore { .. }
            | Command::Release
            | Command::Withdraw
            | Command::Leave,
            Response::Int(0),
        ) => Some(NodeVote::HeldByOther(None)),
        // 2: released, but the server refused the notice (PUBLISH).
        (Command::Release | Command::Withdraw | Command::Leave, Response::Int(1 | 2)) => {
            Some(NodeVote::Granted)
        }
        // 3: released, and a waiter of another client may be marked.
        (Command::Release, Response::Int(3)) => Some(NodeVote::Granted),
        (Command::Release | Command::Withdraw | Command::Leave, Response::Int(-1)) => {
            Some(NodeVote::Missing)
        }
        _ => None,
    };
    vote.unwrap_or_else(|| {
        NodeVote::Failed(NodeError::new(
            NodeErrorKind::Protocol,
            format!(
                "the {} script never returns {response:?}; is this a Redis server?",
                command.name()
            ),
        ))
    })
}

/// As [`interpret`], for an acquire of a lock of `kind`: a fair acquire
/// may also answer that the key is free but another waiter is ahead of us
/// in the master's queue (`{0, position, ticket}`, position from 1), a no
/// without a holder.
pub(crate) fn interpret_acquire(
    kind: &LockKind,
    command: Command,
    native: Option<Native>,
    result: Result<Response, NodeError>,
) -> NodeVote {
    match (kind, command, native, &result) {
        (LockKind::Fair { .. }, Command::Acquire { .. }, None, Ok(Response::Array(items))) if matches!(items.as_slice(), [Response::Int(0), Response::Int(p), Response::Int(score)] if *p >= 1 && *score >= 0) => {
            NodeVote::HeldByOther(None)
        }
        (
            LockKind::Semaphore { .. },
            Command::Acquire { .. } | Command::AcquireFenced { .. },
            None,
            Ok(_),
        ) if crate::semaphore::granted_slot(&result).is_some() => NodeVote::Granted,
        _ => interpret(command, native, result),
    }
}

/// As [`interpret`], for an extend, whose plain command answers with the
/// value it found: a yes only when that is `ours`.
pub(crate) fn interpret_extend(
    command: Command,
    native: Option<Native>,
    result: Result<Response, NodeError>,
    ours: &[u8],
) -> NodeVote {
    match (native, result) {
        (Some(Native::SetIfEqGet), Ok(Response::Data(held))) if held == ours => NodeVote::Granted,
        (Some(Native::SetIfEqGet), Ok(Response::Data(_))) => NodeVote::HeldByOther(None),
        (native, result) => interpret(command, native, result),
    }
}

/// As [`interpret`], for a plain command.
fn interpret_native(command: Command, native: Native, response: Response) -> NodeVote {
    let vote = match (command, native, &response) {
        (Command::Acquire { .. }, Native::SetNxGet, Response::Nil) => Some(NodeVote::Granted),
        // The whole value comes back; keep what the script would keep.
        (Command::Acquire { .. }, Native::SetNxGet, Response::Data(holder)) => Some(
            NodeVote::HeldByOther(Some(holder[..holder.len().min(64)].to_vec())),
        ),
        (Command::Release | Command::Withdraw, Native::DelIfEq, Response::Int(1)) => {
            Some(NodeVote::Granted)
        }
        (Command::Release | Command::Withdraw, Native::DelIfEq, Response::Int(0)) => {
            Some(NodeVote::NotOurs)
        }
        // `[deleted, [key, waiters, others]]`, and after a notice what it
        // did. Not deleted, the key read next says why, as the script does.
        (Command::Release, Native::DelIfEqMarks, Response::Array(items)) => {
            match items.as_slice() {
                [Response::Int(1), read, notice @ ..]
                    if is_read(read) && matches!(notice, [] | [Response::Int(0 | 1)]) =>
                {
                    Some(NodeVote::Granted)
                }
                [Response::Int(0), read] if is_read(read) => Some(match read {
                    Response::Array(read) if read[0] == Response::Nil => NodeVote::Missing,
                    Response::Array(_) => NodeVote::HeldByOther(None),
                    _ => NodeVote::NotOurs,
                }),
                _ => None,
            }
        }
        // (Its `Data` answers are read by `interpret_extend`.)
        (Command::Extend { .. }, Native::SetIfEqGet, Response::Nil) => Some(NodeVote::Missing),
        _ => None,
    };
    vote.unwrap_or_else(|| {
        NodeVote::Failed(NodeError::new(
            NodeErrorKind::Protocol,
            format!(
                "{} never answers {response:?} to a {}",
                native.name(),
                command.name()
            ),
        ))
    })
}

/// What `MGET` of the lock key and the two marks answers (each nil or a
/// string), or its refusal in its place.
fn is_read(response: &Response) -> bool {
    let string = |response: &Response| matches!(response, Response::Nil | Response::Data(_));
    match response {
        Response::Array(read) => read.len() == 3 && read.iter().all(string),
        Response::Other(_) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn script(command: Command, response: Response) -> NodeVote {
        interpret(command, None, Ok(response))
    }

    fn is_protocol_error(vote: &NodeVote) -> bool {
        matches!(vote, NodeVote::Failed(error) if error.kind == NodeErrorKind::Protocol)
    }

    #[test]
    fn a_token_store_reads_stored_another_owner_and_missing_apart() {
        let store = Command::StoreToken { token: 7 };
        assert_eq!(script(store, Response::Int(1)), NodeVote::Granted);
        assert_eq!(script(store, Response::Int(0)), NodeVote::HeldByOther(None));
        assert_eq!(script(store, Response::Int(-1)), NodeVote::Missing);
        assert!(is_protocol_error(&script(store, Response::Int(3))));
    }

    #[test]
    fn a_restore_that_set_the_key_again_is_restored_not_merely_granted() {
        let restore = Command::Restore { ttl: Ttl(1_000) };
        assert_eq!(script(restore, Response::Int(2)), NodeVote::Restored);
        assert_eq!(script(restore, Response::Int(1)), NodeVote::Granted);
        assert_eq!(
            script(restore, Response::Int(0)),
            NodeVote::HeldByOther(None)
        );
        // An extend never sets a missing key, so it never answers 2.
        let extend = Command::Extend { ttl: Ttl(1_000) };
        assert!(is_protocol_error(&script(extend, Response::Int(2))));
    }

    #[test]
    fn a_fenced_grant_needs_a_counter_that_is_not_negative() {
        let acquire = Command::AcquireFenced { ttl: Ttl(1_000) };
        let reply = |counter| Response::Array(vec![Response::Int(1), Response::Int(counter)]);
        assert_eq!(script(acquire, reply(0)), NodeVote::Granted);
        assert_eq!(script(acquire, reply(41)), NodeVote::Granted);
        assert!(is_protocol_error(&script(acquire, reply(-1))));
        let no_counter = Response::Array(vec![Response::Int(1)]);
        assert!(is_protocol_error(&script(acquire, no_counter)));
        let not_granted = Response::Array(vec![Response::Int(0), Response::Int(3)]);
        assert!(is_protocol_error(&script(acquire, not_granted)));
    }
}
