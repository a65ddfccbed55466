//! Releases and withdraws that met a broken connection, sent again on the
//! node's next connection.

use std::sync::Arc;

use redlock_core::{NodeErrorKind, Request};
use tracing::debug;

use super::Node;

impl Node {
    /// Sends `request` (a release or a withdraw that met a broken
    /// connection) again once the node has a connection, until the core
    /// gives it up ([`Request::give_up_at`]): the node may have run the acquire it
    /// undoes before the connection broke (a master that restarted with its
    /// data, a connection cut by a proxy). Sending it again is safe: it
    /// removes only our value. A runtime that shuts down first drops the
    /// task, and the request goes out on a blocking connection instead
    /// ([`send_blocking`](Self::send_blocking)): so a runtime that drops the
    /// node's connection while a release waits for its answer still sends
    /// it. At most [`RESENDS`] wait per node; past that, a key left expires
    /// at its TTL. The client's background tasks own them, so
    /// [`Redlock::shutdown`](crate::Redlock::shutdown) awaits them.
    pub(crate) fn resend_later(self: &Arc<Self>, request: Request) {
        use std::sync::atomic::Ordering;
        if self.resends.fetch_add(1, Ordering::Relaxed) >= RESENDS {
            self.resends.fetch_sub(1, Ordering::Relaxed);
            return;
        }
        let resend = Resend {
            node: Arc::clone(self),
            request: Some(request),
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            self.tasks.spawn_on(resend.run(), &runtime);
        }
        // Else `resend` is dropped here: sent on a blocking connection.
    }
}

/// Releases waiting to be sent again on one node, at most.
pub(super) const RESENDS: usize = 4_096;

/// A release waiting for its node's next connection; dropped before it was
/// answered, it is sent on a blocking connection.
struct Resend {
    node: Arc<Node>,
    request: Option<Request>,
}

impl Resend {
    async fn run(mut self) {
        let Some(deadline) = self.request.as_ref().map(|r| r.give_up_at.into()) else {
            return;
        };
        while let Some(request) = self.request.clone() {
            let connected = self.node.connected.notified();
            let mut connected = std::pin::pin!(connected);
            connected.as_mut().enable();
            if !self.node.is_connected()
                && tokio::time::timeout_at(deadline, connected).await.is_err()
            {
                break;
            }
            let reply = self.node.execute(&request).await;
            match reply.result {
                Err(error)
                    if error.kind == NodeErrorKind::Connection
                        && tokio::time::Instant::now() < deadline =>
                {
                    // Not again at once: a cluster node stays "connected"
                    // while one shard is down.
                    tokio::time::sleep(self.node.node_timeout).await;
                }
                _ => {
                    debug!(node = %self.node.name, command = request.command.name(), "sent again after a reconnect");
                    break;
                }
            }
        }
        self.request = None;
    }
}

impl Drop for Resend {
    fn drop(&mut self) {
        // Dropped before `run` ended: its runtime shuts down.
        if let Some(request) = self.request.take() {
            super::blocking::as_runtime_drops(|| self.node.send_blocking(&request));
        }
        self.node
            .resends
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}
