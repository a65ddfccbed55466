//! The order of one node's commands for each lock key, kept across NOSCRIPT.
//!
//! A node runs the commands of its one connection in the order they were
//! queued, so a release queued after an extend of the same lock runs after
//! it. One thing breaks that order: a command refused with NOSCRIPT (the
//! node's script cache was flushed) took no effect, and sending it again
//! after loading its script would run it after every command queued behind
//! it meanwhile: an extend could re-create a key that a later release had
//! deleted, for a whole TTL. So a refused command is sent again only while
//! no later command for the same lock key was queued on the node; otherwise
//! it fails, as if the node had not answered, which the core already allows
//! for.
//!
//! Queuing a command and stamping its place happen under one lock, so the
//! stamps follow the connection's order even when two tasks send commands for
//! one key at the same instant. Keys are tracked only while they have a
//! command in flight.

use std::collections::HashMap;
use std::future::{Future, poll_fn};
use std::pin::pin;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::task::Poll;

use redlock_core::Key;

/// Stamps the commands queued on one node, per lock key.
#[derive(Debug, Default)]
pub(crate) struct Order(Mutex<Stamps>);

#[derive(Debug, Default)]
struct Stamps {
    next: u64,
    keys: HashMap<Key, Latest>,
}

#[derive(Debug)]
struct Latest {
    /// The stamp of the command for this key queued last.
    stamp: u64,
    /// Commands for this key not finished yet.
    open: usize,
}

/// One command's place in its node's order, from its first queuing until it
/// is dropped.
#[derive(Debug)]
pub(crate) struct Ticket<'a> {
    order: &'a Order,
    key: Key,
    stamp: u64,
}

impl Order {
    fn lock(&self) -> MutexGuard<'_, Stamps> {
        // Every update is complete before anything that could panic.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `command`, whose first poll queues a command for `key` on the
    /// node's connection, and stamps its place in `ticket`.
    pub(crate) async fn send<'a, F: Future>(
        &'a self,
        key: &Key,
        ticket: &mut Option<Ticket<'a>>,
        command: F,
    ) -> F::Output {
        let mut command = pin!(command);
        let mut first = true;
        poll_fn(|cx| {
            if std::mem::take(&mut first) {
                let mut stamps = self.lock();
                let stamp = stamps.stamp(key, true);
                *ticket = Some(Ticket {
                    order: self,
                    key: key.clone(),
                    stamp,
                });
                // Queued while the stamp is ours alone.
                return command.as_mut().poll(cx);
            }
            command.as_mut().poll(cx)
        })
        .await
    }

    /// Runs `command` (the same command again, after loading its script)
    /// only if no later command for `ticket`'s key was queued on the node;
    /// `None` when one was.
    pub(crate) async fn resend<F: Future>(
        &self,
        ticket: &mut Ticket<'_>,
        command: F,
    ) -> Option<F::Output> {
        let mut command = pin!(command);
        let mut first = true;
        poll_fn(|cx| {
            if std::mem::take(&mut first) {
                let mut stamps = self.lock();
                if stamps.keys.get(&ticket.key).map(|latest| latest.stamp) != Some(ticket.stamp) {
                    return Poll::Ready(None);
                }
                ticket.stamp = stamps.stamp(&ticket.key, false);
                return command.as_mut().poll(cx).map(Some);
            }
            command.as_mut().poll(cx).map(Some)
        })
        .await
    }
}

impl Stamps {
    /// The next stamp, now the latest for `key`; `opens` counts a new
    /// command in flight.
    fn stamp(&mut self, key: &Key, opens: bool) -> u64 {
        let stamp = self.next;
        self.next += 1;
        let latest = self
            .keys
            .entry(key.clone())
            .or_insert(Latest { stamp, open: 0 });
        latest.stamp = stamp;
        latest.open += usize::from(opens);
        stamp
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let mut stamps = self.order.lock();
        if let Some(latest) = stamps.keys.get_mut(&self.key) {
            latest.open -= 1;
            if latest.open == 0 {
                stamps.keys.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A command that is queued at its first poll and then answers.
    async fn command(answer: u32) -> u32 {
        answer
    }

    #[tokio::test]
    async fn a_command_is_sent_again_only_while_it_is_the_latest_for_its_key() {
        let order = Order::default();
        let key = Key::from(&b"k"[..]);
        let other = Key::from(&b"other"[..]);

        let mut first = None;
        assert_eq!(order.send(&key, &mut first, command(1)).await, 1);
        let mut first = first.unwrap();
        // A command for another key does not get in the way.
        let mut unrelated = None;
        order.send(&other, &mut unrelated, command(2)).await;
        assert_eq!(order.resend(&mut first, command(3)).await, Some(3));

        // A later command for the same key does.
        let mut later = None;
        order.send(&key, &mut later, command(4)).await;
        assert_eq!(order.resend(&mut first, command(5)).await, None);
        let mut later = later.unwrap();
        assert_eq!(order.resend(&mut later, command(6)).await, Some(6));

        // Keys are forgotten once nothing for them is in flight.
        drop((first, later, unrelated));
        assert!(order.lock().keys.is_empty());
    }
}
