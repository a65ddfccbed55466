//! The blocking fallback: a release or withdraw sent on a plain blocking
//! connection when no Tokio runtime can send it, and the rule of where
//! anything may block.
//!
//! # Where a call may block
//!
//! One blocked worker stops every timer and socket of its Tokio runtime, so
//! a blocking connect, send, join or wait runs only where no task of a
//! runtime can be stalled by it ([`may_block`]):
//!
//! - on a thread that runs no Tokio runtime (a guard dropped in synchronous
//!   code, the blocking client's caller, a process exiting after its
//!   runtime), or
//! - while a runtime shuts down, in the drop of what one of the client's
//!   tasks owned ([`as_runtime_drops`]): every task of that runtime is being
//!   dropped, none is left to stall, and the process may be about to exit
//!   with our keys on the masters.
//!
//! Everywhere else a request that stays unanswered is given up without
//! another connection: it is queued on its node's connection already, in
//! order, and runs when the node reads it. The test build (feature
//! `simulation`, which every test of the workspace turns on) aborts the
//! process at a blocking call on a runtime thread ([`check_may_block`]), so
//! the whole suite watches for the class; a release build skips the call
//! and logs it.

use std::cell::Cell;
use std::sync::PoisonError;
use std::sync::atomic::Ordering;

use redis::Value;
use redlock_core::{Form, Request};
use tracing::{debug, info, warn};

use super::Node;
use super::encode;
use super::reply::map_error;

/// A plain blocking connection, for releases sent when no runtime can send
/// them (at process exit, or a guard dropped outside a runtime).
#[derive(Default)]
pub(super) struct Blocking {
    connection: Option<Box<dyn redis::ConnectionLike + Send>>,
}

thread_local! {
    /// Set while this thread drops what a task of a runtime that shuts
    /// down owned ([`as_runtime_drops`]).
    static RUNTIME_DROPS: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread may block (see the [module](self)): it runs no Tokio
/// runtime, or its runtime is shutting down and drops a task's state.
pub(crate) fn may_block() -> bool {
    tokio::runtime::Handle::try_current().is_err() || RUNTIME_DROPS.with(Cell::get)
}

/// Runs `drop`, which drops what a task of the client owned and can only be
/// dropped early by its runtime shutting down (a task of the client never
/// ends before its work is done, and nothing aborts one): the releases
/// among it may then go out on blocking connections.
pub(crate) fn as_runtime_drops(drop: impl FnOnce()) {
    let before = RUNTIME_DROPS.with(|flag| flag.replace(true));
    drop();
    RUNTIME_DROPS.with(|flag| flag.set(before));
}

/// Checks that `what`, about to block, runs where it may ([`may_block`]).
/// Where it may not, the test build aborts the process, naming the call
/// (a panic would be caught by the task that ran it, and a test could pass
/// on it); a release build returns false, and the caller skips the call.
pub(crate) fn check_may_block(what: &str) -> bool {
    if may_block() {
        return true;
    }
    if cfg!(any(test, feature = "simulation")) {
        eprintln!(
            "redlock: {what} on a thread that runs a Tokio runtime: it would stall every task \
             of that runtime (see `node::blocking`); aborting the test build"
        );
        std::process::abort();
    }
    warn!(
        call = what,
        "a blocking call on a Tokio runtime thread was skipped"
    );
    false
}

impl Node {
    /// Sends `request` (a release or a withdraw) over a plain blocking
    /// connection and waits for the answer, at most one connect timeout plus
    /// one per-node timeout: for when no Tokio runtime can send it (its
    /// runtime shut down with the request unsent, or there never was one).
    /// The answer is not read: whoever would act on it is gone, and a
    /// release is safe to repeat (it deletes only our value). A node that
    /// fails here is not tried again by later blocking releases until it
    /// answers again ([`Node::answered`]), so that a process exiting with
    /// many locks waits for a dead node once.
    pub(crate) fn send_blocking(&self, request: &Request) {
        // The full script, never the plain `DELIFEQ`: our value may be
        // marked as waited for, which only the script deletes, and nobody
        // reads this answer to send the script after it
        // (`redlock_core::waited`). In full: a new connection may meet an
        // empty script cache, and there is no time for a NOSCRIPT round
        // trip.
        if self.blocking_gave_up.load(Ordering::Relaxed) || !check_may_block("a blocking release") {
            return;
        }
        // In full: a blocking connection meets no `NOSCRIPT`, which
        // nobody would be there to answer.
        let in_full = Request {
            form: Form::InFull,
            ..request.clone()
        };
        let command = encode::command(&in_full.words());
        let mut blocking = self.blocking.lock().unwrap_or_else(PoisonError::into_inner);
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
                self.blocking_gave_up.store(true, Ordering::Relaxed);
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

#[cfg(test)]
mod tests {
    //! The guard against the whole class: a blocking call placed on a
    //! runtime's worker on purpose aborts the test build. The process that
    //! places it is a child (this test binary again, running only the
    //! child's test), so that the abort fails the child, not the suite.

    use std::process::Command;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use redlock_core::{Config, LockValue, Operation};

    use super::*;

    /// Set in the child's environment.
    const CHILD: &str = "REDLOCK_BLOCKING_ON_A_WORKER";

    /// In the child: a blocking release on a worker of a multi-thread
    /// runtime, to a port nobody listens on. In the parent: does nothing.
    #[test]
    fn child_sends_a_blocking_release_on_a_worker() {
        if std::env::var_os(CHILD).is_none() {
            return;
        }
        let client = redis::Client::open("redis://127.0.0.1:1").expect("a valid URL");
        let node = Arc::new(Node::new(
            "127.0.0.1:1/0".to_owned(),
            client,
            None,
            Duration::from_millis(100),
            Duration::from_millis(100),
        ));
        let settings = Config::new(["127.0.0.1:1"])
            .validate()
            .expect("valid settings");
        let key = settings.key(b"job");
        let release = Operation::<crate::sim::ClientRng>::release_value(
            &settings,
            key,
            LockValue::from_string("v"),
            Instant::now(),
        );
        let request = release.undo(Instant::now()).swap_remove(0);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async move {
            tokio::spawn(async move { node.send_blocking(&request) })
                .await
                .expect("the task ran");
        });
        println!("the blocking release ran on a worker unnoticed");
    }

    #[test]
    fn a_blocking_send_on_a_runtime_worker_aborts_the_test_build() {
        let output = Command::new(std::env::current_exe().expect("this test binary"))
            .args([
                "--exact",
                "node::blocking::tests::child_sends_a_blocking_release_on_a_worker",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .output()
            .expect("the child runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(!output.status.success(), "the child passed: {stdout}");
        assert!(
            stderr.contains("a blocking release on a thread that runs a Tokio runtime"),
            "stderr: {stderr}"
        );
        assert!(!stdout.contains("unnoticed"), "stdout: {stdout}");
    }

    #[test]
    fn a_runtime_thread_may_block_only_while_its_runtime_drops_a_task() {
        assert!(may_block(), "no runtime on a test's own thread");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            assert!(!may_block(), "a running runtime's thread");
            as_runtime_drops(|| assert!(may_block(), "dropping a task's state"));
            assert!(!may_block(), "the drop's scope ended");
        });
    }
}
