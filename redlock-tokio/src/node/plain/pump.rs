//! The wire of our own connection: it writes what is queued, reads the
//! answers with the core's RESP reader and hands each out, in order.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures::Stream;
use redlock_core::resp::{self, Parsed};
use redlock_core::{NodeError, NodeErrorKind, Response};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{Landed, Shared, Waiting, lock};
use crate::node::Wire;

/// The wire: writes what is queued, reads and hands out the answers.
pub(super) struct Pump<S> {
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

impl<S> Pump<S> {
    pub(super) fn new(stream: S, shared: Arc<Mutex<Shared>>) -> Self {
        Self {
            stream,
            shared,
            writing: Vec::new(),
            written: 0,
            landed: VecDeque::new(),
            ended: false,
            read: Vec::new(),
            start: 0,
            end: 0,
        }
    }
}

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
pub(crate) fn io_error(error: &std::io::Error) -> NodeError {
    NodeError::tidied(NodeErrorKind::Connection, &error.to_string())
}
