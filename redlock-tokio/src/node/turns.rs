//! A cluster node's commands for one lock key, one at a time.
//!
//! A plain master runs the commands of its one connection in the order they
//! were queued, which is the order the core emitted them (see
//! [`driver::send`](crate::driver::send)). A cluster connection keeps no
//! such order: it routes each command on its own and sends it again on
//! MOVED, ASK or TRYAGAIN. So a cluster node's command for a key waits until
//! the one before it for that key was answered or given up
//! ([`Turns::turn`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use redlock_core::Key;

/// The queue of each key's commands on a cluster node.
#[derive(Debug, Default)]
pub(crate) struct Turns(Mutex<Queues>);

#[derive(Debug, Default)]
struct Queues {
    keys: HashMap<Key, Arc<tokio::sync::Mutex<()>>>,
    /// The number of keys past which the next [`Turns::turn`] forgets keys
    /// that nobody holds or waits for.
    sweep_at: usize,
}

/// A cluster node's command's turn for its key, from its emission until it
/// is answered or given up; the next command for the key waits for it.
pub(crate) struct Turn<'a> {
    turns: &'a Turns,
    key: Key,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Turns {
    fn queues(&self) -> MutexGuard<'_, Queues> {
        // Every update is complete before anything that could panic.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until every command for `key` emitted on this node before this
    /// one has been answered or given up. Called at the first poll of a
    /// request (when the core emits it), so the turns are taken in the
    /// order of emission (Tokio's mutex is first come, first served).
    ///
    /// Usually free: the command before (the acquire a release undoes) has
    /// been answered already.
    pub(crate) async fn turn(&self, key: &Key) -> Turn<'_> {
        let mutex = {
            let mut queues = self.queues();
            if queues.keys.len() > queues.sweep_at {
                queues.keys.retain(|_, mutex| Arc::strong_count(mutex) > 1);
                queues.sweep_at = (queues.keys.len() * 2).max(64);
            }
            Arc::clone(queues.keys.entry(key.clone()).or_default())
        };
        let mut turn = Turn {
            turns: self,
            key: key.clone(),
            guard: None,
        };
        turn.guard = Some(mutex.lock_owned().await);
        turn
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut queues = self.turns.queues();
        drop(self.guard.take());
        if queues
            .keys
            .get(&self.key)
            .is_some_and(|mutex| Arc::strong_count(mutex) == 1)
        {
            queues.keys.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::task::Poll;

    use super::*;

    #[tokio::test]
    async fn a_turn_for_a_key_waits_for_the_one_before_it() {
        let turns = Turns::default();
        let key = Key::from(&b"k"[..]);
        let other = Key::from(&b"other"[..]);
        let first = turns.turn(&key).await;
        // Another key does not wait.
        let unrelated = turns.turn(&other).await;
        let mut second = std::pin::pin!(turns.turn(&key));
        let mut third = std::pin::pin!(turns.turn(&key));
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
        assert!(turns.queues().keys.is_empty());
    }
}
