//! What a node's answer means: its errors ([`NodeError`]) and, read for
//! the command that was sent, its vote ([`NodeVote`]).

use std::fmt;
use std::time::Duration;

use crate::native::Native;
use crate::{Command, LockKind, Response};

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

    /// An error of `kind` whose detail is a node's (or a client library's)
    /// words, made fit for a one-line report: without the noise Redis
    /// appends to an error raised inside a script (` script: <sha1>, on
    /// @user_script:1.`, the `user_script:1: ` prefix), on one line, and cut
    /// at 160 characters.
    ///
    /// ```
    /// use redlock_core::{NodeError, NodeErrorKind};
    /// let error = NodeError::tidied(
    ///     NodeErrorKind::WrongType,
    ///     "WRONGTYPE Operation against a key holding the wrong kind of value script: \
    ///      30066d0618efaa6f4d54a3824876d45cb637d4f7, on @user_script:1.",
    /// );
    /// assert_eq!(error.detail, "WRONGTYPE Operation against a key holding the wrong kind of value");
    /// ```
    pub fn tidied(kind: NodeErrorKind, detail: &str) -> Self {
        Self::new(kind, tidy(detail))
    }

    /// Not sent: the node is known slow (`NodeHealth`).
    pub fn slow() -> Self {
        Self::new(
            NodeErrorKind::Slow,
            format!(
                "not asked: {} requests in a row went unanswered; probed until it answers",
                crate::SLOW_AFTER
            ),
        )
    }

    /// Not counted: the server restarted under the client (its run id
    /// changed) and its vote counts again only once `left` has passed, when
    /// any lock it granted before and may have lost has expired.
    pub fn restarted(left: Duration) -> Self {
        Self::new(
            NodeErrorKind::Restarted,
            format!(
                "restarted (its run id changed): its votes count again in {}, once any lock \
                 it granted before has expired",
                crate::limits::Millis(left)
            ),
        )
    }

    /// Not counted: the node did what was asked, but its append-only file
    /// did not have the write when `WAITAOF` answered (`detail` says what
    /// it answered; [`Config::wait_for_aof`](crate::Config::wait_for_aof)).
    pub fn not_on_disk(detail: impl Into<String>) -> Self {
        Self::new(NodeErrorKind::NotOnDisk, detail)
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
            NodeErrorKind::Restarted => write!(f, "not counted: {}", self.detail),
            NodeErrorKind::NotOnDisk => {
                write!(f, "not counted, not in its AOF: {}", self.detail)
            }
            NodeErrorKind::NoScript => write!(f, "script not loaded: {}", self.detail),
        }
    }
}

impl std::error::Error for NodeError {}

impl NodeErrorKind {
    /// The class of an error reply from a node, by its error code (the
    /// reply's first word), exactly: `WRONGTYPE` is [`WrongType`](Self::WrongType),
    /// `NOAUTH` and `WRONGPASS` are [`Auth`](Self::Auth), `NOPERM` is
    /// [`NoPermission`](Self::NoPermission), `NOSCRIPT` is
    /// [`NoScript`](Self::NoScript), any other code is
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
            "NOSCRIPT" => NodeErrorKind::NoScript,
            _ => NodeErrorKind::Server,
        }
    }

    /// A node that does not answer: [`Timeout`](Self::Timeout) (this
    /// request had no answer in time) or [`Slow`](Self::Slow) (not sent,
    /// since earlier ones had none). A paused or partitioned node shows as
    /// the first and then the second; code that reacts to such a node
    /// asks this rather than matching `Timeout` alone.
    ///
    /// ```
    /// use redlock_core::NodeErrorKind;
    /// assert!(NodeErrorKind::Timeout.is_unresponsive());
    /// assert!(NodeErrorKind::Slow.is_unresponsive());
    /// assert!(!NodeErrorKind::Connection.is_unresponsive());
    /// ```
    pub fn is_unresponsive(self) -> bool {
        matches!(self, NodeErrorKind::Timeout | NodeErrorKind::Slow)
    }
}

/// The classes of node failure, so callers can react without parsing text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NodeErrorKind {
    /// No answer within the per-node timeout (node down, paused or slow).
    /// Once several in a row went unanswered, the node's next votes are
    /// [`Slow`](Self::Slow) instead: [`is_unresponsive`](Self::is_unresponsive)
    /// covers both.
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
    /// them ([`Operation::release`](crate::Operation::release)).
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
    /// (`NodeHealth`). Like [`Timeout`](Self::Timeout),
    /// [`is_unresponsive`](Self::is_unresponsive).
    Slow,
    /// Not counted: the server restarted while the client was connected
    /// (its `run_id` changed), so it may have lost locks it granted and
    /// could grant them again while their holders still count it. Its votes
    /// count again once the longest TTL the client knows of has passed
    /// (antirez's delayed restart, done by the client). Releases and reads
    /// still go to it.
    Restarted,
    /// Not counted: the node did the write, but its append-only file did
    /// not have it within the node timeout (`WAITAOF` answered that no
    /// local fsync had it, or failed), with
    /// [`Config::wait_for_aof`](crate::Config::wait_for_aof) on. A crash
    /// now could lose what it granted.
    NotOnDisk,
    /// The node did not know the script sent by its digest (`NOSCRIPT`:
    /// its script cache was flushed, or it restarted behind a proxy that
    /// kept the connection). The [`Client`](crate::Client) sends such a
    /// request again in full, unless a later request for the same lock key
    /// went to the node meanwhile: the repeat would run after it, out of
    /// order. An operation sees this kind only then.
    NoScript,
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
    /// confirmed the lock (see [`Operation::extend`](crate::Operation::extend)).
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
    /// `NodeHealth`), so nothing of ours is there.
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
        // A counter that is not negative, then the clock (the models leave it out).
        (Command::AcquireFenced { .. }, Response::Array(items)) if matches!(items.as_slice(), [Response::Int(1), rest @ ..] if crate::ops::acquire::floor(rest).is_some()) => {
            Some(NodeVote::Granted)
        }
        (Command::Acquire { .. } | Command::AcquireFenced { .. }, Response::Data(holder)) => Some(
            NodeVote::HeldByOther(Some(crate::waited::unmarked(holder).to_vec())),
        ),
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
        ) if crate::ops::semaphore::granted_slot(&result).is_some() => NodeVote::Granted,
        (
            LockKind::Semaphore { .. },
            Command::Acquire { .. } | Command::AcquireFenced { .. },
            None,
            Ok(_),
        ) if crate::ops::semaphore::refused(&result).is_some() => {
            let theirs = crate::ops::semaphore::refused(&result).unwrap_or_default();
            NodeVote::Failed(NodeError::new(
                NodeErrorKind::Server,
                format!("refused: it keeps {theirs} permits for this semaphore"),
            ))
        }
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
        (Command::Acquire { .. }, Native::SetNxGet, Response::Data(holder)) => {
            let holder = crate::waited::unmarked(holder);
            Some(NodeVote::HeldByOther(Some(
                holder[..holder.len().min(64)].to_vec(),
            )))
        }
        (Command::Release | Command::Withdraw, Native::DelIfEq, Response::Int(1)) => {
            Some(NodeVote::Granted)
        }
        (Command::Release | Command::Withdraw, Native::DelIfEq, Response::Int(0)) => {
            Some(NodeVote::NotOurs)
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

/// A node's words fit for a one-line report: without the script noise Redis
/// appends to errors raised inside a script (` script: <sha1>, on
/// @user_script:1.`, the `user_script:1: ` prefix), on one line, and cut at
/// [`DETAIL_MAX`] characters ([`NodeError::tidied`]).
fn tidy(detail: &str) -> String {
    let mut text = detail.to_owned();
    if let Some(at) = text.find(" script: ") {
        let sha = &text[at + " script: ".len()..];
        if sha.len() >= 40 && sha.as_bytes()[..40].iter().all(u8::is_ascii_hexdigit) {
            text.truncate(at);
        }
    }
    // "ERR user_script:1: Script attempted ...", and any other script
    // position ("@user_script:12: ").
    while let Some(at) = text.find("user_script:") {
        let start = if text[..at].ends_with('@') {
            at - 1
        } else {
            at
        };
        let rest = &text[at + "user_script:".len()..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let mut end = at + "user_script:".len() + digits;
        for tail in [": ", ":", "."] {
            if text[end..].starts_with(tail) {
                end += tail.len();
                break;
            }
        }
        text.replace_range(start..end, "");
    }
    let mut text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.chars().count() > DETAIL_MAX {
        text = text.chars().take(DETAIL_MAX - 1).collect();
        text.push('…');
    }
    text
}

/// The longest node error detail kept, in characters.
const DETAIL_MAX: usize = 160;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Ttl;

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
        let with_clock = |clock| {
            Response::Array(vec![
                Response::Int(1),
                Response::Int(41),
                Response::Int(clock),
            ])
        };
        assert_eq!(
            script(acquire, with_clock(1_795_938_092_246_264)),
            NodeVote::Granted
        );
        assert!(is_protocol_error(&script(acquire, with_clock(-1))));
        let no_counter = Response::Array(vec![Response::Int(1)]);
        assert!(is_protocol_error(&script(acquire, no_counter)));
        let not_granted = Response::Array(vec![Response::Int(0), Response::Int(3)]);
        assert!(is_protocol_error(&script(acquire, not_granted)));
    }
}
