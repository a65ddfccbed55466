//! What a connection found its server to be, and which servers a client
//! takes: one server under two names, eviction, weak persistence, an AOF
//! that cannot be waited for.

use std::collections::HashMap;

use super::{Settings, WeakPersistence};
use crate::error::ConfigError;
use crate::native::NodeFacts;

/// What a node's connection found its server to be, read from its `INFO`
/// replies (a cluster node's: from every master that answered). Given to
/// [`Client::handle_connected`](crate::Client::handle_connected) at each
/// connection, and to [`Settings::check_servers`] at start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Connected {
    /// What the server can do ([`NodeFacts::from_info`]; a cluster node's,
    /// the lowest of its masters', [`NodeFacts::lowest`]).
    pub facts: NodeFacts,
    /// `INFO server`'s `run_id`, which tells two addresses of one server
    /// apart from two servers, and a restart from a reconnect: one per
    /// master of a cluster node; empty where the server did not say.
    pub run_ids: Vec<String>,
    /// Its eviction policy, where it may evict lock keys
    /// ([`evicting_policy`](crate::native::evicting_policy)); a cluster
    /// node's first master that may.
    pub evicting: Option<String>,
    /// Why it may lose locks when it restarts, where it may
    /// ([`weak_persistence`](crate::native::weak_persistence)); a cluster
    /// node's first master that may.
    pub weak_persistence: Option<String>,
    /// Why it cannot confirm that its AOF has a write, where it cannot
    /// ([`waitaof_refusal`](crate::native::waitaof_refusal)).
    pub no_waitaof: Option<String>,
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
