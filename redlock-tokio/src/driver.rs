//! Driving the core's state machines: fan requests out, feed replies and
//! timeouts back, stop as soon as the machine decides.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use redlock_core::{
    ExtendError, Extended, Extension, Release, ReleaseReport, Reply, Request, Response,
};
use tracing::{Instrument, Level, debug, warn};

use crate::node::Node;
use tokio_util::task::TaskTracker;

/// Sends one request to its node, at once: the request is queued on the
/// node's connection before this returns. The returned future yields the
/// node's reply, however late: deadlines are applied by the caller (the
/// state machine times the node out itself at its
/// [`poll_timeout`](RoundMachine::poll_timeout); requests left to complete
/// in the background are bounded by [`Sent::deadline`]).
///
/// Queuing here rather than at the first poll by the caller keeps every
/// node's requests in the order the state machines emit them, whatever
/// order the caller's `FuturesUnordered` or tasks poll them in: an acquire
/// is always ahead of the release that undoes it, also when the acquire
/// completes in the background and the release is sent by another task.
/// (Dropping a queued request before it is written makes the connection
/// skip it, which keeps that order too.)
///
/// No timer per request: a round's requests share one deadline, so one
/// timer per round (in [`drive`] and the acquire loop) or per background
/// batch is enough. Timers cost a lock on Tokio's timer wheel to register
/// and another to cancel.
pub(crate) fn send(nodes: &[Arc<Node>], request: Request) -> Sent {
    // The core only emits node ids below the node count it was built with,
    // which is the length of `nodes`.
    let node = Arc::clone(&nodes[request.node.0]);
    let deadline = request.deadline;
    let mut future = Box::pin(async move {
        // The clock is read for the log line only, when someone listens.
        let started = tracing::enabled!(Level::DEBUG).then(Instant::now);
        // Unconstrained: Tokio's cooperative budget must not make the first
        // poll return before the request is queued.
        let result = tokio::task::unconstrained(node.execute(&request)).await;
        if let Some(started) = started {
            debug!(
                node = node.name(),
                attempt = request.attempt.0,
                command = request.command.name(),
                latency_us = started.elapsed().as_micros() as u64,
                late = Instant::now() > request.deadline,
                outcome = %Outcome(&result),
                "node answered"
            );
        }
        Some(Reply::to(&request, result))
    });
    // The first poll queues the request (the connection's channel has room,
    // or the request waits its turn in the channel's fair queue). Its waker
    // does nothing: whoever owns the future next polls it again with theirs.
    let mut context = Context::from_waker(Waker::noop());
    let state = match future.as_mut().poll(&mut context) {
        Poll::Ready(reply) => SentState::Done(Some(reply)),
        Poll::Pending => SentState::Pending(future),
    };
    Sent { deadline, state }
}

/// A request already sent: its reply, or the future that waits for it.
pub(crate) struct Sent {
    /// The request's deadline: past it, the reply no longer counts.
    deadline: Instant,
    state: SentState,
}

enum SentState {
    Done(Option<Option<Reply>>),
    Pending(Pin<Box<dyn Future<Output = Option<Reply>> + Send>>),
}

impl Sent {
    /// The request's deadline.
    pub(crate) fn deadline(&self) -> Instant {
        self.deadline
    }
}

impl Future for Sent {
    type Output = Option<Reply>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.get_mut().state {
            SentState::Done(reply) => Poll::Ready(reply.take().flatten()),
            SentState::Pending(future) => future.as_mut().poll(cx),
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

/// A state machine that runs one round and ends with an outcome.
pub(crate) trait RoundMachine {
    type Outcome;
    /// Whether requests still in flight at this outcome should complete
    /// (in the background) rather than be dropped.
    fn completes_in_background(outcome: &Self::Outcome) -> bool;
    fn poll_request(&mut self) -> Option<Request>;
    fn poll_outcome(&mut self) -> Option<Self::Outcome>;
    fn poll_timeout(&self) -> Option<Instant>;
    fn handle_reply(&mut self, reply: Reply, now: Instant);
    fn handle_timeout(&mut self, now: Instant);
}

impl RoundMachine for Extension {
    type Outcome = Result<Extended, ExtendError>;
    fn completes_in_background(outcome: &Self::Outcome) -> bool {
        // The lock is ours: let the slow nodes get the new TTL too.
        outcome.is_ok()
    }
    fn poll_request(&mut self) -> Option<Request> {
        Extension::poll_request(self)
    }
    fn poll_outcome(&mut self) -> Option<Self::Outcome> {
        Extension::poll_outcome(self)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        Extension::poll_timeout(self)
    }
    fn handle_reply(&mut self, reply: Reply, now: Instant) {
        Extension::handle_reply(self, reply, now);
    }
    fn handle_timeout(&mut self, now: Instant) {
        Extension::handle_timeout(self, now);
    }
}

impl RoundMachine for Release {
    type Outcome = ReleaseReport;
    fn completes_in_background(_: &Self::Outcome) -> bool {
        // The report comes once every node answered or timed out.
        false
    }
    fn poll_request(&mut self) -> Option<Request> {
        Release::poll_request(self)
    }
    fn poll_outcome(&mut self) -> Option<Self::Outcome> {
        Release::poll_outcome(self)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        Release::poll_timeout(self)
    }
    fn handle_reply(&mut self, reply: Reply, now: Instant) {
        Release::handle_reply(self, reply, now);
    }
    fn handle_timeout(&mut self, now: Instant) {
        Release::handle_timeout(self, now);
    }
}

/// Runs a round to its outcome, which does not wait for slow nodes:
/// requests still in flight then complete in the background after a
/// success, and are dropped after a failure. Requests the machine queues
/// with its outcome (the releases after a lost extension) are sent in the
/// background.
pub(crate) async fn drive<M: RoundMachine>(
    machine: &mut M,
    nodes: &Arc<[Arc<Node>]>,
    background: &TaskTracker,
) -> M::Outcome {
    let mut in_flight = FuturesUnordered::new();
    let mut timer = Timer::new();
    loop {
        if let Some(outcome) = machine.poll_outcome() {
            let after: Vec<Request> = std::iter::from_fn(|| machine.poll_request()).collect();
            if M::completes_in_background(&outcome) {
                complete_in_background(in_flight);
            }
            spawn_releases(nodes, after, background);
            return outcome;
        }
        while let Some(request) = machine.poll_request() {
            in_flight.push(send(nodes, request));
        }
        let Some(at) = machine.poll_timeout() else {
            // Extension and Release have a timeout until their outcome is
            // out, and the outcome was not out just above.
            panic!("a round without an outcome has no timeout");
        };
        let sleep = timer.until(at);
        tokio::select! {
            Some(reply) = in_flight.next(), if !in_flight.is_empty() => {
                if let Some(reply) = reply {
                    machine.handle_reply(reply, Instant::now());
                }
            }
            () = sleep => {
                timer.fired();
                machine.handle_timeout(Instant::now());
            }
        }
    }
}

/// One timer for a whole round, re-armed only when the state machine's
/// [`poll_timeout`](RoundMachine::poll_timeout) changes, rather than a new
/// one at every reply.
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

/// Lets requests in flight complete in a background task, so that slow
/// nodes get the lock or the new TTL too. They are queued already
/// ([`send`]), so a release sent next still runs after them. The task ends
/// by the latest of their deadlines.
pub(crate) fn complete_in_background(in_flight: FuturesUnordered<Sent>) {
    let Some(deadline) = in_flight.iter().map(Sent::deadline).max() else {
        return;
    };
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        let deadline = tokio::time::Instant::from_std(deadline);
        runtime.spawn(
            async move {
                let _ = tokio::time::timeout_at(deadline, in_flight.for_each(|_| async {})).await;
            }
            .in_current_span(),
        );
    }
}

/// Sends release requests in a background task, so that nobody waits for
/// them. Without a Tokio runtime they cannot be sent: the keys then expire
/// at their TTL.
///
/// The releases are queued from the task, not here, since this also runs in
/// `Drop`, possibly while the runtime shuts down. Their order does not
/// matter: whatever they undo was queued before them ([`send`]). The task
/// ends by the latest of their deadlines.
pub(crate) fn spawn_releases(
    nodes: &Arc<[Arc<Node>]>,
    requests: Vec<Request>,
    background: &TaskTracker,
) {
    let Some(deadline) = requests.iter().map(|request| request.deadline).max() else {
        return;
    };
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        warn!(
            requests = requests.len(),
            "no Tokio runtime to send releases on; the key expires at its TTL"
        );
        return;
    };
    let nodes = Arc::clone(nodes);
    let deadline = tokio::time::Instant::from_std(deadline);
    background.spawn_on(
        async move {
            let sends: Vec<Sent> = requests
                .into_iter()
                .map(|request| send(&nodes, request))
                .collect();
            let _ = tokio::time::timeout_at(deadline, futures::future::join_all(sends)).await;
        }
        .in_current_span(),
        &runtime,
    );
}
