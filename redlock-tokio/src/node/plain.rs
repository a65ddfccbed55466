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

use futures::Stream;
use redlock_core::resp::{self, Parsed};
use redlock_core::{NodeError, NodeErrorKind, Response};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::oneshot;

use super::Wire;
use super::direct::Tag;

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
        let wire = Pump {
            stream,
            shared: Arc::clone(&shared),
            writing: Vec::new(),
            written: 0,
            landed: VecDeque::new(),
            ended: false,
            read: Vec::new(),
            start: 0,
            end: 0,
        };
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

/// The wire: writes what is queued, reads and hands out the answers.
struct Pump<S> {
    stream: S,
    shared: Arc<Mutex<Shared>>,
    /// What is being written, from `written` on.
    writing: Vec<u8>,
    written: usize,
    /// What was read, unparsed from `start` to `end`.
    read: Vec<u8>,
    start: usize,
    end: usize,
    /// Answers to tagged requests, not yet handed out.
    landed: VecDeque<Landed>,
    /// The connection ended: once `landed` is handed out, so is the wire.
    ended: bool,
}

/// How much is read at a time, at least.
const READ_CHUNK: usize = 16 * 1024;

impl<S: AsyncRead + AsyncWrite + Unpin> Pump<S> {
    /// Writes until nothing is queued or the stream is full. `Ok(true)`
    /// once every handle is gone and everything is written: the end.
    fn write(&mut self, cx: &mut Context<'_>) -> Result<bool, NodeError> {
        loop {
            if self.written == self.writing.len() {
                let mut shared = lock(&self.shared);
                if shared.out.is_empty() {
                    if shared.abandoned {
                        return Ok(true);
                    }
                    if !shared
                        .wire
                        .as_ref()
                        .is_some_and(|w| w.will_wake(cx.waker()))
                    {
                        shared.wire = Some(cx.waker().clone());
                    }
                    return Ok(false);
                }
                self.writing.clear();
                std::mem::swap(&mut self.writing, &mut shared.out);
                self.written = 0;
            }
            match Pin::new(&mut self.stream).poll_write(cx, &self.writing[self.written..]) {
                Poll::Ready(Ok(0)) => {
                    return Err(closed("the connection closed as it was written"));
                }
                Poll::Ready(Ok(n)) => self.written += n,
                Poll::Ready(Err(error)) => return Err(io_error(&error)),
                Poll::Pending => return Ok(false),
            }
        }
    }

    /// Reads until the stream has nothing more, handing out each answer.
    fn read(&mut self, cx: &mut Context<'_>) -> Result<(), NodeError> {
        loop {
            if self.end == self.read.len() {
                // Room: what is unparsed moves to the front, and the buffer
                // grows only for an answer longer than it.
                self.read.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
                if self.end + READ_CHUNK / 2 > self.read.len() {
                    self.read.resize((self.read.len() * 2).max(READ_CHUNK), 0);
                }
            }
            let mut buf = ReadBuf::new(&mut self.read[self.end..]);
            match Pin::new(&mut self.stream).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) => {
                    let got = buf.filled().len();
                    if got == 0 {
                        return Err(closed("the server closed the connection"));
                    }
                    self.end += got;
                    self.answers()?;
                }
                Poll::Ready(Err(error)) => return Err(io_error(&error)),
                Poll::Pending => return Ok(()),
            }
        }
    }

    /// Hands out every whole answer read.
    fn answers(&mut self) -> Result<(), NodeError> {
        while let Parsed::Answer(answer, used) = resp::parse(&self.read[self.start..self.end])? {
            self.start += used;
            self.deliver(answer)?;
        }
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        Ok(())
    }

    fn deliver(&mut self, answer: Result<Response, NodeError>) -> Result<(), NodeError> {
        let mut shared = lock(&self.shared);
        match shared.waiting.front_mut() {
            None => Err(NodeError::new(
                NodeErrorKind::Protocol,
                "an answer to no request (is this a Redis server?)",
            )),
            Some(Waiting::Tagged(_)) => {
                let Some(Waiting::Tagged(tag)) = shared.waiting.pop_front() else {
                    unreachable!("the front is tagged");
                };
                self.landed
                    .push_back((tag, answer.map_err(|error| (error, false))));
                Ok(())
            }
            Some(Waiting::Batch(batch)) => {
                batch.answers.push(answer);
                if batch.answers.len() == batch.count {
                    let Some(Waiting::Batch(batch)) = shared.waiting.pop_front() else {
                        unreachable!("the front batch");
                    };
                    // Nobody may wait any more: the answers are dropped.
                    let _ = batch.done.send(Ok(batch.answers));
                    for waiter in shared.room_waiters.drain(..) {
                        waiter.wake();
                    }
                }
                Ok(())
            }
        }
    }
}

impl<S> Pump<S> {
    /// The connection ended: every batch waiting fails with `error`, and
    /// so does every call from now on.
    fn end(&mut self, error: NodeError) {
        self.ended = true;
        let mut shared = lock(&self.shared);
        for waiting in shared.waiting.drain(..) {
            match waiting {
                Waiting::Batch(batch) => {
                    let _ = batch.done.send(Err(error.clone()));
                }
                Waiting::Tagged(tag) => self.landed.push_back((tag, Err((error.clone(), true)))),
            }
        }
        shared.out.clear();
        shared.ended = Some(error);
        for waiter in shared.room_waiters.drain(..) {
            waiter.wake();
        }
    }
}

impl<S> Drop for Pump<S> {
    /// Dropped before it ended (its connection replaced, the node closed):
    /// nothing will answer what waits.
    fn drop(&mut self) {
        if lock(&self.shared).ended.is_none() {
            self.end(closed("the connection was dropped"));
        }
    }
}

/// A connection's wire as the client's driver task polls it: it takes the
/// answers out whenever they come ([`poll_answer`](Io::poll_answer)), and
/// writes only once it has nothing else to do
/// ([`poll_write`](Io::poll_write)), so that what all its operations asked
/// of a node since its last write leaves in one write. As a [`Stream`] (a
/// connection being made, a test's), it writes and reads at each poll.
pub(crate) trait Io: Stream<Item = Landed> + Send + Unpin {
    /// Reads what came, and hands out the next answer to a tagged request,
    /// without writing: `None` once the connection ended and every answer
    /// is out.
    fn poll_answer(&mut self, cx: &mut Context<'_>) -> Poll<Option<Landed>>;

    /// Writes what is queued, until all of it is written or the stream is
    /// full (`cx` is then woken when it can go on). True when the
    /// connection ended meanwhile: answers wait to be handed out.
    fn poll_write(&mut self, cx: &mut Context<'_>) -> bool;

    /// Whether something is queued and not yet written.
    fn is_queued(&self) -> bool;
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> Io for Pump<S> {
    fn poll_answer(&mut self, cx: &mut Context<'_>) -> Poll<Option<Landed>> {
        if let Some(landed) = self.landed.pop_front() {
            return Poll::Ready(Some(landed));
        }
        if self.ended {
            return Poll::Ready(None);
        }
        if let Err(error) = self.read(cx) {
            self.end(error);
        }
        match self.landed.pop_front() {
            Some(landed) => Poll::Ready(Some(landed)),
            None if self.ended => Poll::Ready(None),
            None => Poll::Pending,
        }
    }

    fn is_queued(&self) -> bool {
        !self.ended && (self.written < self.writing.len() || !lock(&self.shared).out.is_empty())
    }

    fn poll_write(&mut self, cx: &mut Context<'_>) -> bool {
        if self.ended {
            return !self.landed.is_empty();
        }
        match self.write(cx) {
            Ok(false) => return false,
            Ok(true) => self.end(closed("the connection was closed")),
            Err(error) => self.end(error),
        }
        true
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> Stream for Pump<S> {
    type Item = Landed;

    /// Writes and reads, and hands out the answers to tagged requests, one
    /// at a time; ends once the connection did and every answer is out.
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Landed>> {
        let this = &mut *self;
        if this.landed.is_empty() && !this.ended {
            this.poll_write(cx);
        }
        this.poll_answer(cx)
    }
}

/// Polls `wire` until it ends, dropping what it hands out: for a wire
/// that carries no tagged request (a connection being made, a test's).
pub(crate) async fn until_end(wire: &mut Wire) {
    while futures::StreamExt::next(wire).await.is_some() {}
}

fn closed(what: &str) -> NodeError {
    NodeError::new(NodeErrorKind::Connection, what)
}

/// An I/O error as the node's: no connection.
pub(super) fn io_error(error: &std::io::Error) -> NodeError {
    NodeError::tidied(NodeErrorKind::Connection, &error.to_string())
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A connection over an in-memory stream of `buffer` bytes, its wire
    /// spawned (it runs once the test awaits), and the server's end.
    fn connected(buffer: usize) -> (Plain, tokio::task::JoinHandle<()>, tokio::io::DuplexStream) {
        let (ours, server) = tokio::io::duplex(buffer);
        let (plain, mut wire) = Plain::new(ours, None);
        (
            plain,
            tokio::spawn(async move { until_end(&mut wire).await }),
            server,
        )
    }

    fn ints(answers: Answers) -> Vec<i64> {
        answers
            .expect("the connection stands")
            .into_iter()
            .map(|answer| match answer {
                Ok(Response::Int(n)) => n,
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[tokio::test(flavor = "current_thread")]
    async fn batches_are_written_at_once_and_answered_in_order_whatever_the_reads() {
        let (plain, _wire, mut server) = connected(64);
        let first = plain.call(2, |out| out.extend_from_slice(b"A\r\nB\r\n"));
        let second = plain.call(1, |out| out.extend_from_slice(b"C\r\n"));
        // Neither call was polled: their bytes were queued as they were made.
        let mut read = vec![0; 9];
        server.read_exact(&mut read).await.unwrap();
        assert_eq!(read, b"A\r\nB\r\nC\r\n");
        // The answers arrive a byte at a time.
        let answers = b":1\r\n:2\r\n:3\r\n";
        let writing = tokio::spawn(async move {
            for byte in answers {
                server.write_all(&[*byte]).await.unwrap();
                tokio::task::yield_now().await;
            }
            server
        });
        assert_eq!(ints(first.await), [1, 2]);
        assert_eq!(ints(second.await), [3]);
        drop(writing.await);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn an_answer_to_no_request_ends_the_connection() {
        let (plain, wire, mut server) = connected(64);
        server.write_all(b"+hello\r\n").await.unwrap();
        wire.await.unwrap();
        let error = plain.call(1, |_| {}).await.unwrap_err();
        assert_eq!(error.kind, NodeErrorKind::Protocol, "{error}");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn garbage_and_a_closed_stream_fail_what_waits() {
        let (plain, _wire, mut server) = connected(64);
        let call = plain.call(2, |out| out.extend_from_slice(b"x"));
        server.write_all(b":1\r\nHTTP/1.1").await.unwrap();
        assert_eq!(call.await.unwrap_err().kind, NodeErrorKind::Protocol);

        let (plain, _wire, server) = connected(64);
        let call = plain.call(1, |out| out.extend_from_slice(b"x"));
        drop(server);
        assert_eq!(call.await.unwrap_err().kind, NodeErrorKind::Connection);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_last_handle_gone_what_was_queued_is_written_then_the_wire_ends() {
        let (plain, wire, mut server) = connected(4);
        drop(plain.call(1, |out| out.extend_from_slice(b"DEL k\r\n")));
        drop(plain);
        let mut read = Vec::new();
        server.read_to_end(&mut read).await.unwrap();
        assert_eq!(read, b"DEL k\r\n");
        wire.await.unwrap();
    }
}
