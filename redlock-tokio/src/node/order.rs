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
//! script command in flight.
//!
//! A plain command (`SET NX PX GET`, `DELIFEQ`) is never refused with
//! NOSCRIPT, so it is never sent again and needs no place of its own: it only
//! has to stop the resend of a script command for its key queued before it.
//! So it is queued under the same lock ([`Order::send_plain`]) and marks its
//! key as later only where a script command for that key is in flight: no
//! ticket, no map entry to add and remove, no hashing when no script is in
//! flight on the node (the common case where acquires and releases are all
//! plain commands).

use std::collections::HashMap;
use std::future::{Future, poll_fn};
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::Poll;

use redlock_core::Key;

/// Stamps the commands queued on one node, per lock key; on a cluster node,
/// also lets the commands for one key run one at a time ([`turn`](Order::turn)).
#[derive(Debug, Default)]
pub(crate) struct Order(Mutex<Stamps>, Mutex<Turns>);

/// The queue of each key's commands on a cluster node.
#[derive(Debug, Default)]
struct Turns {
    keys: HashMap<Key, Arc<tokio::sync::Mutex<()>>>,
    /// The number of keys past which the next [`Order::turn`] forgets keys
    /// that nobody holds or waits for.
    sweep_at: usize,
}

/// A cluster node's command's turn for its key, from its emission until it
/// is answered or given up; the next command for the key waits for it.
pub(crate) struct Turn<'a> {
    order: &'a Order,
    key: Key,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

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

    fn turns(&self) -> MutexGuard<'_, Turns> {
        // As for the stamps.
        self.1.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until every command for `key` emitted on this node before this
    /// one has been answered or given up: a cluster node's connection routes
    /// each command on its own and sends it again on MOVED, ASK or TRYAGAIN,
    /// so commands for one key keep their order only if the next one is
    /// sent once the last has finished. Called at the first poll of a
    /// request (when the core emits it), so the turns are taken in the
    /// order of emission (Tokio's mutex is first come, first served).
    ///
    /// Usually free: the command before (the acquire a release undoes) has
    /// been answered already.
    pub(crate) async fn turn(&self, key: &Key) -> Turn<'_> {
        let mutex = {
            let mut turns = self.turns();
            if turns.keys.len() > turns.sweep_at {
                turns.keys.retain(|_, mutex| Arc::strong_count(mutex) > 1);
                turns.sweep_at = (turns.keys.len() * 2).max(64);
            }
            Arc::clone(turns.keys.entry(key.clone()).or_default())
        };
        let mut turn = Turn {
            order: self,
            key: key.clone(),
            guard: None,
        };
        turn.guard = Some(mutex.lock_owned().await);
        turn
    }

    /// Runs `command`, whose first poll queues a command for `key` on the
    /// node's connection, and stamps its place in `ticket`.
    pub(crate) async fn send<'a, F: Future>(
        &'a self,
        key: &Key,
        ticket: &mut Option<Ticket<'a>>,
        command: F,
    ) -> F::Output {
        self.queued(command, |stamps| {
            *ticket = Some(Ticket {
                order: self,
                key: key.clone(),
                stamp: stamps.stamp(key, true),
            });
        })
        .await
    }

    /// Runs `command`, a plain command for `key` whose first poll queues it
    /// on the node's connection, which is never sent again: it marks any
    /// script command for `key` queued before it as no longer the latest, so
    /// that such a command is not sent again after it ([`resend`](Self::resend)).
    pub(crate) async fn send_plain<F: Future>(&self, key: &Key, command: F) -> F::Output {
        self.queued(command, |stamps| stamps.pass(key)).await
    }

    /// Runs `command`, whose first poll queues one command for each of
    /// `keys` on the node's connection, in that order (a pipeline): a script
    /// command (`true`) is stamped as [`send`](Self::send) does, its ticket
    /// pushed on `tickets`; a plain one (`false`) passes as
    /// [`send_plain`](Self::send_plain) does, `None` pushed for it. All under
    /// one lock, so the stamps follow the pipeline's order.
    pub(crate) async fn send_many<'a, F: Future>(
        &'a self,
        keys: &[(&Key, bool)],
        tickets: &mut Vec<Option<Ticket<'a>>>,
        command: F,
    ) -> F::Output {
        self.queued(command, |stamps| {
            for &(key, script) in keys {
                tickets.push(script.then(|| Ticket {
                    order: self,
                    key: key.clone(),
                    stamp: stamps.stamp(key, true),
                }));
                if !script {
                    stamps.pass(key);
                }
            }
        })
        .await
    }

    /// Runs `command`, whose first poll queues it on the node's connection:
    /// `mark` records its place, and the command is queued while the stamps
    /// stay locked, so no other command can be stamped between the two.
    async fn queued<F: Future>(&self, command: F, mark: impl FnOnce(&mut Stamps)) -> F::Output {
        let mut command = pin!(command);
        let mut mark = Some(mark);
        poll_fn(|cx| {
            if let Some(mark) = mark.take() {
                let mut stamps = self.lock();
                mark(&mut stamps);
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

impl Stamps {
    /// A plain command for `key` is queued now: the latest for `key` if a
    /// script command for `key` is in flight (keys with nothing in flight
    /// are not tracked: no resend can be overtaken there).
    fn pass(&mut self, key: &Key) {
        let stamp = self.next;
        self.next += 1;
        if self.keys.is_empty() {
            return;
        }
        if let Some(latest) = self.keys.get_mut(key) {
            latest.stamp = stamp;
        }
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut turns = self.order.turns();
        drop(self.guard.take());
        if turns
            .keys
            .get(&self.key)
            .is_some_and(|mutex| Arc::strong_count(mutex) == 1)
        {
            turns.keys.remove(&self.key);
        }
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

    #[tokio::test]
    async fn a_pipeline_stamps_its_commands_in_its_order() {
        let order = Order::default();
        let key = Key::from(&b"k"[..]);
        let other = Key::from(&b"other"[..]);

        // A script for `key`, then a plain command for it, in one pipeline:
        // the script may not be sent again after the plain command.
        let mut tickets = Vec::new();
        let keys = [(&key, true), (&other, true), (&key, false)];
        assert_eq!(order.send_many(&keys, &mut tickets, command(1)).await, 1);
        let mut tickets = tickets.into_iter();
        let mut script = tickets.next().flatten().expect("a script's ticket");
        let mut other_ticket = tickets.next().flatten().expect("a script's ticket");
        assert!(
            tickets.next().flatten().is_none(),
            "a plain command has none"
        );
        assert_eq!(order.resend(&mut script, command(2)).await, None);
        assert_eq!(order.resend(&mut other_ticket, command(3)).await, Some(3));
        drop((script, other_ticket));
        assert!(order.lock().keys.is_empty());
    }

    #[tokio::test]
    async fn a_turn_for_a_key_waits_for_the_one_before_it() {
        let order = Order::default();
        let key = Key::from(&b"k"[..]);
        let other = Key::from(&b"other"[..]);
        let first = order.turn(&key).await;
        // Another key does not wait.
        let unrelated = order.turn(&other).await;
        let mut second = std::pin::pin!(order.turn(&key));
        let mut third = std::pin::pin!(order.turn(&key));
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        // Queued in this order, at their first poll.
        assert!(second.as_mut().poll(&mut cx).is_pending());
        assert!(third.as_mut().poll(&mut cx).is_pending());
        drop(first);
        assert!(
            third.as_mut().poll(&mut cx).is_pending(),
            "not before the second"
        );
        let Poll::Ready(second) = second.as_mut().poll(&mut cx) else {
            panic!("the second's turn comes when the first is done");
        };
        drop(second);
        let Poll::Ready(third) = third.as_mut().poll(&mut cx) else {
            panic!("then the third's");
        };
        drop((third, unrelated));
        // Keys are forgotten once nobody holds or waits for them.
        assert!(order.turns().keys.is_empty());
    }

    #[tokio::test]
    async fn a_plain_command_stops_the_resend_of_an_earlier_script_for_its_key() {
        let order = Order::default();
        let key = Key::from(&b"k"[..]);
        let other = Key::from(&b"other"[..]);

        let mut script = None;
        order.send(&key, &mut script, command(1)).await;
        let mut script = script.unwrap();
        // A plain command for another key does not get in the way, and
        // adds nothing to track.
        assert_eq!(order.send_plain(&other, command(2)).await, 2);
        assert_eq!(order.lock().keys.len(), 1);
        assert_eq!(order.resend(&mut script, command(3)).await, Some(3));

        // One for the same key does.
        assert_eq!(order.send_plain(&key, command(4)).await, 4);
        assert_eq!(order.resend(&mut script, command(5)).await, None);
        drop(script);
        assert!(order.lock().keys.is_empty());

        // With no script in flight, plain commands track nothing, and a
        // script queued after them may be sent again.
        order.send_plain(&key, command(6)).await;
        assert!(order.lock().keys.is_empty());
        let mut after = None;
        order.send(&key, &mut after, command(7)).await;
        assert_eq!(
            order.resend(after.as_mut().unwrap(), command(8)).await,
            Some(8)
        );
    }
}
