//! What the driver says of a node's standing, as the core reports it: logs,
//! metrics, and the flag `Redlock::slow_nodes` reads.

use std::sync::atomic::Ordering;

use redlock_core::HealthChange;
use tracing::{info, warn};

use super::Task;

impl Task {
    pub(super) fn health(&self, change: HealthChange) {
        match change {
            HealthChange::Slow { node, probe_every } => {
                let name = &self.shared.settings.nodes()[node.0];
                info!(
                    node = %name,
                    "node known slow: {} requests in a row unanswered past their timeout; \
                     new acquires skip it, one probe every {} ms, until it answers",
                    redlock_core::SLOW_AFTER,
                    probe_every.as_millis()
                );
                self.shared.slow[node.0].store(true, Ordering::Relaxed);
                crate::metrics::node_slow(name, true);
            }
            HealthChange::Trusted { node, after } => {
                let name = &self.shared.settings.nodes()[node.0];
                info!(node = %name, slow_ms = after.as_millis() as u64, "node answers again; trusted");
                self.shared.slow[node.0].store(false, Ordering::Relaxed);
                crate::metrics::node_slow(name, false);
            }
            HealthChange::Restarted { node, wait } => {
                let name = &self.shared.settings.nodes()[node.0];
                warn!(
                    node = %name,
                    wait_ms = wait.as_millis() as u64,
                    "the server restarted (its run id changed): it may have lost locks it \
                     granted, so its votes do not count until the longest TTL has passed; \
                     run it with appendonly yes and appendfsync always to keep them"
                );
            }
            HealthChange::MayEvict { node, policy } => {
                let name = &self.shared.settings.nodes()[node.0];
                // Not refused: the client runs; an operator acts on it.
                warn!(
                    node = %name,
                    policy,
                    "the server may evict lock keys (maxmemory-policy): a lock evicted there \
                     is granted to another client while its holder still counts it; set \
                     maxmemory-policy noeviction"
                );
            }
            HealthChange::MayLoseLocks { node, reason } => {
                let name = &self.shared.settings.nodes()[node.0];
                warn!(
                    node = %name,
                    reason = %reason,
                    "the server may lose locks when it restarts, and grant them again while their \
                     holders still count it; run it with appendonly yes and appendfsync always"
                );
            }
            _ => {}
        }
    }
}
