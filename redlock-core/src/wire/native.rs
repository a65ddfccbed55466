//! What each node's server can do, and the one place that picks a plain
//! command over a script for a request.
//!
//! Newer servers have single commands for some of the scripts' jobs. A plain
//! command costs the server a fraction of a script call (Valkey 9.1.2, by
//! `INFO commandstats`: 0.29 us per `DELIFEQ` against 2.96 us per `EVALSHA`
//! of [`scripts::RELEASE`](crate::scripts::RELEASE)), and needs no script
//! cache. The adapter reads a node's facts once per connection
//! ([`Connected::from_info`](crate::Connected::from_info) on its `INFO` replies, again after every
//! reconnect, since the server may have been upgraded or replaced) and
//! gives them to [`Client::handle_connected`](crate::Client::handle_connected);
//! the client picks each request's [`Form`](crate::Form) as it sends it,
//! by the facts of the node's last connection, and reads the reply knowing
//! what was sent ([`Reply::native`](crate::Reply::native)).
//!
//! | request | native form | where |
//! |---|---|---|
//! | exclusive acquire (not a waiter's) | `SET key value NX PX ttl GET` | Redis >= 7.0, Valkey |
//! | exclusive release, withdraw (not a permit's) | `DELIFEQ key value` | Valkey >= 9.0 |
//! | exclusive extend (not a permit's) | `SET key value IFEQ value PX ttl GET` | Valkey >= 9.0 |
//!
//! The release is one command, as the safe floor's: where a waiter
//! listens, it marked the holder's value ([`waited`](crate::waited)), the
//! `DELIFEQ` answers `0`, and only then does the release send its script
//! to that node, which deletes the marked value and publishes the notice
//! ([`Operation::release`](crate::Operation::release)). A waiter's attempt on such a node is
//! therefore its script, which marks the holder in the same step as its
//! check; on a server without `DELIFEQ` the release script reads the
//! waiters' marks itself, and a waiter's attempt may go plain. A plain
//! extend that finds our value marked sets nothing, and the extension
//! sends the extend script there ([`Operation::extend`](crate::Operation::extend)).
//!
//! Everything else stays a script:
//! - a semaphore's permit, released or extended (it names its semaphore's
//!   k, [`Request::payload`]): its release deletes the permits key with the
//!   last slot held ([`scripts::SEMAPHORE_RELEASE`](crate::scripts::SEMAPHORE_RELEASE)),
//!   its extension keeps it alive;
//! - the other kinds' releases must publish a notice only when they deleted
//!   our value, which no plain command does in one step (with notices off,
//!   `Settings::release_command` is a
//!   withdraw, which goes native for the write lock too);
//! - a restore sets a missing key again ([`Command::Restore`]), which
//!   `SET ... IFEQ` cannot do: it sets nothing on a missing key (an extend
//!   must not either, so it goes native); Redis >= 8.4 has `IFEQ` too, but no
//!   server at hand had it to check that it combines with `GET`;
//! - `DELEX key IFEQ value` (Redis >= 8.4, Valkey >= 9.2) is not used: no
//!   server at hand had it to check its replies against;
//! - fenced locks and the other lock kinds touch several keys.

use std::fmt;

use crate::wire::Argument;
use crate::{Command, LockKind, Request};
#[cfg(feature = "simulation")]
use crate::{Reply, Response};

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
/// client picks each request's form by ([`Request::form`], given with
/// [`Client::handle_connected`](crate::Client::handle_connected)).
///
/// The default is [`Server::Unknown`]: scripts only, which every supported
/// server runs.
///
/// ```
/// use redlock_core::native::{NodeFacts, Server, Version};
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

    machinery_fn! {
    /// The facts in an `INFO server` reply. Valkey also reports a
    /// `redis_version` (the Redis version it is compatible with), so
    /// `server_name:valkey` is looked for first.
    fn from_info(info: &str) -> Self {
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
    }

    /// The server.
    pub fn server(&self) -> Server {
        self.server
    }

    /// Its version, if known.
    pub fn version(&self) -> Option<Version> {
        self.version
    }

    machinery_fn! {
    /// What every one of several servers can do, for a node made of many
    /// (the masters of a Redis Cluster): the lowest version when they all
    /// run the same server, else unknown (scripts only). A command is then
    /// sent as a plain command only if every shard has it.
    ///
    /// ```
    /// use redlock_core::native::{NodeFacts, Server, Version};
    /// let old = NodeFacts::new(Server::Valkey, Version(8, 1, 0));
    /// let new = NodeFacts::new(Server::Valkey, Version(9, 1, 2));
    /// assert_eq!(NodeFacts::lowest([new, old]), old);
    /// let redis = NodeFacts::new(Server::Redis, Version(7, 0, 15));
    /// assert_eq!(NodeFacts::lowest([new, redis]), NodeFacts::default());
    /// assert_eq!(NodeFacts::lowest([]), NodeFacts::default());
    /// ```
    fn lowest(facts: impl IntoIterator<Item = NodeFacts>) -> Self {
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

    machinery_fn! {
        /// `SET key value IFEQ value PX ttl GET` works: Valkey >= 9.0 (checked
        /// on 9.1.2; `IFEQ` came in 8.1).
        fn has_set_ifeq_get(&self) -> bool {
            self.at_least(Server::Valkey, Version(9, 0, 0))
        }
    }

    /// `WAITAOF` exists: Redis >= 7.2, and every Valkey.
    pub fn has_waitaof(&self) -> bool {
        self.at_least(Server::Redis, Version(7, 2, 0))
            || self.at_least(Server::Valkey, Version(7, 2, 0))
    }
}

machinery_fn! {
/// The eviction policy an `INFO memory` reply names, when it may evict a
/// lock's keys: every policy but `noeviction`. The `allkeys-*` policies
/// evict any key, the `volatile-*` ones any key with a TTL, which every
/// lock key has. A lock key evicted frees the lock on that node while its
/// holder still counts the node: the node grants it to the next client,
/// and two holders can each count a quorum, with no fault the algorithm
/// allows for. `None` for `noeviction`, or a reply that does not say.
///
/// ```
/// use redlock_core::native::evicting_policy;
/// assert_eq!(evicting_policy("# Memory\r\nmaxmemory_policy:allkeys-lru\r\n"), Some("allkeys-lru"));
/// assert_eq!(evicting_policy("maxmemory_policy:volatile-ttl"), Some("volatile-ttl"));
/// assert_eq!(evicting_policy("maxmemory_policy:noeviction"), None);
/// assert_eq!(evicting_policy("# Server\r\nredis_version:7.0.15"), None);
/// ```
fn evicting_policy(info: &str) -> Option<&str> {
    info.lines()
        .find_map(|line| line.trim().strip_prefix("maxmemory_policy:"))
        .map(str::trim)
        .filter(|policy| !policy.is_empty() && *policy != "noeviction")
}
}

machinery_fn! {
/// Why a server may lose locks it granted when it restarts, from its
/// `INFO persistence` reply and its `appendfsync` setting (`CONFIG GET`;
/// `None` where the server did not say, an ACL user without `CONFIG`):
/// without AOF a restart comes back empty (RDB snapshots are minutes
/// apart), and with `appendfsync everysec` or `no` a crash loses the last
/// second or more of grants. A server that forgot a lock grants it again
/// while its holder still counts it. `None` for AOF with `appendfsync
/// always`, where only the disk can lose what was acknowledged, or a reply
/// that does not say (AOF on, `appendfsync` unread, counts as kept).
///
/// ```
/// use redlock_core::native::weak_persistence;
/// let aof = |on| format!("# Persistence\r\naof_enabled:{on}\r\n");
/// assert_eq!(
///     weak_persistence(&aof(0), Some("always")).as_deref(),
///     Some("appendonly no: a restart comes back without the locks it granted")
/// );
/// assert!(weak_persistence(&aof(1), Some("everysec")).unwrap().contains("appendfsync everysec"));
/// assert_eq!(weak_persistence(&aof(1), Some("always")), None);
/// assert_eq!(weak_persistence(&aof(1), None), None);
/// assert_eq!(weak_persistence("# Server\r\n", None), None);
/// ```
fn weak_persistence(info: &str, appendfsync: Option<&str>) -> Option<String> {
    if !aof_enabled(info)? {
        return Some("appendonly no: a restart comes back without the locks it granted".to_owned());
    }
    match appendfsync.map(str::trim) {
        Some(fsync) if !fsync.eq_ignore_ascii_case("always") => Some(format!(
            "appendfsync {fsync}: a crash loses the grants of up to the last second"
        )),
        _ => None,
    }
}
}

machinery_fn! {
/// Why a server cannot confirm that its append-only file has a write
/// (`WAITAOF 1 0 timeout`, what [`Config::wait_for_aof`](crate::Config::wait_for_aof)
/// sends behind every vote), from what it is (`facts`), its `INFO
/// persistence` reply and its `appendfsync` setting (`None` where unread):
/// a server without `WAITAOF` (Redis before 7.2), AOF off, or `appendfsync`
/// other than `always`: with `no` the server never syncs, so `WAITAOF` never
/// confirms, and with `everysec` Valkey 9.1.2 confirmed writes it had not
/// synced yet (measured: 20 `SET` + `WAITAOF` in a row all acknowledged in
/// 2.2 s, while the server made 3 sync calls in the 5 s watched). An
/// `appendfsync` unread (an ACL user without `CONFIG`) is refused too, as
/// it may be `everysec`. `None` when it can: AOF on with `appendfsync
/// always`.
///
/// ```
/// use redlock_core::native::{NodeFacts, Server, Version, waitaof_refusal};
/// let aof = |on| format!("# Persistence\r\naof_enabled:{on}\r\n");
/// let valkey = NodeFacts::new(Server::Valkey, Version(9, 1, 2));
/// let redis = NodeFacts::new(Server::Redis, Version(7, 0, 15));
/// assert_eq!(waitaof_refusal(&valkey, &aof(1), Some("always")), None);
/// assert!(waitaof_refusal(&valkey, &aof(1), Some("everysec")).unwrap().contains("everysec"));
/// assert!(waitaof_refusal(&valkey, &aof(0), Some("always")).unwrap().contains("appendonly no"));
/// assert!(waitaof_refusal(&valkey, &aof(1), Some("no")).unwrap().contains("appendfsync no"));
/// assert!(waitaof_refusal(&redis, &aof(1), Some("always")).unwrap().contains("Redis 7.0.15 has no WAITAOF"));
/// assert!(waitaof_refusal(&valkey, &aof(1), None).unwrap().contains("CONFIG GET appendfsync"));
/// ```
fn waitaof_refusal(facts: &NodeFacts, info: &str, appendfsync: Option<&str>) -> Option<String> {
    if !facts.has_waitaof() {
        return Some(format!("{facts} has no WAITAOF"));
    }
    if aof_enabled(info) == Some(false) {
        return Some("appendonly no: there is no AOF to wait for".to_owned());
    }
    match appendfsync.map(str::trim) {
        Some(fsync) if fsync.eq_ignore_ascii_case("no") => Some(
            "appendfsync no: the server never syncs its AOF, so WAITAOF never confirms".to_owned(),
        ),
        Some(fsync) if !fsync.eq_ignore_ascii_case("always") => Some(format!(
            "appendfsync {fsync}: WAITAOF may confirm a write the server has not synced yet"
        )),
        Some(_) => None,
        None => Some(
            "appendfsync unknown: the client may not run CONFIG GET appendfsync to check it \
             is always"
                .to_owned(),
        ),
    }
}
}

/// Whether an `INFO persistence` reply says AOF is on; `None` where it
/// does not say.
fn aof_enabled(info: &str) -> Option<bool> {
    info.lines()
        .find_map(|line| line.trim().strip_prefix("aof_enabled:"))
        .map(|on| on.trim() != "0")
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
    /// `DELIFEQ key value`: `1` when our value, unmarked, was there and is
    /// deleted; `0` when the key is absent, holds another value, or our
    /// value marked as waited for ([`waited`](crate::waited); not told
    /// apart: the release sends its script then); `WRONGTYPE` when it
    /// holds another type.
    DelIfEq,
    /// `SET key value IFEQ value PX ttl GET`: the value that was there; it is
    /// ours exactly when the TTL was set (ours marked as waited for, nothing
    /// was set). Nil when the key is absent (nothing
    /// set); `WRONGTYPE` when it holds another type.
    SetIfEqGet,
}

impl Native {
    /// The command's name, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            Native::SetNxGet => "SET",
            Native::DelIfEq => "DELIFEQ",
            Native::SetIfEqGet => "SET",
        }
    }

    machinery_fn! {
    /// The command's words for `request`, name first, held in place
    /// ([`Request::words`] sends them).
    fn words<'a>(&self, request: &'a Request) -> Words<'a> {
        let key = Argument::Bytes(request.key().as_bytes());
        let value = Argument::Bytes(request.value.as_bytes());
        match self {
            Native::SetNxGet => {
                let ttl = request
                    .command
                    .ttl()
                    // `Request::call` picks SetNxGet for acquires only.
                    .expect("SET NX PX GET is only chosen for an acquire, which has a TTL");
                Words::of(&[
                    Argument::Bytes(b"SET"),
                    key,
                    value,
                    Argument::Bytes(b"NX"),
                    Argument::Bytes(b"PX"),
                    Argument::Int(ttl.as_millis()),
                    Argument::Bytes(b"GET"),
                ])
            }
            Native::DelIfEq => Words::of(&[Argument::Bytes(b"DELIFEQ"), key, value]),
            Native::SetIfEqGet => {
                let ttl = request
                    .command
                    .ttl()
                    .expect("SET IFEQ PX GET is only chosen for an extend, which has a TTL");
                Words::of(&[
                    Argument::Bytes(b"SET"),
                    key,
                    value,
                    Argument::Bytes(b"IFEQ"),
                    value,
                    Argument::Bytes(b"PX"),
                    Argument::Int(ttl.as_millis()),
                    Argument::Bytes(b"GET"),
                ])
            }
        }
    }
    }
}

machinery_item! {
/// A plain command's words, name first (`Native::words`): a slice
/// (through `Deref`) held in place, as no command has more than eight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Words<'a> {
    words: [Argument<'a>; Words::MAX],
    len: usize,
}
}

impl<'a> Words<'a> {
    const MAX: usize = 8;

    fn of(words: &[Argument<'a>]) -> Self {
        let mut held = [Argument::Int(0); Self::MAX];
        held[..words.len()].copy_from_slice(words);
        Self {
            words: held,
            len: words.len(),
        }
    }
}

impl<'a> std::ops::Deref for Words<'a> {
    type Target = [Argument<'a>];

    fn deref(&self) -> &[Argument<'a>] {
        &self.words[..self.len]
    }
}

machinery_item! {
/// What to send for one request on one node: its script, or a plain
/// command (`Request::call`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Call {
    /// `EVALSHA` of this script with the request's keys and
    /// [`arguments`](Request::arguments).
    Script(&'static str),
    /// This command, with its words.
    Native(Native),
}
}

impl Request {
    machinery_fn! {
    /// What to send to this request's node, whose server is `facts`: the
    /// core's one choice between a script and a plain command (see the
    /// table in [`native`](crate::native)), which the
    /// [`Client`](crate::Client) makes as it sends the request
    /// ([`Request::form`]).
    fn call(&self, facts: &NodeFacts) -> Call {
        if !self.native {
            return Call::Script(self.script());
        }
        match (&self.kind, self.command) {
            // A waiter's attempt (it names its client) marks the holder
            // where the holder's release is a plain `DELIFEQ`.
            (LockKind::Exclusive, Command::Acquire { .. })
                if facts.has_set_nx_get() && (self.client.is_none() || !facts.has_delifeq()) =>
            {
                Call::Native(Native::SetNxGet)
            }
            // A permit's extend keeps its semaphore's permits key too.
            (LockKind::Exclusive, Command::Extend { .. })
                if facts.has_set_ifeq_get() && self.payload.is_none() =>
            {
                Call::Native(Native::SetIfEqGet)
            }
            // The write lock's release script is the exclusive one: it
            // deletes the lock key alone. A permit's release (it names its
            // semaphore's k) deletes the permits key too: always its script.
            (LockKind::Exclusive, Command::Release)
            | (LockKind::Exclusive | LockKind::Write { .. }, Command::Withdraw)
                if facts.has_delifeq() && self.payload.is_none() =>
            {
                Call::Native(Native::DelIfEq)
            }
            _ => Call::Script(self.script()),
        }
    }
    }

    /// Whether this is an exclusive lock's release that names the waiters'
    /// marks next to its key (`[key, waiters, others]`, or a permit's
    /// `[slot, waiters, others, slots.., permits]`,
    /// [`Settings::release_keys`](crate::Settings)): they are named only
    /// where they share the key's slot (always, for a permit). Such a
    /// release is sent again without its marks to a node that refuses them
    /// ([`Operation::release`](crate::Operation::release)).
    pub(crate) fn names_marks(&self) -> bool {
        self.kind == LockKind::Exclusive
            && self.command == Command::Release
            && (self.keys.len() == 3 || self.payload.is_some())
    }
}

#[cfg(feature = "simulation")]
impl Reply {
    /// The reply to `request`, which was sent as `call` (for the
    /// simulations, which drive machines without a
    /// [`Client`](crate::Client): it gives [`Reply::to`] the form).
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
