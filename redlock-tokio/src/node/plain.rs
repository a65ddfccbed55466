//! Our own connection to a plain master (over TCP, a Unix socket or a
//! simulation's stream): requests appended to one write buffer in the order
//! they are sent, and answers read back with the core's RESP reader
//! ([`redlock_core::resp`]), in order, a batch at a time.
//!
//! A request is in the buffer when [`Plain::call`] or [`Plain::send`]
//! returns: no queue that a sender waits on, so the per-node order
//! ([`driver::send`](crate::driver::send)) holds by construction. The
//! connection's wire ([`Plain::new`]) writes the buffer and reads the
//! answers; the client's driver task polls it beside everything else, and
//! takes from it the answers to what it sent with [`Plain::send`] (each with
//! its [`Tag`]): no future, channel or allocation per request. It ends when
//! the stream breaks, when the server sends garbage (every request waiting
//! then fails with the reason), or once every handle is gone and what they
//! queued is written.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker, ready};

use redlock_core::{NodeError, NodeErrorKind, Response};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::oneshot;

use super::Wire;
use super::direct::Tag;

mod pump;

use pump::Pump;
pub(crate) use pump::{Io, io_error, until_end};

/// What the node said to each command of a batch, in order; `Err` when the
/// connection ended first (it cannot be used again).
pub(crate) type Answers = Result<Vec<Result<Response, NodeError>>, NodeError>;

/// A handle on the connection; cloned, it is the same connection.
#[derive(Clone)]
pub(crate) struct Plain(Arc<Handle>);

/// The handles' share: when the last one goes, the wire writes what is
/// queued and ends.
struct Handle(Arc<Mutex<Shared>>);

impl Drop for Handle {
    fn drop(&mut self) {
        let mut shared = lock(&self.0);
        shared.abandoned = true;
        if let Some(wire) = shared.wire.take() {
            wire.wake();
        }
    }
}

struct Shared {
    /// Commands queued and not yet taken by the wire to write.
    out: Vec<u8>,
    /// What was sent and not yet answered in full, in order.
    waiting: VecDeque<Waiting>,
    /// Why the connection ended, once it has.
    ended: Option<NodeError>,
    /// Every handle is gone.
    abandoned: bool,
    /// The wire's waker, for when commands are queued.
    wire: Option<Waker>,
    /// The planted bug of a simulation: at most this many batches wait,
    /// and a sender beyond waits for room, which goes to the newest one
    /// waiting (its ticket, the highest in `deferred`) rather than in
    /// order.
    room: Option<usize>,
    deferred: std::collections::BTreeSet<u64>,
    next_ticket: u64,
    /// Senders waiting for room.
    room_waiters: Vec<Waker>,
}

/// What waits for answers: a batch of [`Plain::call`], or one request of
/// [`Plain::send`], whose answer the wire hands out with its tag.
enum Waiting {
    Batch(Batch),
    Tagged(Tag),
}

struct Batch {
    count: usize,
    answers: Vec<Result<Response, NodeError>>,
    done: oneshot::Sender<Answers>,
}

/// An answer to a request of [`Plain::send`], as the wire hands it out:
/// `Err` with `true` when the connection ended first.
pub(crate) type Landed = (Tag, Result<Response, (NodeError, bool)>);

fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    // Plain values changed in place without a call that could panic.
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Plain {
    /// A connection over `stream`, and its wire, which nothing polls yet.
    /// `room` bounds how many batches may wait at once (a simulation's
    /// planted bug only: a sender beyond it queues its commands when its
    /// owner next polls it, possibly after a later one's).
    pub(crate) fn new<S>(stream: S, room: Option<usize>) -> (Self, Wire)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let shared = Arc::new(Mutex::new(Shared {
            out: Vec::new(),
            waiting: VecDeque::new(),
            ended: None,
            abandoned: false,
            wire: None,
            room,
            deferred: std::collections::BTreeSet::new(),
            next_ticket: 0,
            room_waiters: Vec::new(),
        }));
        let wire = Pump::new(stream, Arc::clone(&shared));
        (Self(Arc::new(Handle(shared))), Box::new(wire))
    }

    /// Sends `count` commands, which `write` appends to the buffer it is
    /// given (as [`resp::encode`] does), as one batch: in the buffer when
    /// this returns. The future yields their answers.
    pub(crate) fn call(&self, count: usize, write: impl FnOnce(&mut Vec<u8>)) -> Call {
        let mut shared = lock(&self.0.0);
        if let Some(error) = &shared.ended {
            return Call::Ended(Some(error.clone()));
        }
        if shared.room.is_some() && (shared.is_full() || !shared.deferred.is_empty()) {
            let mut bytes = Vec::new();
            write(&mut bytes);
            let ticket = shared.next_ticket;
            shared.next_ticket += 1;
            shared.deferred.insert(ticket);
            return Call::Deferred(Deferred {
                plain: self.clone(),
                count,
                bytes,
                ticket,
            });
        }
        Call::Sent(shared.queue(count, write))
    }

    /// Sends requests, whose commands `write` appends to the buffer, in
    /// the order of `tags`: the wire hands out each answer with its tag.
    /// For the task that polls the wire only, which polls it next: the
    /// wire is not woken.
    /// False, with nothing written, when the connection ended or bounds
    /// its batches (a simulation's planted bug, which only
    /// [`call`](Self::call) plants).
    pub(crate) fn send(
        &self,
        write: impl FnOnce(&mut Vec<u8>),
        tags: impl Iterator<Item = Tag>,
    ) -> bool {
        let mut shared = lock(&self.0.0);
        if shared.ended.is_some() || shared.room.is_some() {
            return false;
        }
        write(&mut shared.out);
        shared.waiting.extend(tags.map(Waiting::Tagged));
        // No wake: the caller polls the wire next, in the same turn.
        true
    }
}

impl Shared {
    fn is_full(&self) -> bool {
        self.room.is_some_and(|room| self.waiting.len() >= room)
    }

    /// Queues a batch of `count` commands, which `write` appends.
    fn queue(
        &mut self,
        count: usize,
        write: impl FnOnce(&mut Vec<u8>),
    ) -> oneshot::Receiver<Answers> {
        let (done, answers) = oneshot::channel();
        write(&mut self.out);
        self.waiting.push_back(Waiting::Batch(Batch {
            count,
            answers: Vec::with_capacity(count),
            done,
        }));
        if let Some(wire) = self.wire.take() {
            wire.wake();
        }
        answers
    }
}

/// The answers of [`Plain::call`].
pub(crate) enum Call {
    Sent(oneshot::Receiver<Answers>),
    Ended(Option<NodeError>),
    /// Not queued yet: no room (a simulation's planted bug).
    Deferred(Deferred),
}

pub(crate) struct Deferred {
    plain: Plain,
    count: usize,
    bytes: Vec<u8>,
    ticket: u64,
}

impl Drop for Deferred {
    fn drop(&mut self) {
        let mut shared = lock(&self.plain.0.0);
        if shared.deferred.remove(&self.ticket) {
            for waiter in shared.room_waiters.drain(..) {
                waiter.wake();
            }
        }
    }
}

impl Future for Call {
    type Output = Answers;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Answers> {
        let sent = match &mut *self {
            Call::Sent(answers) => {
                return Poll::Ready(ready!(Pin::new(answers).poll(cx)).unwrap_or_else(|_| {
                    Err(NodeError::new(
                        NodeErrorKind::Connection,
                        "the connection closed",
                    ))
                }));
            }
            Call::Ended(error) => {
                return Poll::Ready(Err(error.take().expect("polled after its answer")));
            }
            Call::Deferred(deferred) => {
                let mut shared = lock(&deferred.plain.0.0);
                if let Some(error) = &shared.ended {
                    Call::Ended(Some(error.clone()))
                } else if shared.is_full() || shared.deferred.last() != Some(&deferred.ticket) {
                    shared.room_waiters.push(cx.waker().clone());
                    return Poll::Pending;
                } else {
                    shared.deferred.remove(&deferred.ticket);
                    let bytes = std::mem::take(&mut deferred.bytes);
                    Call::Sent(shared.queue(deferred.count, |out| out.extend_from_slice(&bytes)))
                }
            }
        };
        *self = sent;
        self.poll(cx)
    }
}

#[cfg(test)]
mod tests;
