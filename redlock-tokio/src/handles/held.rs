//! Work under a lock or a leadership, polled only while it is held.
//!
//! The rule (issue: a deposed leader's work ran one step more): before each
//! poll of the work, in the task that polls it, the clock is asked whether
//! the hold ended, and a hold that ended drops the work at its `.await`
//! without polling it again. The loss's own future only wakes the task at
//! the loss, for work that waits on something else; it alone is not enough,
//! since after a pause the work's wake-up may be seen first. What stays
//! possible is a pause in the middle of a step (between two `.await`s):
//! that step runs to its next `.await` past the loss, which is why the
//! resource must still check the fencing token or the term.

use std::future::{Future, poll_fn};
use std::pin::pin;
use std::task::Poll;

/// Polls `work` until it ends, or until the hold ends: `loss` (the clock's
/// word, asked before every poll) or `lost` (the wake-up at the loss). The
/// work is never polled once `loss` has said the hold ended.
pub(crate) async fn while_held<W: Future, R>(
    work: W,
    loss: impl Fn() -> Option<R>,
    lost: impl Future<Output = R>,
) -> Result<W::Output, R> {
    let mut work = pin!(work);
    let mut lost = pin!(lost);
    poll_fn(|cx| {
        if planted!(WorkPolledAfterLoss) {
            // The planted bug: the work first, the loss after.
            if let Poll::Ready(value) = work.as_mut().poll(cx) {
                return Poll::Ready(Ok(value));
            }
        }
        if let Some(reason) = loss() {
            return Poll::Ready(Err(reason));
        }
        if let Poll::Ready(reason) = lost.as_mut().poll(cx) {
            return Poll::Ready(Err(reason));
        }
        work.as_mut().poll(cx).map(Ok)
    })
    .await
}
