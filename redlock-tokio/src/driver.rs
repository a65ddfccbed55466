//! Driving the core's state machines: fan requests out, feed replies and
//! timeouts back, stop as soon as the machine decides.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker, ready};
use std::time::Instant;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use redlock_core::{Machine, NodeErrorKind, Notice, Reply, Request, Response};
use tracing::{Level, debug};

use crate::Redlock;
use crate::metrics::{self, Voted};
use crate::node::Node;
use crate::notices::Waiter;

/// Sends one request to its node, at once: the request is in the node's
/// connection queue before this returns. The returned future yields the
/// node's reply, however late: deadlines are applied by the caller (the
/// state machine times the node out itself at its
/// [`poll_timeout`](Machine::poll_timeout); requests left to complete
/// in the background are bounded by [`Sent::deadline`]).
///
/// # The per-node order
///
/// For every node and every key, the commands reach the node in the order
/// the core emitted them: an acquire before the withdraw or release that
/// undoes it, an extend before the release. It holds because
///
/// 1. a request is queued here, when the core emits it, not at a later poll
///    by whoever owns the returned future (a `FuturesUnordered`, a
///    background task): the first poll below happens now, unconstrained by
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
///    is never dropped unsent: past its deadline it stays queued until its
///    node answers or its connection fails, at most until the core gives it
///    up ([`Request::give_up_at`]: what it undoes has expired by then)
///    ([`Background::complete`](crate::background::Background::complete)),
///    and if its runtime drops it first (the process is exiting), it is sent
///    on a blocking connection ([`Node::send_blocking`], the one place a
///    runtime's thread may block: see `node::blocking`). One that meets a
///    broken connection is sent again on the next one, until it is given up
///    ([`Node::resend_later`], a task the client's background owns); a runtime that shuts down drops the node's
///    connection first, and the resend then goes out on a blocking one. Any other request
///    may be dropped past its deadline; the connection then skips it if it
///    was not written yet, which keeps the order too.
///
/// `tests/tests/left_behind.rs` shows it under backpressure and storms of
/// cancellations; `order_under_backpressure` in this file breaks rule 1 on
/// purpose and sees the order break.
///
/// No timer per request: a round's requests share one deadline, so one
/// timer per round (in [`drive`]) or per background
/// batch is enough. Timers cost a lock on Tokio's timer wheel to register
/// and another to cancel.
pub(crate) fn send(nodes: &[Arc<Node>], request: Request) -> Sent {
    // The core only emits node ids below the node count it was built with,
    // which is the length of `nodes`.
    let node = Arc::clone(&nodes[request.node.0]);
    let deadline = request.deadline;
    let give_up_at = request.give_up_at;
    let must_arrive = request.command.must_arrive().then(|| request.clone());
    let sent_to = Arc::clone(&node);
    let mut future = Box::pin(async move {
        // The clock is read for the log line only, when someone listens.
        let started = tracing::enabled!(Level::DEBUG).then(crate::sim::now);
        // Unconstrained: Tokio's cooperative budget must not make the first
        // poll return before the request is queued.
        let reply = tokio::task::unconstrained(node.execute(&request)).await;
        // A broken connection is no answer from the node.
        if !matches!(&reply.result, Err(error) if error.kind == NodeErrorKind::Connection) {
            node.answered(crate::sim::now());
        }
        if request.command.must_arrive()
            && matches!(&reply.result, Err(error) if error.kind == NodeErrorKind::Connection)
        {
            // Maybe never sent, maybe run: sent again on the next
            // connection (rule 4).
            node.resend_later(request.clone());
        }
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
        Some(reply)
    });
    // The first poll queues the request (rule 1 above). Its waker does
    // nothing: whoever owns the future next polls it again with theirs.
    let mut context = Context::from_waker(Waker::noop());
    let state = match future.as_mut().poll(&mut context) {
        Poll::Ready(reply) => SentState::Done(Some(reply)),
        Poll::Pending => SentState::Pending(future),
    };
    Sent {
        deadline,
        give_up_at,
        state,
        node: Some(sent_to),
        must_arrive,
    }
}

/// A request already sent: its reply, or the future that waits for it.
pub(crate) struct Sent {
    /// The request's deadline: past it, the reply no longer counts.
    deadline: Instant,
    /// When it may be forgotten unanswered ([`Request::give_up_at`]).
    give_up_at: Instant,
    state: SentState,
    /// The node it was sent to (none in a test of the drain).
    node: Option<Arc<Node>>,
    /// The request, if it must reach its node
    /// ([`Command::must_arrive`](redlock_core::Command::must_arrive)).
    must_arrive: Option<Request>,
}

enum SentState {
    Done(Option<Option<Reply>>),
    Pending(Pin<Box<dyn Future<Output = Option<Reply>> + Send>>),
}

impl Sent {
    /// A request that `reply` answers, sent to no node: for a test of
    /// what completes requests in the background.
    #[cfg(test)]
    pub(crate) fn answered_by(
        deadline: Instant,
        reply: impl Future<Output = Option<Reply>> + Send + 'static,
    ) -> Self {
        Self {
            deadline,
            give_up_at: deadline,
            state: SentState::Pending(Box::pin(reply)),
            node: None,
            must_arrive: None,
        }
    }

    /// The request's deadline.
    pub(crate) fn deadline(&self) -> Instant {
        self.deadline
    }

    /// When the request may be forgotten unanswered
    /// ([`Request::give_up_at`]).
    pub(crate) fn give_up_at(&self) -> Instant {
        self.give_up_at
    }

    /// Whether the request must reach its node even past its deadline.
    pub(crate) fn must_arrive(&self) -> bool {
        self.must_arrive.is_some()
    }

    /// The request passed its deadline at `now` with no answer: its node
    /// hears of it ([`Node::overdue`]).
    pub(crate) fn overdue(&self, now: Instant) {
        if let (SentState::Pending(_), Some(node)) = (&self.state, &self.node) {
            node.overdue(now);
        }
    }
}

impl Future for Sent {
    type Output = Option<Reply>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let state = &mut self.get_mut().state;
        match state {
            SentState::Done(reply) => Poll::Ready(reply.take().flatten()),
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
        // unwritten, after the acquire it undoes. Anywhere else it was given
        // up (`give_up_at`): what it undoes has expired, and it stays queued
        // on its node's connection if it was written.
        if let (SentState::Pending(_), Some(node), Some(request)) =
            (&self.state, &self.node, &self.must_arrive)
            && crate::node::may_block()
        {
            node.send_blocking(request);
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

/// Runs any machine of the core to its final event, against the client's
/// nodes: the one driver loop of this crate (see
/// [`Machine`](redlock_core::Machine) for the calling order). Requests go out
/// the moment the machine queues them; answers, the machine's timer and
/// release notices go back in as they come. Requests still in flight at the
/// final event complete in the background (slow nodes get the lock or the
/// new TTL too), bounded by their deadlines.
///
/// Dropped before the final event (a cancelled future), it lets the
/// requests sent complete, abandons the machine and sends what the machine
/// queues then (an acquisition's releases), all in the background.
///
/// Every future of an acquire or a release is allocated whole, so each layer
/// here counts: kept under 1 KiB, a block comes from the allocator's
/// per-thread cache (see `Releasing`). So `drive` adds no state of its own
/// and `drive_with` holds the loop's state directly.
pub(crate) fn drive<'a, M: Machine>(
    machine: &'a mut M,
    client: &'a Redlock,
) -> impl Future<Output = M::Event> + 'a
where
    M::Event: std::fmt::Debug + Voted,
{
    drive_with(machine, client, |event| debug!(event = ?event, "retrying"))
}

/// [`drive`], handing every event before the final one to `on_event` as it
/// is drained: for a machine whose events along the way matter (a kept-alive
/// lock's extensions).
pub(crate) async fn drive_with<M: Machine>(
    machine: &mut M,
    client: &Redlock,
    mut on_event: impl FnMut(&M::Event) + Send,
) -> M::Event
where
    M::Event: std::fmt::Debug + Voted,
{
    #[cfg(feature = "planted-bugs")]
    if client
        .simulation()
        .is_some_and(crate::sim::Simulation::skips_cancelled_withdraws)
    {
        let mut planted = crate::planted::SkipsCancelledWithdraws::new(machine);
        let mut run = Run::new(&mut planted, client, &mut on_event);
        return Box::pin(run.drive()).await;
    }
    let mut run = Run::new(machine, client, &mut on_event);
    run.drive().await
}

struct Run<'a, M: Machine> {
    machine: &'a mut M,
    client: &'a Redlock,
    /// Sees every event but the final one.
    on_event: &'a mut (dyn FnMut(&M::Event) + Send),
    in_flight: FuturesUnordered<Sent>,
    /// Release notices on the channels the machine asked for.
    waiter: Option<Waiter>,
    finished: bool,
    /// The node errors of each round the machine reports, for the metrics.
    rounds: metrics::Rounds,
}

impl<'a, M: Machine> Run<'a, M>
where
    M::Event: std::fmt::Debug + Voted,
{
    fn new(
        machine: &'a mut M,
        client: &'a Redlock,
        on_event: &'a mut (dyn FnMut(&M::Event) + Send),
    ) -> Self {
        Self {
            machine,
            client,
            on_event,
            in_flight: FuturesUnordered::new(),
            waiter: None,
            finished: false,
            rounds: metrics::Rounds::new(),
        }
    }

    async fn drive(&mut self) -> M::Event {
        let mut timer = Timer::new();
        loop {
            self.send_requests();
            if let Some(channels) = self.machine.poll_listen()
                && let Some(notices) = self.client.notices()
            {
                self.waiter = Some(notices.wait_for(channels, self.machine.ordered_by_masters()));
            }
            // Nobody of this client waiting, a release's hand-over stays in
            // it: no lock taken, no channel built on the common path.
            if let Some(notices) = self.client.notices()
                && notices.someone_waits_anywhere()
            {
                while let Some(hand_over) = self.machine.poll_hand_over() {
                    notices.hand_over(&hand_over, crate::sim::now());
                }
            }
            let mut last = None;
            while let Some(event) = self.machine.poll_event() {
                self.rounds.event(self.client.node_metrics(), &event);
                if let Some(earlier) = last.replace(event) {
                    (self.on_event)(&earlier);
                }
            }
            if self.machine.is_done() {
                self.finished = true;
                if let (Some(waiter), Some(event)) = (&mut self.waiter, &last)
                    && event.granted()
                {
                    waiter.served();
                }
                self.client
                    .background()
                    .complete(std::mem::take(&mut self.in_flight));
                return last.expect("a machine that is done gave its final event");
            }
            if let Some(event) = last {
                (self.on_event)(&event);
            }
            let Some(at) = self.machine.poll_timeout() else {
                // A machine has a timeout until it is done.
                panic!("a machine that is not done has no timeout");
            };
            let sleep = timer.until(at);
            // Biased: a reply already in counts before the timer that
            // raced it, and a run is the same on every replay (Tokio's
            // random branch order would not be).
            tokio::select! {
                biased;
                Some(reply) = std::future::poll_fn(|cx| next_quietly(&mut self.in_flight, cx)),
                    if !self.in_flight.is_empty() => {
                    if let Some(reply) = reply {
                        self.machine.handle_reply(reply, crate::sim::now());
                    }
                }
                () = sleep => {
                    timer.fired();
                    let now = crate::sim::now();
                    self.machine.handle_timeout(now);
                    self.hand_off_expired(now);
                }
                Some((notice, at)) = next_notice(&mut self.waiter) => {
                    self.machine.handle_delivery(notice, at, crate::sim::now());
                }
            }
        }
    }
}

impl<M: Machine> Run<'_, M> {
    /// Sends every request the machine queued, the moment it queues it,
    /// unless the core's record of its node says not to
    /// ([`Node::admit`]): the machine then hears at once that the node was
    /// not asked ([`Reply::skipped`]).
    fn send_requests(&mut self) {
        let nodes = self.client.node_handles();
        // One clock read for the whole batch, not one per request.
        let mut now = None;
        while let Some(request) = self.machine.poll_request() {
            let now = *now.get_or_insert_with(crate::sim::now);
            if nodes[request.node.0].admit(&request, now) {
                self.in_flight.push(send(nodes, request));
            } else {
                self.machine.handle_reply(Reply::skipped(&request), now);
            }
        }
    }

    /// Requests past their deadline count for the machine no more: they go
    /// to the background like those of a finished operation (releases and
    /// withdraws still arrive, anything else is dropped), so that a machine
    /// that runs long (a keep-alive) does not hold a cluster node's turn for
    /// its key (rule 2 of [`send`]) with a request nobody waits for.
    fn hand_off_expired(&mut self, now: Instant) {
        if !self.in_flight.iter().any(|sent| sent.deadline() <= now) {
            return;
        }
        let (expired, live): (FuturesUnordered<Sent>, FuturesUnordered<Sent>) =
            std::mem::take(&mut self.in_flight)
                .into_iter()
                .partition(|sent| sent.deadline() <= now);
        self.in_flight = live;
        self.client.background().complete(expired);
    }
}

/// The next item of `set`, as [`StreamExt::poll_next_unpin`] gives it, but
/// without waking the caller for nothing. Having polled every future of
/// the set in one call (as it does after a push: a new future is ready to
/// be polled), `FuturesUnordered` wakes its owner, so that a set whose
/// futures keep waking themselves cannot starve other tasks; here that
/// would cost a trip through the scheduler for every round of requests and
/// every batch the drain takes. So the set is polled first with a waker that
/// does nothing, then again with the caller's, which then only registers it
/// unless a future was woken meanwhile. No wake is lost: the second poll
/// registers the caller's waker before it looks for woken futures, and wakes
/// the caller itself if it stops early.
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

/// The next release notice of `waiter`; never completes without a waiter.
async fn next_notice(waiter: &mut Option<Waiter>) -> Option<(Notice, Instant)> {
    match waiter {
        Some(waiter) => waiter.next().await,
        None => std::future::pending().await,
    }
}

impl<M: Machine> Drop for Run<'_, M> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        debug!("cancelled; releasing what is in flight");
        // Whatever was sent still runs (a withdraw of a failed attempt
        // among it: dropping it unwritten would skip it), then the releases
        // of the attempt in flight, queued here and now behind it on each
        // node. (Queued later by a task, a release could reach its deadline
        // on a busy machine and be dropped before its node saw it, after
        // the acquire it undoes.)
        let in_flight = std::mem::take(&mut self.in_flight);
        let now = crate::sim::now();
        self.machine.abandon(now);
        while let Some(request) = self.machine.poll_request() {
            let nodes = self.client.node_handles();
            // What must arrive is always admitted; anything else a known
            // slow node is not sent, and nobody reads its answer now.
            if !nodes[request.node.0].admit(&request, now) {
                continue;
            }
            in_flight.push(send(nodes, request));
        }
        // A release's waiters hear what it could not learn; an
        // acquisition's, that its withdraws, queued now, free the lock.
        if let Some(notices) = self.client.notices()
            && notices.someone_waits_anywhere()
        {
            while let Some(hand_over) = self.machine.poll_hand_over() {
                notices.hand_over(&hand_over, now);
            }
        }
        self.client.background().complete(in_flight);
    }
}

/// One timer for a whole round, re-armed only when the state machine's
/// [`poll_timeout`](Machine::poll_timeout) changes, rather than a new
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

/// Sends every request of `machine` (a release) on blocking connections,
/// the nodes in parallel: for when no Tokio runtime can (see
/// [`Node::send_blocking`]). Bounded by one connect timeout plus one
/// per-node timeout. The answers are not read.
pub(crate) fn release_blocking<M: Machine>(client: &Redlock, mut machine: M) {
    if !crate::node::check_may_block("a release on blocking connections") {
        return;
    }
    let mut requests = Vec::new();
    while let Some(request) = machine.poll_request() {
        requests.push(request);
    }
    let nodes = client.node_handles();
    std::thread::scope(|scope| {
        for request in &requests {
            let node = &nodes[request.node.0];
            scope.spawn(move || node.send_blocking(request));
        }
    });
}

#[cfg(test)]
mod tests;
