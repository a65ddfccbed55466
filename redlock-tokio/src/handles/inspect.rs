//! Reading a lock's state on every node, for diagnostics and operators: the
//! core's inspection (one [`scripts::INSPECT`](redlock_core::scripts::INSPECT)
//! per node, its timeout decided by the core) driven by the one driver like
//! every other operation, so it takes the per-node order, the `NOSCRIPT`
//! handling and the metrics of every request (what it all means:
//! [`redlock_core::LockStatus`]).

use redlock_core::{Holding, NodeError, Operation};
use tracing::{Instrument, debug, info_span};

use crate::Redlock;
use crate::driver::{kind, run};

/// What one node holds for a lock key, as read by [`Redlock::inspect`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeInspection {
    /// The node's canonical address, `host:port/db`.
    pub node: String,
    /// The key's value and time to live (`Ok(None)`: no such key), or why the
    /// node could not be read within the per-node timeout.
    pub result: Result<Option<Holding>, NodeError>,
    /// This node's fencing counter for the resource (the highest fencing
    /// token stored there), if the key exists and holds a number. `None`
    /// also when the node could not be read.
    pub fencing_counter: Option<u64>,
}

impl NodeInspection {
    /// What this node says, for [`LockStatus::from_reads`](redlock_core::LockStatus::from_reads).
    pub fn read(&self) -> Result<Option<&Holding>, &NodeError> {
        self.result.as_ref().map(Option::as_ref)
    }
}

impl Redlock {
    /// Reads the lock on `resource` on every node, in node order: the value
    /// held there and its remaining time to live (`PTTL`), and the fencing
    /// counter.
    ///
    /// One read-only script per node, sent to all nodes at once over the
    /// existing connections like every other request (in order with this
    /// client's other commands for the key), each with the per-node timeout
    /// ([`Settings::node_timeout`](redlock_core::Settings::node_timeout)).
    /// It never fails as a whole: each node's entry says what went wrong
    /// there.
    ///
    /// This is a snapshot for diagnostics, not a vote: a value seen on a
    /// quorum may expire or be released right after. To hold a lock,
    /// acquire it. The values returned can release the lock; show them only
    /// to whoever may do that.
    pub async fn inspect(&self, resource: impl AsRef<[u8]>) -> Vec<NodeInspection> {
        self.inspect_key(self.settings().key(resource.as_ref()))
            .await
    }

    /// As [`inspect`](Self::inspect), for permit `slot` (from 0) of the
    /// semaphore on `resource` ([`LockRequest::permits`](crate::LockRequest::permits)):
    /// who holds that permit.
    pub async fn inspect_permit(
        &self,
        resource: impl AsRef<[u8]>,
        slot: u32,
    ) -> Vec<NodeInspection> {
        self.inspect_key(self.settings().permit_key(resource.as_ref(), slot))
            .await
    }

    /// As [`inspect`](Self::inspect), for the permits key of the semaphore
    /// on `resource` ([`Settings::permits_key`](redlock_core::Settings::permits_key)):
    /// the number of permits each master keeps for it, while a permit is
    /// held or was within a TTL. [`LockStatus::permits`](redlock_core::LockStatus::permits)
    /// tells the number a quorum keeps.
    pub async fn inspect_permits(&self, resource: impl AsRef<[u8]>) -> Vec<NodeInspection> {
        let settings = self.settings();
        self.inspect_key(settings.permits_key(&settings.key(resource.as_ref())))
            .await
    }

    async fn inspect_key(&self, key: redlock_core::Key) -> Vec<NodeInspection> {
        let settings = self.settings();
        let span = info_span!("redlock.inspect", resource = %key);
        let inspection = Operation::inspect(settings, key, crate::sim::now());
        let report = async {
            let (report, _) = run::<kind::Inspect>(inspection, self).await;
            debug!(reads = %report.votes(), "inspected");
            report
        }
        .instrument(span)
        .await;
        report
            .reads
            .into_iter()
            .zip(settings.nodes())
            .map(|(read, node)| {
                let (result, fencing_counter) = match read {
                    Ok(reply) => (Ok(reply.holding), reply.fencing_counter),
                    Err(error) => (Err(error), None),
                };
                NodeInspection {
                    node: node.clone(),
                    result,
                    fencing_counter,
                }
            })
            .collect()
    }
}
