//! What the servers reached at build are, against what the client
//! accepts: one server under two names, eviction, weak persistence, an AOF
//! that cannot be waited for.

use std::collections::HashMap;

use redlock_core::{ConfigError, NodeError};

use super::WeakPersistence;
use crate::Error;
use crate::node::Connected;

/// The first refusal among the servers `results` reached (`shown`: their
/// names as given, credentials removed).
pub(super) fn check(
    results: &[Result<Connected, NodeError>],
    shown: &[String],
    allow_eviction: bool,
    weak_persistence: WeakPersistence,
    wait_for_aof: bool,
) -> Result<(), Error> {
    // Two addresses of one server (`localhost` and `127.0.0.1`, a DNS
    // alias) would count it twice towards the quorum: a server is known
    // by its run_id. Servers unreachable now are not checked.
    // A cluster node brings the run_id of each of its masters, so one
    // server in two cluster nodes, or a plain node that is a shard of a
    // cluster node, is found too.
    let mut run_ids: HashMap<&str, usize> = HashMap::new();
    for (i, result) in results.iter().enumerate() {
        let Ok(Connected { run_ids: ids, .. }) = result else {
            continue;
        };
        for run_id in ids {
            match run_ids.get(run_id.as_str()) {
                // Dropping the nodes closes their connections.
                Some(&first) if first != i => {
                    return Err(ConfigError::SameServer {
                        first: shown[first].clone(),
                        second: shown[i].clone(),
                    }
                    .into());
                }
                _ => {
                    run_ids.insert(run_id, i);
                }
            }
        }
    }
    // What the servers reached are, against what the client accepts.
    for (i, connected) in results.iter().enumerate() {
        let Ok(connected) = connected else {
            continue;
        };
        let node = || shown[i].clone();
        if let Some(policy) = connected.evicting.clone().filter(|_| !allow_eviction) {
            return Err(ConfigError::EvictingServer {
                node: node(),
                policy,
            }
            .into());
        }
        if let Some(reason) = connected
            .weak_persistence
            .clone()
            .filter(|_| weak_persistence == WeakPersistence::Refuse)
        {
            return Err(ConfigError::WeakPersistence {
                node: node(),
                reason,
            }
            .into());
        }
        if let Some(reason) = connected.no_waitaof.clone().filter(|_| wait_for_aof) {
            return Err(ConfigError::NoWaitAof {
                node: node(),
                reason,
            }
            .into());
        }
    }
    Ok(())
}
