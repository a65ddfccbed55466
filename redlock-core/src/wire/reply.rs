//! What comes back: a node's answer, how a `WAITAOF` behind a batch
//! judges it, and the raw value before interpretation.

use std::fmt;
use std::time::Instant;

use super::{Argument, Form, Request, interpret};
use crate::native::Native;
use crate::{Key, NodeId, RoundId};

use crate::NodeError;
#[cfg(doc)]
use crate::NodeErrorKind;

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
