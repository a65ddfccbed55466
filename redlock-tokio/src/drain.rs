//! One drain per client: the requests still in flight when a machine
//! finishes (slow nodes after a decision, the releases of a dropped guard or
//! of a cancelled acquire) complete in one long-lived task, not in a task
//! spawned per operation.
//!
//! A spawned task costs an allocation, a trip through the scheduler, a
//! [`TaskTracker`](tokio_util::task::TaskTracker) token and a timer on
//! Tokio's timer wheel, for requests that mostly answer a few microseconds
//! later. Here an operation hands its requests over as one [`Batch`] (the
//! driver's own set of futures, moved, not copied) under a short lock; the
//! drain keeps one timer, set for the earliest deadline it knows, and looks
//! at the batches only when it fires.
//!
//! Handing over wakes nobody on the common path. The operation first polls
//! its requests itself, with a waker that wakes the drain
//! ([`Shared`]'s [`Wake`]): what has answered already is done there, and
//! what has not will wake the drain when it answers. Only a batch whose
//! deadline comes before the drain's timer fires wakes the drain at once,
//! so that its deadline is kept even if no node ever answers. A drain
//! asleep has taken every batch handed over before it went to sleep
//! ([`Task`]'s last look at the inbox), so a batch waits in the inbox no
//! longer than until one of its replies or the drain's timer.
//!
//! What it keeps of [`send`](crate::driver::send)'s rule 4: a batch waits
//! until its deadline (the latest of its requests'); then its releases and
//! withdraws ([`Command::must_arrive`](redlock_core::Command::must_arrive))
//! not answered yet go on waiting until the core gives them up
//! ([`Request::give_up_at`](redlock_core::Request::give_up_at): what they
//! undo has expired by then), and any other request is dropped. Given up,
//! a request is forgotten, not sent again: it is queued on its node's
//! connection already. Only one that its runtime drops unanswered as it
//! shuts down (it drops the drain) is sent on a blocking connection
//! ([`Sent`]'s `Drop`, under [`as_runtime_drops`]).
//!
//! The drain runs on the runtime of the operation that first needed it, and
//! ends when its client is dropped and its batches are done, or when that
//! runtime shuts down; the next operation starts another. Requests of an
//! operation on another runtime are not mixed in (their timers belong to
//! their runtime, which may shut down first): the caller completes them in a
//! task of their own ([`Drain::submit`] gives them back to the client's
//! [`Background`](crate::background::Background)).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Instant;

use futures::stream::FuturesUnordered;
use tokio::sync::oneshot;
use tracing::debug;

use crate::driver::{Sent, Timer, next_quietly};
use crate::node::as_runtime_drops;

/// The drain of one client; dropping it (the client is gone) lets its task
/// end once its batches are done.
pub(crate) struct Drain {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Batches handed over and not taken by the task yet.
    inbox: Vec<Batch>,
    /// The task's waker, taken by whoever wakes it: present while the
    /// task sleeps.
    waker: Option<Waker>,
    /// While the task sleeps, when its timer wakes it, if it is armed.
    wakes_by: Option<Instant>,
    /// The runtime the task runs on, while it runs.
    runtime: Option<tokio::runtime::Handle>,
    /// The client is gone: the task ends once it has nothing left.
    closed: bool,
    /// Told when no batch is left at all ([`Drain::idle`]).
    idle: Vec<oneshot::Sender<()>>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update under this lock is a push, a take or an assignment:
        // a panic cannot leave the state half-written.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Wakes the drain's task, whichever it is: the waker a batch's requests
/// are first polled with ([`Drain::submit`]), before the task takes the
/// batch and polls it with its own.
impl Wake for Shared {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let waker = self.lock().waker.take();
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// The requests of one operation still in flight, completed together.
struct Batch {
    in_flight: FuturesUnordered<Sent>,
    /// Before it: wait for every request. After it: a fresh batch keeps its
    /// requests that must arrive, until they are given up; a late batch is
    /// dropped.
    deadline: Instant,
    /// Past its first deadline: only requests that must arrive are left.
    late: bool,
}

impl Future for Batch {
    /// Whether the batch was late.
    type Output = bool;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<bool> {
        while let Some(_reply) = futures::ready!(next_quietly(&mut self.in_flight, cx)) {}
        Poll::Ready(self.late)
    }
}

impl Drain {
    pub(crate) fn new() -> Self {
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// Hands `in_flight` over to the drain, which completes it in the
    /// background; starts the drain on the current runtime if none runs.
    /// Gives `in_flight` back when there is no runtime or when the drain
    /// runs on another one.
    pub(crate) fn submit(
        &self,
        mut in_flight: FuturesUnordered<Sent>,
    ) -> Result<(), FuturesUnordered<Sent>> {
        // Polled here first, with a waker that wakes the drain: replies in
        // already cost no trip through the drain, and those to come wake it.
        let waker = Waker::from(Arc::clone(&self.shared));
        let mut context = Context::from_waker(&waker);
        while let Poll::Ready(Some(_reply)) = next_quietly(&mut in_flight, &mut context) {}
        let Some(deadline) = in_flight.iter().map(Sent::deadline).max() else {
            return Ok(());
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return Err(in_flight);
        };
        let here = runtime.id();
        let batch = Batch {
            in_flight,
            deadline,
            late: false,
        };
        let mut state = self.shared.lock();
        match &state.runtime {
            Some(there) if there.id() == here => {
                state.inbox.push(batch);
                // Asleep, the task wakes on a reply of the batch or at its
                // timer; a deadline before the timer needs it now.
                let waker = match state.wakes_by {
                    Some(at) if at <= deadline => None,
                    _ => state.waker.take(),
                };
                drop(state);
                if let Some(waker) = waker {
                    waker.wake();
                }
                Ok(())
            }
            Some(_) => Err(batch.in_flight),
            None => {
                state.runtime = Some(runtime.clone());
                state.inbox.push(batch);
                drop(state);
                // Spawned on a runtime that is shutting down, the task is
                // dropped at once: its `Drop` empties the inbox.
                runtime.spawn(Task {
                    shared: Arc::clone(&self.shared),
                    batches: FuturesUnordered::new(),
                    intake: Vec::new(),
                    timer: Timer::new(),
                    check_at: None,
                    fresh: 0,
                    late: 0,
                    idle: Vec::new(),
                });
                Ok(())
            }
        }
    }

    /// The runtime the drain runs on, while it runs: the requests it
    /// completes are in flight there, and a request sent on that runtime
    /// goes to each node after them.
    pub(crate) fn runtime(&self) -> Option<tokio::runtime::Handle> {
        self.shared.lock().runtime.clone()
    }

    /// Waits until nothing is left in the drain.
    pub(crate) async fn idle(&self) {
        let (told, waker) = {
            let mut state = self.shared.lock();
            if state.runtime.is_none() {
                return;
            }
            let (tell, told) = oneshot::channel();
            state.idle.push(tell);
            (told, state.waker.take())
        };
        if let Some(waker) = waker {
            waker.wake();
        }
        // An error: the drain was dropped with its runtime, which sent what
        // it held on blocking connections.
        let _ = told.await;
    }
}

impl Drop for Drain {
    fn drop(&mut self) {
        let waker = {
            let mut state = self.shared.lock();
            state.closed = true;
            state.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// The drain's task.
struct Task {
    shared: Arc<Shared>,
    batches: FuturesUnordered<Batch>,
    /// The inbox, swapped out under the lock (its buffer is reused).
    intake: Vec<Batch>,
    /// One timer, for the earliest deadline known when it was set; batches
    /// that complete first leave it set (it then fires for nothing).
    timer: Timer,
    check_at: Option<Instant>,
    /// Batches before their deadline.
    fresh: usize,
    /// Batches past it, their requests that must arrive waiting.
    late: usize,
    idle: Vec<oneshot::Sender<()>>,
}

impl Future for Task {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let task = self.get_mut();
        loop {
            let closed = {
                let mut state = task.shared.lock();
                std::mem::swap(&mut state.inbox, &mut task.intake);
                match &state.waker {
                    Some(waker) if waker.will_wake(cx.waker()) => {}
                    _ => state.waker = Some(cx.waker().clone()),
                }
                task.idle.append(&mut state.idle);
                state.closed
            };
            for batch in task.intake.drain(..) {
                task.fresh += 1;
                if task.check_at.is_none_or(|at| batch.deadline < at) {
                    task.check_at = Some(batch.deadline);
                }
                task.batches.push(batch);
            }
            while let Poll::Ready(Some(late)) = next_quietly(&mut task.batches, cx) {
                if late {
                    task.late -= 1;
                } else {
                    task.fresh -= 1;
                }
            }
            let mut expired = false;
            if let Some(at) = task.check_at {
                if task.batches.is_empty() {
                    task.check_at = None;
                } else if task.timer.until(at).poll(cx).is_ready() {
                    task.timer.fired();
                    task.expire(crate::sim::now());
                    expired = true;
                }
            }
            if task.fresh == 0 && task.late == 0 {
                for tell in task.idle.drain(..) {
                    let _ = tell.send(());
                }
            }
            if closed && task.batches.is_empty() {
                return Poll::Ready(());
            }
            if !expired {
                // Asleep only with the inbox empty: a batch handed over
                // while the task ran counted on it to look (`submit`).
                let mut state = task.shared.lock();
                if state.inbox.is_empty() {
                    // The timer is armed for `check_at`, polled above.
                    state.wakes_by = task.check_at;
                    return Poll::Pending;
                }
                continue;
            }
            // Expired batches changed the set: poll it, and the timer for
            // the next deadline, again.
        }
    }
}

impl Task {
    /// Takes the batches past their deadline out: a fresh one keeps its
    /// requests that must arrive, until they are given up; a late one is
    /// dropped (its requests stay queued on their connections, nobody
    /// waiting for their answers). Sets the timer's next check to the earliest deadline
    /// left.
    fn expire(&mut self, now: Instant) {
        let mut next: Option<Instant> = None;
        let mut keep = |batch: Batch, batches: &mut FuturesUnordered<Batch>| {
            next = Some(next.map_or(batch.deadline, |at| at.min(batch.deadline)));
            batches.push(batch);
        };
        for batch in std::mem::take(&mut self.batches) {
            if batch.deadline > now {
                keep(batch, &mut self.batches);
            } else if batch.late {
                self.late -= 1;
                debug!(
                    requests = batch.in_flight.len(),
                    "releases unanswered until what they undo expired; given up"
                );
            } else {
                self.fresh -= 1;
                // What the nodes left unanswered by its deadline: the core
                // counts it toward knowing a node slow.
                for sent in batch.in_flight.iter() {
                    sent.overdue(now);
                }
                let unanswered: FuturesUnordered<Sent> = batch
                    .in_flight
                    .into_iter()
                    .filter(Sent::must_arrive)
                    .collect();
                if !unanswered.is_empty() {
                    debug!(
                        requests = unanswered.len(),
                        "releases past their deadline stay queued until their nodes answer"
                    );
                    self.late += 1;
                    let give_up_at = unanswered.iter().map(Sent::give_up_at).max();
                    let late = Batch {
                        in_flight: unanswered,
                        deadline: give_up_at.unwrap_or(batch.deadline),
                        late: true,
                    };
                    keep(late, &mut self.batches);
                }
            }
        }
        self.check_at = next;
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        // Ended, or dropped by its runtime (shutting down): the next
        // operation starts another drain. What was handed over and not
        // taken yet is dropped here, outside the lock, and so are the
        // batches: left only where the runtime shuts down, so their
        // releases may go out on blocking connections.
        let batches = std::mem::take(&mut self.batches);
        let (inbox, idle) = {
            let mut state = self.shared.lock();
            state.runtime = None;
            state.waker = None;
            state.wakes_by = None;
            (
                std::mem::take(&mut state.inbox),
                std::mem::take(&mut state.idle),
            )
        };
        drop(idle);
        as_runtime_drops(|| {
            drop(inbox);
            drop(batches);
        });
    }
}

#[cfg(test)]
mod tests {
    //! The drain's hand-over without a server: requests are futures that
    //! answer when a test says so, in paused time.

    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use super::*;

    /// A request that never answers, and tells when it is dropped.
    fn unanswered(deadline: Instant, dropped: &Arc<AtomicBool>) -> Sent {
        struct Flag(Arc<AtomicBool>);
        impl Drop for Flag {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let flag = Flag(Arc::clone(dropped));
        Sent::answered_by(deadline, async move {
            let _flag = flag;
            std::future::pending().await
        })
    }

    fn batch(requests: impl IntoIterator<Item = Sent>) -> FuturesUnordered<Sent> {
        requests.into_iter().collect()
    }

    /// Lets the drain's task run.
    async fn settle() {
        for _ in 0..8 {
            tokio::task::yield_now().await;
        }
    }

    /// Hands `requests` to the drain, which runs on this runtime.
    async fn hand_over(drain: &Drain, requests: impl IntoIterator<Item = Sent>) {
        assert!(drain.submit(batch(requests)).is_ok(), "the drain runs here");
        settle().await;
    }

    /// Puts the drain to sleep with its timer set for 10 s after `start`,
    /// for a request that never answers; tells when that one is dropped.
    async fn asleep_for_10_s(drain: &Drain, start: Instant) -> Arc<AtomicBool> {
        let dropped = Arc::new(AtomicBool::new(false));
        hand_over(
            drain,
            [unanswered(start + Duration::from_secs(10), &dropped)],
        )
        .await;
        assert!(drain.shared.lock().waker.is_some(), "the drain sleeps");
        dropped
    }

    #[tokio::test(start_paused = true)]
    async fn requests_answered_at_hand_over_start_no_drain() {
        let drain = Drain::new();
        let deadline = crate::sim::now() + Duration::from_secs(1);
        let answered = batch([Sent::answered_by(deadline, async { None })]);
        assert!(drain.submit(answered).is_ok());
        assert!(
            drain.runtime().is_none(),
            "nothing was left to complete: no task"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_due_before_the_drains_timer_is_dropped_at_its_own_deadline() {
        let drain = Drain::new();
        let start = crate::sim::now();
        let long = asleep_for_10_s(&drain, start).await;
        // Due at 1 s: it must not wait for the timer of 10 s.
        let short = Arc::new(AtomicBool::new(false));
        hand_over(&drain, [unanswered(start + Duration::from_secs(1), &short)]).await;
        tokio::time::sleep_until((start + Duration::from_millis(1_100)).into()).await;
        settle().await;
        assert!(short.load(Ordering::SeqCst), "dropped at its deadline");
        assert!(!long.load(Ordering::SeqCst), "kept until its own");
        tokio::time::sleep_until((start + Duration::from_millis(10_100)).into()).await;
        settle().await;
        assert!(long.load(Ordering::SeqCst));
    }

    #[tokio::test(start_paused = true)]
    async fn a_reply_wakes_the_drain_for_a_batch_it_has_not_taken() {
        let drain = Drain::new();
        let start = crate::sim::now();
        // The drain asleep, its timer set for 10 s: a batch due later is
        // handed over without waking it.
        let long = asleep_for_10_s(&drain, start).await;
        let (answer, answered) = oneshot::channel::<()>();
        let done = Arc::new(AtomicBool::new(false));
        let seen = Arc::clone(&done);
        let late = Sent::answered_by(start + Duration::from_secs(20), async move {
            let _ = answered.await;
            seen.store(true, Ordering::SeqCst);
            None
        });
        hand_over(&drain, [late]).await;
        assert!(
            drain.shared.lock().waker.is_some(),
            "the drain still sleeps"
        );
        tokio::time::sleep_until((start + Duration::from_secs(1)).into()).await;
        answer.send(()).expect("the request waits");
        settle().await;
        assert!(
            done.load(Ordering::SeqCst),
            "completed at its reply, not at the drain's timer"
        );
        assert!(!long.load(Ordering::SeqCst));
    }
}
