//! An operation's handle on the driver: hands the operation over, hears its
//! events, gets it back at the end, cancels it when dropped early.

use std::fmt::Debug;

use redlock_core::{
    AcquireEvent, ExtendError, Extended, InspectReport, LeaderReport, OpEvent, Operation,
    ReleaseReport,
};
use tracing::debug;

use super::{Driver, Message, Sink};
use crate::Redlock;
use crate::metrics::{self, Voted};
use crate::sim::ClientRng;

/// The kind of an operation of the core a handle runs on the driver, and
/// the event it reports.
pub(crate) trait Op {
    type Event;
    fn event(event: OpEvent) -> Self::Event;
}

macro_rules! op {
    ($($kind:ident: $variant:ident => $event:ty),* $(,)?) => {
        $(
            pub(crate) struct $kind;
            impl Op for $kind {
                type Event = $event;
                fn event(event: OpEvent) -> Self::Event {
                    match event {
                        OpEvent::$variant(event) => event,
                        _ => unreachable!("an operation reports its own kind's events"),
                    }
                }
            }
        )*
    };
}

/// The operations handles run, by kind.
pub(crate) mod kind {
    use super::*;
    op!(
        Acquire: Acquire => AcquireEvent,
        Extend: Extend => Result<Extended, ExtendError>,
        Release: Release => ReleaseReport,
        Proclaim: Proclaim => Result<u64, ExtendError>,
        ReadLeader: ReadLeader => LeaderReport,
        Observe: Observe => redlock_core::Leader,
        Inspect: Inspect => InspectReport,
    );
}

/// The client was shut down ([`Redlock::shutdown`]): the operation ended
/// with [`OpEvent::Closed`], having undone what it did.
#[derive(Debug)]
pub(crate) struct Closed;

impl From<Closed> for crate::Error {
    fn from(_: Closed) -> Self {
        crate::Error::Closed
    }
}

/// Runs `operation` to its final event on the client's driver, and gives it
/// back with it (the core runs it; the driver moves its bytes). Dropped before the final event (a cancelled future), it
/// cancels the operation: the core abandons it and sends what undoing it
/// takes (an acquisition's withdraws), in the background. `Err` once the
/// client is shut down, for what takes or holds a lock.
pub(crate) async fn drive<M: Op>(
    operation: Operation<ClientRng>,
    client: &Redlock,
) -> Result<(M::Event, Operation<ClientRng>), Closed>
where
    M::Event: Debug + Voted,
{
    drive_with::<M>(
        operation,
        client,
        |event| debug!(event = ?event, "retrying"),
    )
    .await
}

/// [`drive`] for what runs on a shut-down client too (a release, a read).
pub(crate) async fn run<M: Op>(
    operation: Operation<ClientRng>,
    client: &Redlock,
) -> (M::Event, Operation<ClientRng>)
where
    M::Event: Debug + Voted,
{
    match drive::<M>(operation, client).await {
        Ok(ended) => ended,
        Err(Closed) => unreachable!("a closed client runs releases and reads"),
    }
}

/// [`drive`], handing every event before the final one to `on_event`.
async fn drive_with<M: Op>(
    mut operation: Operation<ClientRng>,
    client: &Redlock,
    mut on_event: impl FnMut(&M::Event) + Send,
) -> Result<(M::Event, Operation<ClientRng>), Closed>
where
    M::Event: Debug + Voted,
{
    let driver = client.driver();
    let mut rounds = metrics::Rounds::new();
    loop {
        let (sink, mut messages) = super::mailbox();
        let key = match driver.start(operation, Some(Sink::Channel(sink))) {
            Ok(key) => key,
            Err(_) => panic!("a redlock operation runs on a Tokio runtime"),
        };
        let mut cancel = Cancel {
            driver,
            key: Some(key),
        };
        loop {
            match messages.recv().await {
                Some(Message::Event(event)) => {
                    let event = M::event(event);
                    rounds.event(client.node_metrics(), &event);
                    on_event(&event);
                }
                Some(Message::Finished(finished)) => {
                    cancel.key = None;
                    let (event, operation) = finished.take();
                    if matches!(event, OpEvent::Closed) {
                        return Err(Closed);
                    }
                    let event = M::event(event);
                    rounds.event(client.node_metrics(), &event);
                    return Ok((event, operation));
                }
                Some(Message::Returned(returned)) => {
                    cancel.key = None;
                    operation = returned.take();
                    break;
                }
                None => unreachable!("the driver answers every operation it drops"),
            }
        }
    }
}

/// Cancels its operation when dropped before the end.
struct Cancel<'a> {
    driver: &'a Driver,
    key: Option<u64>,
}

impl Drop for Cancel<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            debug!("cancelled; the core undoes what is in flight");
            self.driver.cancel(key);
        }
    }
}

/// Runs `operation`, one that never ends by itself (an observer), on the
/// client's driver: the stream of its events, which ends once the client
/// is shut down. Dropped, it cancels the operation.
pub(crate) fn stream<M: Op>(
    operation: Operation<ClientRng>,
    client: Redlock,
) -> impl futures::Stream<Item = M::Event> + Send + 'static
where
    M::Event: Send + 'static,
{
    /// The operation, to start (again, on another driver after its
    /// runtime went away), or running under `key` with its messages.
    struct Streaming {
        client: Redlock,
        operation: Option<Operation<ClientRng>>,
        key: Option<u64>,
        messages: Option<super::mailbox::Receiver>,
    }
    impl Drop for Streaming {
        fn drop(&mut self) {
            if let Some(key) = self.key.take() {
                self.client.driver().cancel(key);
            }
        }
    }
    let streaming = Streaming {
        client,
        operation: Some(operation),
        key: None,
        messages: None,
    };
    futures::stream::unfold(streaming, |mut streaming| async move {
        loop {
            if let Some(operation) = streaming.operation.take() {
                let (sink, messages) = super::mailbox();
                let driver = streaming.client.driver();
                let Ok(key) = driver.start(operation, Some(Sink::Channel(sink))) else {
                    panic!("a redlock operation runs on a Tokio runtime")
                };
                streaming.key = Some(key);
                streaming.messages = Some(messages);
            }
            match streaming.messages.as_mut()?.recv().await {
                Some(Message::Event(event)) => return Some((M::event(event), streaming)),
                Some(Message::Returned(returned)) => {
                    streaming.key = None;
                    streaming.operation = Some(returned.take());
                }
                // Closed: the client was shut down.
                Some(Message::Finished(_)) | None => return None,
            }
        }
    })
}
