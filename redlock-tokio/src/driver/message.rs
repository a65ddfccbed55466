//! What the driver hands an operation's handle at the end, with what
//! happens when nobody takes it.

use std::sync::Arc;

use redlock_core::{OpEvent, Operation};
use tracing::debug;

use super::{Driver, Input, release_lock_blocking, undo_blocking};
use crate::node::Node;
use crate::sim::ClientRng;

/// An operation's final event, with the operation. Dropped untaken (its
/// handle was cancelled after the operation ended, before it read this), a
/// lock it grants is released: nobody else knows of it.
pub(crate) struct Finished {
    pub(super) event: Option<OpEvent>,
    pub(super) operation: Option<Operation<ClientRng>>,
    pub(super) driver: std::sync::Weak<Driver>,
    pub(super) nodes: Arc<[Arc<Node>]>,
}

impl Finished {
    pub(crate) fn take(mut self) -> (OpEvent, Operation<ClientRng>) {
        let event = self.event.take().expect("taken once");
        let operation = self.operation.take().expect("taken once");
        (event, operation)
    }
}

impl Drop for Finished {
    fn drop(&mut self) {
        let Some(OpEvent::Acquire(redlock_core::AcquireEvent::Acquired(lock))) = self.event.take()
        else {
            return;
        };
        debug!("acquire cancelled as it was granted; releasing");
        let lock = match self.driver.upgrade() {
            Some(driver) => match driver.release(None, Box::new(lock), None) {
                Ok(()) => return,
                Err(lock) => lock,
            },
            None => Box::new(lock),
        };
        // No driver can take it: no runtime here, or this one shuts down.
        release_lock_blocking(&self.nodes, *lock);
    }
}

/// An operation a driver that went away handed back to its handle, to go
/// on with another. Dropped untaken (its handle is gone too: the runtime
/// shuts down), it is abandoned: on another driver where one can run, else
/// on blocking connections.
pub(crate) struct Returned {
    pub(super) operation: Option<Operation<ClientRng>>,
    pub(super) driver: std::sync::Weak<Driver>,
    pub(super) nodes: Arc<[Arc<Node>]>,
}

impl Returned {
    pub(super) fn take(mut self) -> Operation<ClientRng> {
        self.operation.take().expect("taken once")
    }
}

impl Drop for Returned {
    fn drop(&mut self) {
        let Some(operation) = self.operation.take() else {
            return;
        };
        let operation = match self.driver.upgrade() {
            Some(driver) => match driver.send(Input::Abandon(operation)) {
                Ok(()) => return,
                Err(Input::Abandon(operation)) => operation,
                Err(_) => unreachable!("sent an abandon"),
            },
            None => operation,
        };
        // No driver can take it: no runtime here, or this one shuts down.
        undo_blocking(&self.nodes, operation);
    }
}
