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

/// Sends one request to its node, at once: the request is in the node's
/// connection queue before this returns. The returned future yields the
/// node's reply, however late: the core applies the deadlines
/// ([`Output::Forget`](redlock_core::Output::Forget) drops it).
///
/// # The per-node order
///
/// For every node and every key, the commands reach the node in the order
/// the core emitted them: an acquire before the withdraw or release that
/// undoes it, an extend before the release. It holds because
///
/// 1. one task, the client's driver, takes every request from the core in
///    the order the core emitted it and queues it here, at once, not at a
///    later poll: the first poll below happens now, unconstrained by
///    Tokio's budget, and a plain master's connection queue makes no
///    sender wait for room until it holds
///    [`CONNECTION_QUEUE`](crate::node::CONNECTION_QUEUE) requests, which
///    only a master that stopped reading under heavy load reaches;
/// 2. a cluster node's request first waits for its key's turn
///    ([`Order::turn`](crate::order::Order::turn)), taken at that same first
///    poll: the cluster client routes and redirects each request on its own;
/// 3. a command refused with `NOSCRIPT` is sent again only while no later
///    command for its key was sent ([`Order`](crate::order::Order));
/// 4. a release or withdraw ([`Command::must_arrive`](redlock_core::Command::must_arrive))
///    is never dropped unsent: past its deadline the core still waits for
///    it, at most until it gives it up ([`Request::give_up_at`]: what it
///    undoes has expired by then); one that meets a broken connection the
///    core sends again on the next one; and if its runtime drops it first
///    (the process is exiting), it is sent on a blocking connection
///    ([`Node::send_blocking`], one of the few places a thread may block:
///    see `node::blocking`). Any other request may be dropped past its
///    deadline; the connection then skips it if it was not written yet,
///    which keeps the order too.
///
/// `tests/tests/left_behind.rs` shows it under backpressure and storms of
/// cancellations; `order_under_backpressure` in `driver/tests.rs` breaks
/// rule 1 on purpose and sees the order break.
pub(crate) fn send(nodes: &[Arc<Node>], request: Request) -> Sent {
    // The core only emits node ids below the node count it was built with,
    // which is the length of `nodes`.
    let node = Arc::clone(&nodes[request.node.0]);
    let must_arrive = request.command.must_arrive().then(|| request.clone());
    let sent_to = Arc::clone(&node);
    let mut future = Box::pin(async move {
        // The clock is read for the log line only, when someone listens.
        let started = tracing::enabled!(Level::DEBUG).then(crate::sim::now);
        // Unconstrained: Tokio's cooperative budget must not make the first
        // poll return before the request is queued.
        let reply = tokio::task::unconstrained(node.execute(&request)).await;
        if let Some(started) = started {
            debug!(
                node = node.name(),
                attempt = request.round.0,
                command = request.command.name(),
                latency_us = started.elapsed().as_micros() as u64,
                late = crate::sim::now() > request.deadline,
                via = reply.native.map_or("script", |native| native.name()),
                outcome = %Outcome(&reply.result),
                "node answered"
            );
        }
        reply
    });
    // The first poll queues the request (rule 1 above). Its waker does
    // nothing: whoever owns the future next polls it again with theirs.
    let mut context = Context::from_waker(Waker::noop());
    let state = match future.as_mut().poll(&mut context) {
        Poll::Ready(reply) => SentState::Done(Some(reply)),
        Poll::Pending => SentState::Pending(future),
    };
    Sent {
        state,
        node: sent_to,
        must_arrive,
    }
}

/// A request already sent: its reply, or the future that waits for it.
pub(crate) struct Sent {
    state: SentState,
    /// The node it was sent to.
    node: Arc<Node>,
    /// The request, if it must reach its node
    /// ([`Command::must_arrive`](redlock_core::Command::must_arrive)).
    must_arrive: Option<Request>,
}

enum SentState {
    Done(Option<Reply>),
    Pending(Pin<Box<dyn Future<Output = Reply> + Send>>),
}

impl Future for Sent {
    type Output = Reply;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let state = &mut self.get_mut().state;
        match state {
            SentState::Done(reply) => Poll::Ready(reply.take().expect("polled after its reply")),
            SentState::Pending(future) => {
                let reply = ready!(future.as_mut().poll(cx));
                *state = SentState::Done(None);
                Poll::Ready(reply)
            }
        }
    }
}

impl Drop for Sent {
    fn drop(&mut self) {
        // Dropped unanswered where a thread may block: its runtime is
        // shutting down, or there was none. The connection would skip it
        // unwritten, after the acquire it undoes. Anywhere else the core
        // gave it up (`give_up_at`): what it undoes has expired, and it
        // stays queued on its node's connection if it was written.
        if let (SentState::Pending(_), Some(request)) = (&self.state, &self.must_arrive)
            && crate::node::may_block()
        {
            self.node.send_blocking(request);
        }
    }
}

struct Outcome<'a>(&'a Result<Response, redlock_core::NodeError>);

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
