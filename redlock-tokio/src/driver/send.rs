//! Putting one request on its node's connection, at once, and what waits
//! for its answer.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker, ready};
use std::time::Instant;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use redlock_core::{Reply, Request, Response};
use tracing::{Level, debug};

use crate::node::Node;

/// Sends requests to their node (one node: the driver batches per node),
/// at once: they are in the node's connection queue, in this order, before
/// this returns, as one pipeline where there are several (one message to
/// the connection, one write). The returned future yields the node's
/// replies, in the same order, however late: the core applies the
/// deadlines ([`Output::Forget`](redlock_core::Output::Forget) drops them,
/// once every request of the batch is forgotten).
///
/// # The per-node order
///
/// For every node and every key, the commands reach the node in the order
/// the core emitted them: an acquire before the withdraw or release that
/// undoes it, an extend before the release. It holds because
///
/// 1. one task, the client's driver, takes every request from the core in
///    the order the core emitted it, keeps that order in each node's batch
///    of the turn, and queues each batch at the end of the turn that
///    emitted it, before it takes anything more from the core, and at once,
///    not at a later poll: a batch is appended whole to the connection's
///    write buffer (our own connection to a plain master, `node::plain`,
///    which makes no sender wait: straight from the driver,
///    `Node::send_tagged`, or here, where the first poll below happens now,
///    unconstrained by Tokio's budget), or is one message in the `redis` crate's
///    queue over TLS, which makes no sender wait for room until it holds
///    [`CONNECTION_QUEUE`](crate::node::CONNECTION_QUEUE) messages (only a
///    master that stopped reading under heavy load reaches that);
/// 2. the core sends a cluster node one request per lock key at a time,
///    the next once the one before was answered or forgotten: the cluster
///    client routes and redirects each request on its own;
/// 3. a command refused with `NOSCRIPT` is sent again by the core, only
///    while no later command for its key was sent to the node
///    ([`Client::handle_reply`](redlock_core::Client::handle_reply));
/// 4. a release or withdraw ([`Command::must_arrive`](redlock_core::Command::must_arrive))
///    is never dropped unsent: past its deadline the core still waits for
///    it, at most until it gives it up ([`Request::give_up_at`]: what it
///    undoes has expired by then); one that meets a broken connection the
///    core sends again on the next one; and if its runtime drops the
///    driver first (the process is exiting), the core gives it up to the
///    driver's end ([`Client::take_owed`](redlock_core::Client::take_owed)),
///    which sends it on a blocking connection ([`Node::send_blocking`], one
///    of the few places a thread may block: see `node::blocking`). Any other request may be dropped past its
///    deadline; the connection then skips it if it was not written yet,
///    which keeps the order too.
///
/// One task means one at a time: a task started while another still runs
/// (a release that came after the shutdown began) waits for it to end, and
/// takes over its connections' wires.
///
/// `tests/tests/left_behind.rs` shows it under backpressure and storms of
/// cancellations; `order_under_backpressure` in `driver/tests.rs` breaks
/// rule 1 on purpose and sees the order break, and
/// `a_release_during_the_shutdown_*` in `tests/tests/shutdown.rs` sees two
/// tasks overlap with the planted bug `DriverTasksOverlap`.
pub(crate) fn send(nodes: &[Arc<Node>], requests: Vec<Request>) -> Sent {
    // The core only emits node ids below the node count it was built with,
    // which is the length of `nodes`; the driver batches per node.
    let node = Arc::clone(&nodes[requests[0].node.0]);
    debug_assert!(
        requests
            .iter()
            .all(|request| request.node == requests[0].node)
    );
    let mut future: Pin<Box<dyn Future<Output = Vec<Reply>> + Send>> = Box::pin(async move {
        // The clock is read for the log line only, when someone listens.
        let started = tracing::enabled!(Level::DEBUG).then(crate::sim::now);
        // Unconstrained: Tokio's cooperative budget must not make the first
        // poll return before the requests are queued. One request goes as
        // it is; more go as one pipeline (never to a cluster node: it
        // routes each request on its own, so the driver sends them one by
        // one, each in its key's turn).
        // A request that waits for the node's AOF goes with its `WAITAOF`
        // as a pipeline too (never to a cluster node: refused at build).
        let replies = match &requests[..] {
            [request] if !request.aof => {
                vec![tokio::task::unconstrained(node.execute(request)).await]
            }
            // Boxed: inline, the pipeline's state would grow the future of
            // every single request, the common case, which is allocated
            // and moved whole.
            _ => Box::pin(tokio::task::unconstrained(node.execute_many(&requests))).await,
        };
        if let Some(started) = started {
            for (request, reply) in requests.iter().zip(&replies) {
                debug!(
                    node = node.name(),
                    attempt = request.round.0,
                    command = request.command.name(),
                    latency_us = started.elapsed().as_micros() as u64,
                    late = crate::sim::now() > request.deadline,
                    batch = requests.len(),
                    via = reply.native.map_or("script", |native| native.name()),
                    outcome = %Outcome(&reply.result),
                    "node answered"
                );
            }
        }
        replies
    });
    // The first poll queues the requests (rule 1 above). Its waker does
    // nothing: whoever owns the future next polls it again with theirs.
    let mut context = Context::from_waker(Waker::noop());
    let state = match future.as_mut().poll(&mut context) {
        Poll::Ready(replies) => SentState::Done(Some(replies)),
        Poll::Pending => SentState::Pending(future),
    };
    Sent { state }
}

/// Requests already sent to one node: their replies, or the future that
/// waits for them.
pub(crate) struct Sent {
    state: SentState,
}

enum SentState {
    Done(Option<Vec<Reply>>),
    Pending(Pin<Box<dyn Future<Output = Vec<Reply>> + Send>>),
}

impl Future for Sent {
    type Output = Vec<Reply>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let state = &mut self.get_mut().state;
        match state {
            SentState::Done(replies) => {
                Poll::Ready(replies.take().expect("polled after its replies"))
            }
            SentState::Pending(future) => {
                let replies = ready!(future.as_mut().poll(cx));
                *state = SentState::Done(None);
                Poll::Ready(replies)
            }
        }
    }
}

/// A node's answer, for the log.
pub(super) struct Outcome<'a>(pub(super) &'a Result<Response, redlock_core::NodeError>);

impl std::fmt::Display for Outcome<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Ok(response) => write!(f, "{response:?}"),
            Err(error) => write!(f, "error: {error}"),
        }
    }
}

/// One timer, re-armed only when the instant asked for changes, rather
/// than a new one at every turn.
pub(crate) struct Timer {
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    armed: Option<Instant>,
}

impl Timer {
    pub(crate) fn new() -> Self {
        Self {
            sleep: None,
            armed: None,
        }
    }

    /// The timer, set to fire at `at`.
    pub(crate) fn until(&mut self, at: Instant) -> Pin<&mut tokio::time::Sleep> {
        let deadline = tokio::time::Instant::from_std(at);
        let sleep = match &mut self.sleep {
            Some(sleep) => {
                if self.armed != Some(at) {
                    sleep.as_mut().reset(deadline);
                }
                sleep
            }
            none => none.insert(Box::pin(tokio::time::sleep_until(deadline))),
        };
        self.armed = Some(at);
        sleep.as_mut()
    }

    /// To be called when it fired: the next [`until`](Self::until) re-arms
    /// it even for the same instant.
    pub(crate) fn fired(&mut self) {
        self.armed = None;
    }
}

/// The next item of `set`, as [`StreamExt::poll_next_unpin`] gives it, but
/// without waking the caller for nothing. Having polled every future of
/// the set in one call (as it does after a push: a new future is ready to
/// be polled), `FuturesUnordered` wakes its owner, so that a set whose
/// futures keep waking themselves cannot starve other tasks; here that
/// would cost a trip through the scheduler for every batch of requests.
/// So the set is polled first with a waker that does nothing, then again
/// with the caller's, which then only registers it unless a future was
/// woken meanwhile. No wake is lost: the second poll registers the
/// caller's waker before it looks for woken futures, and wakes the caller
/// itself if it stops early.
pub(crate) fn next_quietly<F: Future>(
    set: &mut FuturesUnordered<F>,
    cx: &mut Context<'_>,
) -> Poll<Option<F::Output>> {
    let mut quiet = Context::from_waker(Waker::noop());
    if let Poll::Ready(item) = set.poll_next_unpin(&mut quiet) {
        return Poll::Ready(item);
    }
    set.poll_next_unpin(cx)
}
