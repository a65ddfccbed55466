//! The blocking fallback: a release or withdraw sent on a plain blocking
//! connection when no Tokio runtime can send it.

use std::sync::PoisonError;

use redis::Value;
use redlock_core::Request;
use tracing::{debug, info};

use super::Node;
use super::encode::script_call;
use super::reply::map_error;

/// A plain blocking connection, for releases sent when no runtime can send
/// them (at process exit, or a guard dropped outside a runtime).
#[derive(Default)]
pub(super) struct Blocking {
    connection: Option<Box<dyn redis::ConnectionLike + Send>>,
    /// Set when a connection or a request failed: the node is down or
    /// paused, and every later blocking release would wait for it again.
    gave_up: bool,
}

impl Node {
    /// Sends `request` (a release or a withdraw) over a plain blocking
    /// connection and waits for the answer, at most one connect timeout plus
    /// one per-node timeout: for when no Tokio runtime can send it (its
    /// runtime shut down with the request unsent, or there never was one).
    /// The answer is not read: whoever would act on it is gone, and a
    /// release is safe to repeat (it deletes only our value). A node that
    /// fails here is not tried again by later blocking releases, so that a
    /// process exiting with many locks waits for a dead node once.
    pub(crate) fn send_blocking(&self, request: &Request) {
        // The full script, never the plain `DELIFEQ`: our value may be
        // marked as waited for, which only the script deletes, and nobody
        // reads this answer to send the script after it
        // (`redlock_core::waited`). In full: a new connection may meet an
        // empty script cache, and there is no time for a NOSCRIPT round
        // trip.
        let command = script_call("EVAL", request.script(), request);
        let mut blocking = self.blocking.lock().unwrap_or_else(PoisonError::into_inner);
        if blocking.gave_up {
            return;
        }
        let sent = (|| -> redis::RedisResult<()> {
            let connection = match &mut blocking.connection {
                Some(connection) => connection,
                none => none.insert(self.connect_blocking()?),
            };
            command.query::<Value>(connection.as_mut()).map(drop)
        })();
        match sent {
            Ok(()) => {
                debug!(node = %self.name, command = request.command.name(), "sent with a blocking connection")
            }
            Err(err)
                if err.is_timeout()
                    || err.is_io_error()
                    || err.is_connection_dropped()
                    || err.is_connection_refusal() =>
            {
                info!(node = %self.name, error = %map_error(&err), "no blocking release on this node; its key expires at its TTL");
                blocking.connection = None;
                blocking.gave_up = true;
            }
            // An error reply (a key of another type, say): the node is up.
            Err(err) => {
                debug!(node = %self.name, error = %map_error(&err), "blocking release refused")
            }
        }
    }

    fn connect_blocking(&self) -> redis::RedisResult<Box<dyn redis::ConnectionLike + Send>> {
        if let Some((index, simulation)) = &self.simulation {
            return simulation.blocking(*index);
        }
        if let Some(cluster) = &self.cluster {
            let connection = cluster.get_connection()?;
            connection.set_read_timeout(Some(self.node_timeout))?;
            connection.set_write_timeout(Some(self.node_timeout))?;
            return Ok(Box::new(connection));
        }
        let connection = self
            .client
            .get_connection_with_timeout(self.connect_timeout)?;
        connection.set_read_timeout(Some(self.node_timeout))?;
        connection.set_write_timeout(Some(self.node_timeout))?;
        Ok(Box::new(connection))
    }
}
