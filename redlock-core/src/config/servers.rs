//! What a connection found its server to be, and which servers a client
//! takes: one server under two names, eviction, weak persistence, an AOF
//! that cannot be waited for.

use std::collections::HashMap;
use std::time::Duration;

use super::{Settings, WeakPersistence};
use crate::error::ConfigError;
use crate::native::{NodeFacts, evicting_policy, waitaof_refusal, weak_persistence};

/// What a node's connection found its server to be, read from its `INFO`
/// replies (a cluster node's: from every master that answered). Given to
/// [`Client::handle_connected`](crate::Client::handle_connected) at each
/// connection, and to [`Settings::check_servers`] at start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Connected {
    /// What the server can do, from `INFO server` (a cluster node's: the
    /// lowest of its masters', [`of_cluster`](Self::of_cluster)).
    pub facts: NodeFacts,
    /// `INFO server`'s `run_id`, which tells two addresses of one server
    /// apart from two servers, and a restart from a reconnect: one per
    /// master of a cluster node; empty where the server did not say.
    pub run_ids: Vec<String>,
    /// Its eviction policy, where it may evict lock keys
    /// (`INFO memory`'s `maxmemory_policy`, anything but `noeviction`:
    /// a lock key evicted is granted again while its holder counts it); a cluster
    /// node's first master that may.
    pub evicting: Option<String>,
    /// Why it may lose locks when it restarts, where it may
    /// (no AOF, or `appendfsync` other than `always`); a cluster
    /// node's first master that may.
    pub weak_persistence: Option<String>,
    /// Why it cannot confirm that its AOF has a write, where it cannot
    /// (no `WAITAOF`, as in Redis before 7.2; AOF off; `appendfsync` other
    /// than `always`, or unread).
    pub no_waitaof: Option<String>,
    /// Whether its persistence was read (an ACL user may be refused `INFO
    /// persistence`): no `weak_persistence` then means it keeps its data.
    pub persistence_read: bool,
    /// How long the server had been up (`INFO server`'s
    /// `uptime_in_seconds`; a cluster node's youngest master).
    pub uptime: Option<Duration>,
}

impl Connected {
    /// What one server is, from a connection's replies to `INFO server`,
    /// `INFO memory` and `INFO persistence` and the value of `CONFIG GET
    /// appendfsync`, each `None` where the server refused or failed it (an
    /// ACL user without `INFO` or `CONFIG`, a Redis-compatible server that
    /// does not say): facts unknown send scripts only, and persistence
    /// unread is not taken as weak.
    ///
    /// ```
    /// use redlock_core::Connected;
    /// let server = "# Server\r\nredis_version:7.0.15\r\nrun_id:79163465ae2b\r\nuptime_in_seconds:3725\r\n";
    /// let memory = "# Memory\r\nmaxmemory_policy:allkeys-lru\r\n";
    /// let persistence = "# Persistence\r\naof_enabled:0\r\n";
    /// let found = Connected::from_info(Some(server), Some(memory), Some(persistence), Some("always"));
    /// assert_eq!(found.facts.to_string(), "Redis 7.0.15");
    /// assert_eq!(found.run_ids, ["79163465ae2b"]);
    /// assert_eq!(found.uptime, Some(std::time::Duration::from_secs(3725)));
    /// assert_eq!(found.evicting.as_deref(), Some("allkeys-lru"));
    /// assert!(found.weak_persistence.unwrap().starts_with("appendonly no"));
    /// assert!(found.no_waitaof.unwrap().contains("has no WAITAOF"));
    /// assert!(found.persistence_read);
    /// let refused = Connected::from_info(None, None, None, None);
    /// assert_eq!((refused.weak_persistence, refused.persistence_read), (None, false));
    /// ```
    pub fn from_info(
        server: Option<&str>,
        memory: Option<&str>,
        persistence: Option<&str>,
        appendfsync: Option<&str>,
    ) -> Self {
        let facts = server.map(NodeFacts::from_info).unwrap_or_default();
        let kept = persistence.unwrap_or_default();
        Self {
            facts,
            run_ids: server.and_then(run_id).into_iter().collect(),
            evicting: memory.and_then(evicting_policy).map(str::to_owned),
            weak_persistence: weak_persistence(kept, appendfsync),
            no_waitaof: waitaof_refusal(&facts, kept, appendfsync),
            persistence_read: !kept.is_empty(),
            uptime: server.and_then(uptime),
        }
    }

    /// A cluster node's, from each of its masters' (named as the cluster
    /// client names them): the lowest facts, so that a plain command goes
    /// only where every shard has it; every master's run id; the youngest
    /// uptime; the first master that may evict or lose locks (named); its
    /// persistence read only where every master's was; and no `WAITAOF`:
    /// the client waits for the AOF of plain masters only.
    pub fn of_cluster(masters: impl IntoIterator<Item = (String, Connected)>) -> Self {
        let masters: Vec<(String, Connected)> = masters.into_iter().collect();
        let each = || masters.iter().map(|(_, master)| master);
        Self {
            facts: NodeFacts::lowest(each().map(|master| master.facts)),
            run_ids: each().flat_map(|master| master.run_ids.clone()).collect(),
            evicting: each().find_map(|master| master.evicting.clone()),
            weak_persistence: masters.iter().find_map(|(name, master)| {
                let why = master.weak_persistence.as_ref()?;
                Some(format!("{name}: {why}"))
            }),
            no_waitaof: Some(
                "a Redis Cluster: the client waits for the AOF of plain masters only".to_owned(),
            ),
            persistence_read: !masters.is_empty() && each().all(|master| master.persistence_read),
            uptime: each().filter_map(|master| master.uptime).min(),
        }
    }
}

/// The `run_id` line of an `INFO server` reply: 40 hex characters, random
/// per server process.
fn run_id(info: &str) -> Option<String> {
    info.lines()
        .find_map(|line| line.trim().strip_prefix("run_id:"))
        .map(|id| id.trim().to_owned())
        .filter(|id| !id.is_empty())
}

/// `uptime_in_seconds` from an `INFO server` reply.
fn uptime(info: &str) -> Option<Duration> {
    info.lines()
        .find_map(|line| line.trim().strip_prefix("uptime_in_seconds:"))
        .and_then(|seconds| seconds.trim().parse().ok())
        .map(Duration::from_secs)
}

impl Settings {
    /// Whether the client may start on the servers its nodes reached:
    /// `servers[i]` is node `i`'s name as the user gave it (credentials
    /// removed, for the error) and what its connection found, `None` where
    /// it was not reached (not checked: a node down at start is checked by
    /// nobody, and said at its connection,
    /// [`HealthChange`](crate::HealthChange)). The first refusal, in node
    /// order:
    ///
    /// - one server reached under two names (a `run_id` shared by two
    ///   nodes: `localhost` and `127.0.0.1`, a DNS alias, a server in two
    ///   cluster nodes): it would count twice towards the quorum;
    /// - a server that may evict lock keys, unless
    ///   [`Config::allow_eviction`](crate::Config::allow_eviction);
    /// - a server that may lose locks when it restarts, where
    ///   [`Config::weak_persistence`](crate::Config::weak_persistence) is [`WeakPersistence::Refuse`];
    /// - a server that cannot confirm its AOF has a write, where
    ///   [`Config::wait_for_aof`](crate::Config::wait_for_aof) is on.
    ///
    /// ```
    /// use redlock_core::{Config, ConfigError, Connected};
    /// let settings = Config::new(["a", "b", "c"]).validate().unwrap();
    /// let found = |id: &str| Connected { run_ids: vec![id.to_owned()], ..Connected::default() };
    /// let (one, two) = (found("1"), found("2"));
    /// assert!(settings.check_servers(&[("a", Some(&one)), ("b", Some(&two)), ("c", None)]).is_ok());
    /// let twice = settings.check_servers(&[("a", Some(&one)), ("b", None), ("c", Some(&one))]);
    /// assert!(matches!(twice, Err(ConfigError::SameServer { first, second }) if first == "a" && second == "c"));
    /// ```
    pub fn check_servers(&self, servers: &[(&str, Option<&Connected>)]) -> Result<(), ConfigError> {
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (index, (_, found)) in servers.iter().enumerate() {
            for run_id in found.iter().flat_map(|found| &found.run_ids) {
                match seen.get(run_id.as_str()) {
                    Some(&first) if first != index => {
                        return Err(ConfigError::SameServer {
                            first: servers[first].0.to_owned(),
                            second: servers[index].0.to_owned(),
                        });
                    }
                    _ => {
                        seen.insert(run_id, index);
                    }
                }
            }
        }
        for (name, found) in servers {
            let Some(found) = found else { continue };
            let node = name.to_string();
            if let Some(policy) = found.evicting.clone().filter(|_| !self.allow_eviction) {
                return Err(ConfigError::EvictingServer { node, policy });
            }
            let refuse = self.weak_persistence == WeakPersistence::Refuse;
            if let Some(reason) = found.weak_persistence.clone().filter(|_| refuse) {
                return Err(ConfigError::WeakPersistence { node, reason });
            }
            if let Some(reason) = found.no_waitaof.clone().filter(|_| self.wait_for_aof) {
                return Err(ConfigError::NoWaitAof { node, reason });
            }
        }
        Ok(())
    }
}
