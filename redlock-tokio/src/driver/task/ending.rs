//! The driver task's end: each operation handed back to its handle, or
//! abandoned, and what must still reach the nodes sent on blocking
//! connections when the runtime drops the task.

use std::sync::Arc;

use redlock_core::Output;

use super::Task;
use crate::driver::{Finished, Input, Message, Returned};
use crate::sim::ClientRng;

impl Task {
    /// An operation's end, for its handle.
    pub(super) fn finish(
        &self,
        event: redlock_core::OpEvent,
        operation: redlock_core::Operation<ClientRng>,
    ) -> Finished {
        Finished {
            event: Some(event),
            operation: Some(operation),
            driver: self.driver.clone(),
            nodes: Arc::clone(&self.shared.nodes),
        }
    }

    /// `operation`, handed back to its handle.
    fn hand_back(&self, operation: redlock_core::Operation<ClientRng>) -> Returned {
        Returned {
            operation: Some(operation),
            driver: self.driver.clone(),
            nodes: Arc::clone(&self.shared.nodes),
        }
    }
}

impl Drop for Task {
    /// The task is dropped before its end: its runtime shuts down. The
    /// operations a handle waits for go back to it, to go on elsewhere;
    /// the others are abandoned, and what they owe goes out on blocking
    /// connections, with everything owed and in flight that must arrive
    /// (each `Sent` sees to itself).
    fn drop(&mut self) {
        let now = crate::sim::now();
        // No handle can start anything here any more: a start from now on
        // fails, and its handle starts a driver elsewhere.
        self.inputs.close();
        while let Ok(input) = self.inputs.try_recv() {
            match input {
                Input::Start {
                    operation,
                    sink: Some(mut sink),
                    ..
                } => {
                    sink.send(Message::Returned(self.hand_back(operation)));
                }
                Input::Start {
                    operation,
                    sink: None,
                    ..
                } => {
                    self.client.start(operation, now);
                }
                Input::Release { kept, lock, .. } => {
                    let kept = kept.and_then(|key| self.keys.get(&key).copied());
                    self.client.release(kept, *lock, false, now);
                }
                Input::Abandon(operation) => self.client.abandon(operation, now),
                _ => {}
            }
        }
        for (op, (_, mut sink)) in std::mem::take(&mut self.sinks) {
            if let Some(operation) = self.client.evict(op, now) {
                sink.send(Message::Returned(self.hand_back(operation)));
            }
        }
        self.client.close(now);
        let mut owed = self.client.take_owed();
        while let Some(output) = self.client.poll_output() {
            if let Output::Transmit { request, .. } = output
                && request.command.must_arrive()
            {
                owed.push(request);
            }
        }
        let nodes = Arc::clone(&self.shared.nodes);
        let in_flight = std::mem::take(&mut self.in_flight);
        crate::node::as_runtime_drops(move || {
            drop(in_flight);
            if !owed.is_empty() {
                crate::driver::release_blocking(&nodes, owed);
            }
        });
    }
}
