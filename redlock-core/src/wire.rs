//! What the state machines ask the caller to send, and what the caller feeds back.

use std::fmt;
use std::time::{Duration, Instant};

use crate::{AttemptId, Key, LockValue, NodeId, Ttl, scripts};

/// One script call to one node, emitted by a state machine's `poll_request`.
///
/// The caller runs [`Command::script`] on node [`Request::node`] with
/// `KEYS = `[`Request::keys`] and `ARGV = [value]` followed by
/// [`Request::argument`] when there is one, and feeds the result back as a
/// [`Reply`] with the same `attempt` and `node`. It need not wait past `deadline`: the state machine counts a
/// node that has not answered by then as timed out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The round this request belongs to; copy it into the reply.
    pub attempt: AttemptId,
    /// The node to send it to.
    pub node: NodeId,
    /// The lock key.
    pub key: Key,
    /// Our lock value.
    pub value: LockValue,
    /// The resource's fencing counter, for the fencing commands.
    pub fencing_key: Option<Key>,
    /// What to run.
    pub command: Command,
    /// When the state machine stops waiting for this node.
    pub deadline: Instant,
}

impl Request {
    /// The script's `KEYS`: the lock key, then the fencing counter when the
    /// command uses it.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &[u8]> {
        let fencing = match self.command {
            Command::AcquireFenced { .. } | Command::StoreToken { .. } => self.fencing_key.as_ref(),
            _ => None,
        };
        let count = 1 + usize::from(fencing.is_some());
        [Some(&self.key), fencing]
            .into_iter()
            .take(count)
            .map(|key| key.map_or(&[][..], Key::as_bytes))
    }

    /// The script's `ARGV[2]`, after the value: the TTL in milliseconds or the
    /// fencing token.
    pub fn argument(&self) -> Option<u64> {
        match self.command {
            Command::Acquire { ttl } | Command::AcquireFenced { ttl } | Command::Extend { ttl } => {
                Some(ttl.as_millis())
            }
            Command::StoreToken { token } => Some(token),
            Command::Release => None,
        }
    }
}

/// The operation a [`Request`] asks for. Each is one script in [`scripts`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Command {
    /// Set the key to our value if absent ([`scripts::ACQUIRE`]).
    Acquire {
        /// The TTL to set.
        ttl: Ttl,
    },
    /// Reset the TTL of our key ([`scripts::EXTEND`]).
    Extend {
        /// The new TTL.
        ttl: Ttl,
    },
    /// Delete our key ([`scripts::RELEASE`]).
    Release,
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
}

impl Command {
    /// The Lua source of the script to run.
    pub fn script(&self) -> &'static str {
        match self {
            Command::Acquire { .. } => scripts::ACQUIRE,
            Command::Extend { .. } => scripts::EXTEND,
            Command::Release => scripts::RELEASE,
            Command::AcquireFenced { .. } => scripts::ACQUIRE_FENCED,
            Command::StoreToken { .. } => scripts::STORE_TOKEN,
        }
    }

    /// The TTL argument (`ARGV[2]`), for the commands that take one.
    pub fn ttl(&self) -> Option<Ttl> {
        match self {
            Command::Acquire { ttl } | Command::AcquireFenced { ttl } | Command::Extend { ttl } => {
                Some(*ttl)
            }
            Command::Release | Command::StoreToken { .. } => None,
        }
    }

    /// Every script a state machine may ask for, to load when connecting.
    pub const SCRIPTS: [&'static str; 5] = [
        scripts::ACQUIRE,
        scripts::EXTEND,
        scripts::RELEASE,
        scripts::ACQUIRE_FENCED,
        scripts::STORE_TOKEN,
    ];

    /// A short name for logs: `acquire`, `extend`, `release`.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Acquire { .. } => "acquire",
            Command::Extend { .. } => "extend",
            Command::Release => "release",
            Command::AcquireFenced { .. } => "acquire (fenced)",
            Command::StoreToken { .. } => "store token",
        }
    }
}

/// A node's answer to a [`Request`], fed back through `handle_reply`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// Copied from the request.
    pub attempt: AttemptId,
    /// Copied from the request.
    pub node: NodeId,
    /// What the node said, or why it could not be asked.
    pub result: Result<Response, NodeError>,
}

impl Reply {
    /// The reply to `request` carrying `result`.
    pub fn to(request: &Request, result: Result<Response, NodeError>) -> Self {
        Self {
            attempt: request.attempt,
            node: request.node,
            result,
        }
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

    /// The node did not answer within the per-node timeout.
    pub fn timeout(after: Duration) -> Self {
        Self::new(
            NodeErrorKind::Timeout,
            format!("no answer within {}", crate::error::Millis(after)),
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
            NodeErrorKind::Protocol => write!(f, "unexpected answer: {}", self.detail),
        }
    }
}

impl std::error::Error for NodeError {}

/// The classes of node failure, so callers can react without parsing text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NodeErrorKind {
    /// No answer within the per-node timeout (node down, paused or slow).
    Timeout,
    /// No connection: refused, reset, DNS failure, TLS failure.
    Connection,
    /// The node refused our credentials (wrong password, unknown ACL user, or a
    /// password is required).
    Auth,
    /// The key exists and holds another type than a string.
    WrongType,
    /// The node answered with an error (out of memory, read-only replica,
    /// loading, scripts disabled, ...).
    Server,
    /// The node answered something that is not a valid reply to the script.
    Protocol,
}
