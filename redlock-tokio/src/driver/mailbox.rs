//! Where the driver puts an operation's messages for its handle: one small
//! allocation per operation, where a Tokio channel allocates a block of 32
//! messages up front.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;

use futures::task::AtomicWaker;

use super::Message;

struct Shared {
    queue: Mutex<VecDeque<Message>>,
    waker: AtomicWaker,
    /// The receiver is gone: messages are dropped (a final event dropped
    /// so releases what it grants).
    receiver_gone: AtomicBool,
    /// The sender is gone: nothing more comes.
    sender_gone: AtomicBool,
}

/// The driver's end.
pub(crate) struct Sender(Arc<Shared>);

/// The handle's end.
pub(crate) struct Receiver(Arc<Shared>);

/// A mailbox for one operation.
pub(crate) fn mailbox() -> (Sender, Receiver) {
    let shared = Arc::new(Shared {
        queue: Mutex::new(VecDeque::new()),
        waker: AtomicWaker::new(),
        receiver_gone: AtomicBool::new(false),
        sender_gone: AtomicBool::new(false),
    });
    (Sender(Arc::clone(&shared)), Receiver(shared))
}

impl Shared {
    fn queue(&self) -> std::sync::MutexGuard<'_, VecDeque<Message>> {
        // A push or a pop, which a panic cannot leave half done.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Sender {
    /// Puts `message` in the mailbox; dropped if its receiver is gone.
    pub(crate) fn send(&self, message: Message) {
        if self.0.receiver_gone.load(Ordering::Acquire) {
            return;
        }
        self.0.queue().push_back(message);
        // Gone meanwhile: its drop may have emptied the queue before the
        // push, so the message is dropped here.
        if self.0.receiver_gone.load(Ordering::Acquire) {
            let left = std::mem::take(&mut *self.0.queue());
            drop(left);
            return;
        }
        self.0.waker.wake();
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        self.0.sender_gone.store(true, Ordering::Release);
        self.0.waker.wake();
    }
}

impl Receiver {
    /// The next message; `None` once the sender is gone and nothing is left.
    pub(crate) async fn recv(&mut self) -> Option<Message> {
        std::future::poll_fn(|cx| {
            if let Some(message) = self.0.queue().pop_front() {
                return Poll::Ready(Some(message));
            }
            self.0.waker.register(cx.waker());
            if let Some(message) = self.0.queue().pop_front() {
                return Poll::Ready(Some(message));
            }
            if self.0.sender_gone.load(Ordering::Acquire) {
                return Poll::Ready(self.0.queue().pop_front());
            }
            Poll::Pending
        })
        .await
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.0.receiver_gone.store(true, Ordering::Release);
        // Dropped here, outside the lock: a final event releases its lock.
        let left = std::mem::take(&mut *self.0.queue());
        drop(left);
    }
}
