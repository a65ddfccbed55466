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
//! Each waits at most the one [patience](patience) for its node.

use std::future::Future;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use redlock_core::Settings;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, debug, warn};

use crate::drain::Drain;
use crate::driver::Sent;

/// The patience of a client, the one rule for how long background work
/// waits for a node: one default TTL. A release, withdraw or leave past its
/// deadline waits that long for a stalled node to answer, and one that met
/// a broken connection waits that long for the next one; a thread that
/// blocks on a release (a guard dropped outside any runtime, the last
/// handle of a blocking client) waits no longer either. Past it, a key left
/// on the node expires by itself at its TTL, so waiting longer would gain
/// nothing, while a master paused under load cannot make the client hold
/// ever more requests.
pub(crate) fn patience(settings: &Settings) -> Duration {
    settings.default_ttl().as_duration()
}

/// Everything a client does in the background (see the [module](self)).
pub(crate) struct Background {
    drain: Drain,
    tasks: TaskTracker,
    patience: Duration,
}

impl Background {
    pub(crate) fn new(settings: &Settings) -> Self {
        let patience = patience(settings);
        Self {
            drain: Drain::new(patience),
            tasks: TaskTracker::new(),
            patience,
        }
    }

    /// The tasks, for a node's resends.
    pub(crate) fn tasks(&self) -> &TaskTracker {
        &self.tasks
    }

    /// The client's [patience](patience).
    pub(crate) fn patience(&self) -> Duration {
        self.patience
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
    /// node answers or their connection fails, at most the
    /// [patience](patience) (rule 4 of [`send`](crate::driver::send)); any
    /// other request is dropped.
    ///
    /// They go to the drain, unless it runs on another runtime than this
    /// one: then to a task of their own.
    pub(crate) fn complete(&self, in_flight: FuturesUnordered<Sent>) {
        let Err(mut in_flight) = self.drain.submit(in_flight) else {
            return;
        };
        let Some(deadline) = in_flight.iter().map(Sent::deadline).max() else {
            return;
        };
        let patience = self.patience;
        let task = async move {
            let deadline = tokio::time::Instant::from_std(deadline);
            let all = async { while in_flight.next().await.is_some() {} };
            if tokio::time::timeout_at(deadline, all).await.is_ok() {
                return;
            }
            let mut unanswered: FuturesUnordered<Sent> =
                in_flight.into_iter().filter(Sent::must_arrive).collect();
            if !unanswered.is_empty() {
                debug!(
                    requests = unanswered.len(),
                    "releases past their deadline stay queued until their nodes answer"
                );
                let wait = async { while unanswered.next().await.is_some() {} };
                let _ = tokio::time::timeout_at(deadline + patience, wait).await;
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
    /// and the drain empty, each request answered or past the
    /// [patience](patience). A request the drain completes may have queued
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
