//! The driver task's side of its plain masters' wires: the answers they
//! read, handed to the core, and their writes, made last in a turn.

use std::sync::{Mutex, PoisonError};
use std::task::{Context, Poll};

use tracing::debug;

use super::Task;
use crate::driver::send::Outcome;
use crate::node::{Landed, TakenWire};

impl Task {
    /// The answers the wires handed out: each one the core still waits
    /// for goes in.
    pub(super) fn take_landed(&mut self, now: std::time::Instant) {
        let mut landed = std::mem::take(&mut self.landed);
        for (tag, answer) in landed.drain(..) {
            if tag.task != self.number {
                // Sent by an earlier task, on a wire this one took over.
                continue;
            }
            let node = &self.shared.nodes[tag.node().0];
            let command = tag.command();
            if let Some((id, reply)) = node.landed(tag, answer) {
                debug!(
                    node = node.name(),
                    attempt = reply.round.0,
                    command = command.name(),
                    via = reply.native.map_or("script", |native| native.name()),
                    outcome = %Outcome(&reply.result),
                    "node answered"
                );
                self.answered(id, reply, now);
            }
        }
        self.landed = landed;
        self.links_broken(now);
    }

    /// Takes node `index`'s wire, if nobody polls it yet, to poll it here.
    pub(super) fn take_wire(&mut self, index: usize) {
        if let Some(wire) = self.shared.nodes[index].take_wire() {
            self.wires
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner)
                .push((index, wire));
        }
    }

    /// The generation of node `index`'s newest connection whose wire this
    /// task polls: a request goes straight onto a connection
    /// ([`Node::send_tagged`](crate::node::Node::send_tagged)) only then,
    /// so that its answer comes out here.
    pub(super) fn polled(&mut self, index: usize) -> Option<u64> {
        (self.wires.get_mut().unwrap_or_else(PoisonError::into_inner))
            .iter()
            .filter(|(node, _)| *node == index)
            .map(|(_, wire)| wire.generation())
            .max()
    }
}

/// Polls every wire for what it read, handing out the answers to tagged
/// requests into `landed`. Ready once some came out or a wire ended
/// (dropped here).
pub(super) fn poll_wires(
    wires: &Mutex<Vec<(usize, TakenWire)>>,
    landed: &mut Vec<Landed>,
    cx: &mut Context<'_>,
) -> Poll<()> {
    let mut ended = false;
    let mut wires = wires.lock().unwrap_or_else(PoisonError::into_inner);
    wires.retain_mut(|(_, wire)| {
        loop {
            match wire.poll_answer(cx) {
                Poll::Ready(Some(answer)) => landed.push(answer),
                Poll::Ready(None) => {
                    ended = true;
                    return false;
                }
                Poll::Pending => return true,
            }
        }
    });
    if ended || !landed.is_empty() {
        Poll::Ready(())
    } else {
        Poll::Pending
    }
}

/// Has every wire write what is queued on its connection. Ready when a
/// connection ended meanwhile (its answers wait to be handed out).
///
/// Before it writes, it lets the runtime's other tasks run once (it wakes
/// itself and yields): the handles its turns woke (a grant told, a release
/// reported) then start their next operations, which join this write
/// rather than each making one of its own; the servers pay per write
/// they read. One yield between writes at most, whatever comes meanwhile,
/// and no timer: a task alone waits for one trip through the scheduler.
pub(super) fn write_wires(
    wires: &Mutex<Vec<(usize, TakenWire)>>,
    yielded: &mut bool,
    cx: &mut Context<'_>,
) -> Poll<()> {
    let mut wires = wires.lock().unwrap_or_else(PoisonError::into_inner);
    if !*yielded && wires.iter().any(|(_, wire)| wire.is_queued()) {
        *yielded = true;
        cx.waker().wake_by_ref();
        return Poll::Pending;
    }
    *yielded = false;
    let mut ended = false;
    for (_, wire) in wires.iter_mut() {
        ended |= wire.poll_write(cx);
    }
    if ended {
        Poll::Ready(())
    } else {
        Poll::Pending
    }
}
