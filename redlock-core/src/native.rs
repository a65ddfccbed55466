//! What each node's server can do, and the one place that picks a plain
//! command over a script for a request.
//!
//! Newer servers have single commands for some of the scripts' jobs. A plain
//! command costs the server a fraction of a script call (Valkey 9.1.2, by
//! `INFO commandstats`: 0.29 us per `DELIFEQ` against 2.96 us per `EVALSHA`
//! of [`scripts::RELEASE`](crate::scripts::RELEASE)), and needs no script
//! cache. The adapter reads a node's facts once per connection
//! ([`NodeFacts::from_info`] on its `INFO server`, again after every
//! reconnect, since the server may have been upgraded or replaced) and asks
//! [`Request::call`] what to send; the core decides, and reads the reply
//! knowing what was sent ([`Reply::via`]).
//!
//! | request | native form | where |
//! |---|---|---|
//! | exclusive acquire | `SET key value NX PX ttl GET` | Redis >= 7.0, Valkey |
//! | withdraw (no notice) | `DELIFEQ key value` | Valkey >= 9.0 |
//! | exclusive release (notices on) | `DELIFEQ key value` and `MGET` of the key and the waiters' marks, one pipeline; `PUBLISH` after it only when another client's waiter is marked | Valkey >= 9.0 |
//! | exclusive extend | `SET key value IFEQ value PX ttl GET` | Valkey >= 9.0 |
//!
//! The exclusive release is two commands where the script is one, and still
//! one round trip: on Valkey 9.1.2 `DELIFEQ` and `MGET` of two keys cost the
//! server 0.05 and 0.09 us a call (`INFO commandstats` under `redis-benchmark
//! -P 16`), the release script 1.92 us. It decides as the script does, from what the pipeline read
//! ([`Request::notice_after`]), and only the caller can then publish: one
//! more round trip when another client waits, none when nobody does.
//!
//! Everything else stays a script:
//! - the other kinds' releases must publish a notice only when they deleted
//!   our value, which no plain command does in one step (with notices off,
//!   [`Settings::release_command`](crate::Settings::release_command) is a
//!   withdraw, which goes native);
//! - a restore sets a missing key again ([`Command::Restore`]), which
//!   `SET ... IFEQ` cannot do: it sets nothing on a missing key (an extend
//!   must not either, so it goes native); Redis >= 8.4 has `IFEQ` too, but no
//!   server at hand had it to check that it combines with `GET`;
//! - `DELEX key IFEQ value` (Redis >= 8.4, Valkey >= 9.2) is not used: no
//!   server at hand had it to check its replies against;
//! - fenced locks and the other lock kinds touch several keys.

use std::fmt;

use crate::wire::Argument;
use crate::{Command, LockKind, Reply, Request, Response};

/// Which server a node runs, as its `INFO server` says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Server {
    /// Redis (`redis_version`, no `server_name:valkey`).
    Redis,
    /// Valkey (`server_name:valkey`, `valkey_version`).
    Valkey,
    /// Not known: `INFO` was refused or said neither. Only scripts are sent.
    #[default]
    Unknown,
}

/// A server version, `major.minor.patch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version(pub u16, pub u16, pub u16);

impl Version {
    /// Parses `7.0.15` (missing parts are 0); `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        let mut parts = text.trim().split('.').map(|part| part.parse::<u16>());
        let major = parts.next()?.ok()?;
        let minor = parts.next().unwrap_or(Ok(0)).ok()?;
        let patch = parts.next().unwrap_or(Ok(0)).ok()?;
        Some(Self(major, minor, patch))
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// What one node is, as found when its connection was made: the facts the
/// core picks each request's command by ([`Request::call`]).
///
/// The default is [`Server::Unknown`]: scripts only, which every supported
/// server runs.
///
/// ```
/// use redlock_core::{NodeFacts, Server, Version};
///
/// let valkey = NodeFacts::from_info(
///     "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:9.1.2\r\n",
/// );
/// assert_eq!(valkey, NodeFacts::new(Server::Valkey, Version(9, 1, 2)));
/// assert!(valkey.has_set_nx_get() && valkey.has_delifeq());
/// let redis = NodeFacts::from_info("# Server\r\nredis_version:7.0.15\r\n");
/// assert!(redis.has_set_nx_get() && !redis.has_delifeq());
/// assert!(!NodeFacts::default().has_set_nx_get());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NodeFacts {
    server: Server,
    version: Option<Version>,
}

impl NodeFacts {
    /// A node running `server` at `version`.
    pub fn new(server: Server, version: Version) -> Self {
        Self {
            server,
            version: Some(version),
        }
    }

    /// The facts in an `INFO server` reply. Valkey also reports a
    /// `redis_version` (the Redis version it is compatible with), so
    /// `server_name:valkey` is looked for first.
    pub fn from_info(info: &str) -> Self {
        let field = |name: &str| {
            info.lines()
                .find_map(|line| line.trim().strip_prefix(name)?.strip_prefix(':'))
        };
        let (server, version) = if field("server_name") == Some("valkey") {
            (Server::Valkey, field("valkey_version"))
        } else if let Some(version) = field("redis_version") {
            (Server::Redis, Some(version))
        } else {
            (Server::Unknown, None)
        };
        match version.and_then(Version::parse) {
            Some(version) => Self::new(server, version),
            None => Self::default(),
        }
    }

    /// The server.
    pub fn server(&self) -> Server {
        self.server
    }

    /// Its version, if known.
    pub fn version(&self) -> Option<Version> {
        self.version
    }

    /// What every one of several servers can do, for a node made of many
    /// (the masters of a Redis Cluster): the lowest version when they all
    /// run the same server, else unknown (scripts only). A command is then
    /// sent as a plain command only if every shard has it.
    ///
    /// ```
    /// use redlock_core::{NodeFacts, Server, Version};
    /// let old = NodeFacts::new(Server::Valkey, Version(8, 1, 0));
    /// let new = NodeFacts::new(Server::Valkey, Version(9, 1, 2));
    /// assert_eq!(NodeFacts::lowest([new, old]), old);
    /// let redis = NodeFacts::new(Server::Redis, Version(7, 0, 15));
    /// assert_eq!(NodeFacts::lowest([new, redis]), NodeFacts::default());
    /// assert_eq!(NodeFacts::lowest([]), NodeFacts::default());
    /// ```
    pub fn lowest(facts: impl IntoIterator<Item = NodeFacts>) -> Self {
        let mut facts = facts.into_iter();
        let Some(first) = facts.next() else {
            return Self::default();
        };
        facts.fold(first, |lowest, next| {
            if lowest.server != next.server {
                return Self::default();
            }
            match (lowest.version, next.version) {
                (Some(a), Some(b)) => Self::new(lowest.server, a.min(b)),
                _ => Self::default(),
            }
        })
    }

    fn at_least(&self, server: Server, version: Version) -> bool {
        self.server == server && self.version.is_some_and(|v| v >= version)
    }

    /// `SET key value NX PX ttl GET` works: Redis >= 7.0 (6.2 refuses `NX`
    /// with `GET`), and every Valkey (7.2 and later).
    pub fn has_set_nx_get(&self) -> bool {
        self.at_least(Server::Redis, Version(7, 0, 0))
            || self.at_least(Server::Valkey, Version(7, 2, 0))
    }

    /// `DELIFEQ key value` exists: Valkey >= 9.0.
    pub fn has_delifeq(&self) -> bool {
        self.at_least(Server::Valkey, Version(9, 0, 0))
    }

    /// `SET key value IFEQ value PX ttl GET` works: Valkey >= 9.0 (checked
    /// on 9.1.2; `IFEQ` came in 8.1).
    pub fn has_set_ifeq_get(&self) -> bool {
        self.at_least(Server::Valkey, Version(9, 0, 0))
    }
}

impl fmt::Display for NodeFacts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.server, self.version) {
            (Server::Redis, Some(v)) => write!(f, "Redis {v}"),
            (Server::Valkey, Some(v)) => write!(f, "Valkey {v}"),
            _ => f.write_str("unknown server"),
        }
    }
}

/// A plain command the core may send instead of a script.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Native {
    /// `SET key value NX PX ttl GET`: nil when the key was absent and is now
    /// ours; the holder's value (whole) when it is held; `WRONGTYPE` when it
    /// holds another type.
    SetNxGet,
    /// `DELIFEQ key value`: `1` when our value was there and is deleted; `0`
    /// when the key is absent or holds another value (not told apart);
    /// `WRONGTYPE` when it holds another type.
    DelIfEq,
    /// `DELIFEQ key value`, then `MGET key waiters others` (the lock key
    /// and the marks, [`scripts::MARK_WAITING`](crate::scripts::MARK_WAITING))
    /// in the same pipeline, for an exclusive lock's release: `[deleted,
    /// [key, waiters, others]]`, `deleted` as [`DelIfEq`](Self::DelIfEq)
    /// answers, a key absent (or of another type) nil; `WRONGTYPE` when the
    /// lock key holds another type. The key read after a `0` tells a key
    /// held by another value (or set again meanwhile) from one that is gone,
    /// as the release script does. Where `MGET` alone is refused (an ACL
    /// user without rights on the marks, `NOPERM`), the caller puts its
    /// error in its place, as [`Response::Other`]: marks that cannot be
    /// read publish. Where it deleted our value and a waiter of another
    /// client may be marked ([`Request::notice_after`]), the caller then
    /// publishes the release notice and appends what that did: `1`
    /// published, `0` not (refused, or the connection failed).
    DelIfEqMarks,
    /// `SET key value IFEQ value PX ttl GET`: the value that was there; it is
    /// ours exactly when the TTL was set. Nil when the key is absent (nothing
    /// set); `WRONGTYPE` when it holds another type.
    SetIfEqGet,
}

impl Native {
    /// The command's name, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            Native::SetNxGet => "SET",
            Native::DelIfEq | Native::DelIfEqMarks => "DELIFEQ",
            Native::SetIfEqGet => "SET",
        }
    }

    /// The command's words for `request`, name first.
    pub fn words<'a>(&self, request: &'a Request) -> Vec<Argument<'a>> {
        let key = Argument::Bytes(request.key().as_bytes());
        let value = Argument::Bytes(request.value.as_bytes());
        match self {
            Native::SetNxGet => {
                let ttl = request
                    .command
                    .ttl()
                    // `Request::call` picks SetNxGet for acquires only.
                    .expect("SET NX PX GET is only chosen for an acquire, which has a TTL");
                vec![
                    Argument::Bytes(b"SET"),
                    key,
                    value,
                    Argument::Bytes(b"NX"),
                    Argument::Bytes(b"PX"),
                    Argument::Int(ttl.as_millis()),
                    Argument::Bytes(b"GET"),
                ]
            }
            Native::DelIfEq | Native::DelIfEqMarks => vec![Argument::Bytes(b"DELIFEQ"), key, value],
            Native::SetIfEqGet => {
                let ttl = request
                    .command
                    .ttl()
                    .expect("SET IFEQ PX GET is only chosen for an extend, which has a TTL");
                vec![
                    Argument::Bytes(b"SET"),
                    key,
                    value,
                    Argument::Bytes(b"IFEQ"),
                    value,
                    Argument::Bytes(b"PX"),
                    Argument::Int(ttl.as_millis()),
                    Argument::Bytes(b"GET"),
                ]
            }
        }
    }
}

impl Native {
    /// The command sent right after [`words`](Self::words) in the same
    /// pipeline, name first, if any: `MGET` of the lock key and the marks
    /// for [`DelIfEqMarks`](Self::DelIfEqMarks).
    pub fn pipelined<'a>(&self, request: &'a Request) -> Option<Vec<Argument<'a>>> {
        match self {
            Native::DelIfEqMarks => Some(
                std::iter::once(Argument::Bytes(b"MGET"))
                    .chain(
                        request
                            .keys
                            .iter()
                            .map(|key| Argument::Bytes(key.as_bytes())),
                    )
                    .collect(),
            ),
            _ => None,
        }
    }
}

/// What to send for one request on one node: its script, or a plain
/// command ([`Request::call`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    /// `EVALSHA` of this script with the request's keys and
    /// [`arguments`](Request::arguments).
    Script(&'static str),
    /// This command, with its [`words`](Native::words).
    Native(Native),
}

impl Request {
    /// What to send to this request's node, whose server is `facts`: the
    /// core's one choice between a script and a plain command (see the
    /// table in [`native`](crate::native)). Feed the answer back with
    /// [`Reply::via`].
    pub fn call(&self, facts: &NodeFacts) -> Call {
        if !self.native {
            return Call::Script(self.script());
        }
        match (&self.kind, self.command) {
            (LockKind::Exclusive, Command::Acquire { .. }) if facts.has_set_nx_get() => {
                Call::Native(Native::SetNxGet)
            }
            (LockKind::Exclusive, Command::Extend { .. }) if facts.has_set_ifeq_get() => {
                Call::Native(Native::SetIfEqGet)
            }
            (LockKind::Exclusive, Command::Release)
                if facts.has_delifeq() && self.names_marks() =>
            {
                Call::Native(Native::DelIfEqMarks)
            }
            // The write lock's release script is the exclusive one: it
            // deletes the lock key alone.
            (LockKind::Exclusive | LockKind::Write { .. }, Command::Withdraw)
                if facts.has_delifeq() =>
            {
                Call::Native(Native::DelIfEq)
            }
            _ => Call::Script(self.script()),
        }
    }

    /// The channel to publish the release notice on after `response`, the
    /// answer of this request's node to it sent as
    /// [`Native::DelIfEqMarks`] (without what is appended after a notice):
    /// `Some` when it deleted our value and a waiter of another client may
    /// be marked there, as [`scripts::RELEASE_IF_WAITED`](crate::scripts::RELEASE_IF_WAITED)
    /// decides. The caller publishes an empty message on it (`PUBLISH
    /// channel ""`) and appends `1` to the answer if that succeeded, `0` if
    /// not, before it feeds the reply back.
    ///
    /// ```
    /// use std::time::Instant;
    /// use redlock_core::{Config, LockValue, Machine, Release, Response, RoundId};
    ///
    /// let settings = Config::new(["redis://127.0.0.1:6379"])
    ///     .validate()
    ///     .unwrap()
    ///     .with_client_tag(LockValue::from_string("me"));
    /// let (key, ours) = (settings.key(b"job"), LockValue::from_string("ours"));
    /// let mut release = Release::new(&settings, key, ours, RoundId(1), Instant::now());
    /// let request = release.poll_request().unwrap();
    /// let mark = |text: &str| Response::Data(text.into());
    /// // Deleted; then the key read gone, and the two marks.
    /// let read = |waiters, others| {
    ///     let read = vec![Response::Nil, waiters, others];
    ///     Response::Array(vec![Response::Int(1), Response::Array(read)])
    /// };
    /// // Nobody marked, or only our own client's waiters: no notice.
    /// assert_eq!(request.notice_after(&read(Response::Nil, Response::Nil)), None);
    /// assert_eq!(request.notice_after(&read(mark("me"), Response::Nil)), None);
    /// // Another client's waiter: a notice on the lock's channel.
    /// let channel = settings.release_channel(request.key());
    /// assert_eq!(request.notice_after(&read(mark("you"), Response::Nil)), Some(channel.clone()));
    /// assert_eq!(request.notice_after(&read(mark("me"), mark("1"))), Some(channel));
    /// ```
    pub fn notice_after(&self, response: &Response) -> Option<crate::Key> {
        let Response::Array(items) = response else {
            return None;
        };
        if !self.names_marks() {
            return None;
        }
        match items.as_slice() {
            [Response::Int(1), read] if others_may_wait(self.client.as_ref(), read) => {
                Some(crate::config::release_channel(self.key()))
            }
            _ => None,
        }
    }

    /// Whether this is an exclusive lock's release that names the waiters'
    /// marks next to its key (`[key, waiters, others]`,
    /// [`Settings::release_keys`](crate::Settings)): they are named only
    /// where they share the key's slot. Such a release may go plain
    /// ([`Native::DelIfEqMarks`]), and is sent again without its marks to
    /// a node that refuses them ([`Release`](crate::Release)).
    pub(crate) fn names_marks(&self) -> bool {
        self.kind == LockKind::Exclusive && self.command == Command::Release && self.keys.len() == 3
    }
}

/// Whether the marks a plain release read (`[key, waiters, others]`, the
/// answer of `MGET`) may stand for a waiter of another client than
/// `client`, as the release script decides: not when nobody is marked,
/// nor when the mark is our client's and the others mark is absent.
/// Anything else may: marks that could not be read (an error in their
/// place), an answer of another shape.
pub(crate) fn others_may_wait(client: Option<&crate::LockValue>, read: &Response) -> bool {
    let Response::Array(read) = read else {
        return true;
    };
    match (read.as_slice(), client) {
        ([_, Response::Nil, _], _) => false,
        ([_, Response::Data(mark), Response::Nil], Some(client)) => mark != client.as_bytes(),
        _ => true,
    }
}

impl Reply {
    /// The reply to `request`, which was sent as `call`.
    pub fn via(request: &Request, call: Call, result: Result<Response, crate::NodeError>) -> Self {
        Self {
            native: match call {
                Call::Script(_) => None,
                Call::Native(native) => Some(native),
            },
            ..Reply::to(request, result)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_name_their_server_and_version() {
        let valkey = NodeFacts::new(Server::Valkey, Version(9, 1, 2));
        assert_eq!(valkey.server(), Server::Valkey);
        assert_eq!(valkey.version(), Some(Version(9, 1, 2)));
        assert_eq!(
            NodeFacts::from_info("redis_version:7.0.15\r\n").server(),
            Server::Redis
        );
        assert_eq!(NodeFacts::default().server(), Server::Unknown);
    }

    #[test]
    fn a_node_of_many_servers_can_do_what_its_oldest_can() {
        let old = NodeFacts::new(Server::Redis, Version(7, 0, 15));
        let new = NodeFacts::new(Server::Redis, Version(7, 2, 4));
        assert_eq!(NodeFacts::lowest([new, old, new]), old);
        assert_eq!(NodeFacts::lowest([new]), new);
        assert_eq!(NodeFacts::lowest([new, new]), new);
        // Another server, or one whose version is unknown: scripts only.
        let valkey = NodeFacts::new(Server::Valkey, Version(9, 1, 2));
        assert_eq!(NodeFacts::lowest([new, valkey]), NodeFacts::default());
        let unknown = NodeFacts {
            server: Server::Redis,
            version: None,
        };
        assert_eq!(NodeFacts::lowest([new, unknown]), NodeFacts::default());
        assert_eq!(NodeFacts::lowest([]), NodeFacts::default());
    }

    #[test]
    fn plain_commands_are_named_as_the_server_knows_them() {
        assert_eq!(Native::SetNxGet.name(), "SET");
        assert_eq!(Native::SetIfEqGet.name(), "SET");
        assert_eq!(Native::DelIfEq.name(), "DELIFEQ");
    }
}
