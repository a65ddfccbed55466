//! One owner for everything a client does in the background: every request
//! that must arrive (a release, a withdraw, a leave, a resend after a
//! reconnect) and every request still in flight when its operation
//! finished belongs to the client's [`Background`], and
//! [`Redlock::shutdown`](crate::Redlock::shutdown) awaits all of it.
//!
//! It holds two things, one per shape of work:
//!
//! - the [drain](crate::drain): requests already sent, completed in one
//!   long-lived task (the hot path: no task per operation);
//! - a [`TaskTracker`] for work that runs code of its own: the release of a
//!   dropped guard, the requests of an operation on another runtime than
//!   the drain's, and a node's resends
//!   ([`Node::resend_later`](crate::node::Node::resend_later)), which wait
//!   for the node's next connection.
//!
//! Each waits for a node at most until the core gives its request up
//! ([`Request::give_up_at`](redlock_core::Request::give_up_at): what a
//! release undoes has expired by then, so waiting longer would gain
//! nothing, while a master paused under load cannot make the client hold
//! ever more requests).

use std::future::Future;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, debug, warn};

use crate::drain::Drain;
use crate::driver::Sent;

/// Everything a client does in the background (see the [module](self)).
pub(crate) struct Background {
    drain: Drain,
    tasks: TaskTracker,
}

impl Background {
    pub(crate) fn new() -> Self {
        Self {
            drain: Drain::new(),
            tasks: TaskTracker::new(),
        }
    }

    /// The tasks, for a node's resends.
    pub(crate) fn tasks(&self) -> &TaskTracker {
        &self.tasks
    }

    /// The runtime the drain runs on, while it runs (see
    /// [`Drain::runtime`]).
    pub(crate) fn runtime(&self) -> Option<tokio::runtime::Handle> {
        self.drain.runtime()
    }

    /// Runs `task` on the current runtime, owned here; gives it back when
    /// there is no runtime.
    pub(crate) fn spawn<F>(&self, task: F) -> Result<(), F>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                self.tasks.spawn_on(task, &runtime);
                Ok(())
            }
            Err(_) => Err(task),
        }
    }

    /// Lets requests in flight complete in the background, so that slow
    /// nodes get the lock or the new TTL too, and releases sent without
    /// waiting for them reach every node. They are queued already
    /// ([`send`](crate::driver::send)), so whatever is sent next still runs
    /// after them. They wait until the latest of their deadlines; then
    /// releases and withdraws not answered yet go on waiting until their
    /// node answers or their connection fails, at most until they are given
    /// up (rule 4 of [`send`](crate::driver::send)); any other request is
    /// dropped.
    ///
    /// They go to the drain, unless it runs on another runtime than this
    /// one: then to a task of their own.
    pub(crate) fn complete(&self, in_flight: FuturesUnordered<Sent>) {
        let Err(in_flight) = self.drain.submit(in_flight) else {
            return;
        };
        let Some(deadline) = in_flight.iter().map(Sent::deadline).max() else {
            return;
        };
        let task = async move {
            // Dropped before it ends, its runtime shuts down: what is left
            // may go out on blocking connections.
            let mut in_flight = RuntimeDrops(in_flight);
            let deadline = tokio::time::Instant::from_std(deadline);
            let all = async { while in_flight.0.next().await.is_some() {} };
            if tokio::time::timeout_at(deadline, all).await.is_ok() {
                return;
            }
            let unanswered: FuturesUnordered<Sent> = std::mem::take(&mut in_flight.0)
                .into_iter()
                .filter(Sent::must_arrive)
                .collect();
            let Some(give_up_at) = unanswered.iter().map(Sent::give_up_at).max() else {
                return;
            };
            debug!(
                requests = unanswered.len(),
                "releases past their deadline stay queued until their nodes answer"
            );
            in_flight.0 = unanswered;
            let wait = async { while in_flight.0.next().await.is_some() {} };
            let give_up_at = tokio::time::Instant::from_std(give_up_at);
            if tokio::time::timeout_at(give_up_at, wait).await.is_err() {
                // Given up where it may not block: forgotten.
                drop(std::mem::take(&mut in_flight.0));
            }
        };
        if self.spawn(task.in_current_span()).is_err() {
            warn!(
                "no Tokio runtime to complete requests on; releases among them are sent on \
                 blocking connections, a key anything else set expires at its TTL"
            );
        }
    }

    /// Waits until everything in the background is done: every task ended
    /// and the drain empty, each request answered or given up. A request the drain completes may have queued
    /// a resend meanwhile, so both are looked at again until both are
    /// empty.
    pub(crate) async fn shutdown(&self) {
        loop {
            self.tasks.close();
            self.tasks.wait().await;
            self.tasks.reopen();
            self.drain.idle().await;
            if self.tasks.is_empty() {
                return;
            }
        }
    }
}

/// Requests a task of the background owns: dropped with requests left in
/// it, the task was dropped before it ended, by its runtime shutting down.
struct RuntimeDrops(FuturesUnordered<Sent>);

impl Drop for RuntimeDrops {
    fn drop(&mut self) {
        let left = std::mem::take(&mut self.0);
        if !left.is_empty() {
            crate::node::as_runtime_drops(|| drop(left));
        }
    }
}
