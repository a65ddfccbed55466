//! First come, first served among one client's waiters for one lock.
// Public with the `simulation` feature only (`machinery!` in lib.rs).
#![cfg_attr(not(feature = "simulation"), allow(unreachable_pub))]

use std::collections::VecDeque;
use std::time::Instant;

use crate::{HandOver, Notice};

/// One waiter of a [`WaitQueue`]: any id the caller gives it, unique in the
/// queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WaiterId(pub u64);

/// What a [`WaitQueue`] asks its caller to deliver, drained with
/// [`WaitQueue::poll_wake`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Wake {
    /// Give `waiter` this notice (to its
    /// [`Machine::handle_notice`](crate::Machine::handle_notice)).
    Tell {
        /// The waiter whose turn it is.
        waiter: WaiterId,
        /// The notice.
        notice: Notice,
    },
    /// `waiter` is first now, after a waiter that was not served: give it
    /// the channel's recent notices, with the instants they arrived (its
    /// acquisition ignores the ones its last attempt saw). A release that
    /// came while it was not first may have gone to the waiter that left.
    Replay {
        /// The waiter whose turn it is.
        waiter: WaiterId,
    },
}

/// Who of one client's waiters for one lock (one release channel) attempts
/// next: the one that came first.
///
/// A release frees the lock for one holder, so a release notice wakes one
/// waiter, the first in the queue, and not every waiter of the client: a
/// herd of attempts lets the one the runtime happens to run first win
/// (often the newest), and costs a round to every node per waiter. A new
/// acquire attempts at once only when nobody waits
/// ([`may_attempt_now`](Self::may_attempt_now)); otherwise it joins the
/// queue without attempting, so a holder that releases and asks again
/// comes after the waiters it kept waiting. The first waiter stays first
/// until it leaves: its attempt may fail when a client elsewhere took the
/// lock, and the next release is then its again. When it leaves without
/// the lock (its wait limit passed, it was cancelled), the next waiter is
/// first and is told the notices it may have missed.
///
/// The client's own release of the lock ([`HandOver::Queued`], when the
/// release is queued on every node) is told ([`Notice::HandedOver`]) to
/// the waiters the masters order (a fair lock: the next attempt runs after
/// the release everywhere, one round trip later), and to the first waiter
/// of this client's own order only while the client's last release of the
/// lock found no waiter of another client marked on its nodes
/// ([`HandOver::Answered`]). Told first, that waiter would always win
/// before other clients' waiters, who hear of the release from the
/// masters: so while they wait, it hears the nodes' notices with them.
/// Until a release of the client answered, it is not told: a client that
/// starts waiting does not know yet who else does.
///
/// The queue orders one client's waiters only; other clients compete as
/// Redlock's clients always do. Each waiter keeps its timed retries as the
/// backstop: a notice lost on the way (a pub/sub connection down) delays a
/// waiter, never strands it.
///
/// # Calling order
///
/// Per channel, under one lock: [`handle_join`](Self::handle_join) when an
/// acquire starts waiting, [`handle_notice`](Self::handle_notice) for each
/// notice of the channel, [`handle_leave`](Self::handle_leave) when an
/// acquire ends; after each, drain [`poll_wake`](Self::poll_wake) and
/// deliver.
///
/// ```
/// use redlock_core::{HandOver, Key, NodeId, Notice, WaitQueue, Wake, WaiterId};
///
/// let mut queue = WaitQueue::new();
/// queue.handle_join(WaiterId(1));
/// queue.handle_join(WaiterId(2));
/// assert!(!queue.may_attempt_now(), "a new acquire waits behind them");
/// // The first waiter is first: it may have missed a release before it joined.
/// assert_eq!(queue.poll_wake(), Some(Wake::Replay { waiter: WaiterId(1) }));
/// // A release notice goes to the first waiter only.
/// queue.handle_notice(Notice::Released(NodeId(0)));
/// assert_eq!(
///     queue.poll_wake(),
///     Some(Wake::Tell { waiter: WaiterId(1), notice: Notice::Released(NodeId(0)) }),
/// );
/// assert_eq!(queue.poll_wake(), None);
/// // It got the lock: the next release, its own, is the second waiter's.
/// queue.handle_leave(WaiterId(1), true);
/// assert_eq!(queue.poll_wake(), None);
/// queue.handle_notice(Notice::HandedOver);
/// queue.handle_notice(Notice::Released(NodeId(2)));
/// assert!(matches!(queue.poll_wake(), Some(Wake::Tell { waiter: WaiterId(2), .. })));
/// assert_eq!(queue.poll_wake(), None, "the hand-over is not its: another client may wait");
/// // That release found no other client's waiter, and published nothing
/// // where only this client's were marked: the first is told now.
/// let channels = vec![Key::from("r\0released")];
/// queue.handle_hand_over(&HandOver::Answered {
///     channels: channels.clone(),
///     others_waiting: false,
///     unheard: true,
/// });
/// let handed_over = Some(Wake::Tell { waiter: WaiterId(2), notice: Notice::HandedOver });
/// assert_eq!(queue.poll_wake(), handed_over);
/// // So the next release is handed over when it is queued.
/// queue.handle_hand_over(&HandOver::Queued { channels });
/// assert_eq!(queue.poll_wake(), handed_over);
/// ```
#[derive(Clone, Debug, Default)]
pub struct WaitQueue {
    /// In the order they joined; the first is the one whose turn it is.
    waiters: VecDeque<WaiterId>,
    /// Waiters the masters order (fair locks): told every notice.
    by_masters: Vec<WaiterId>,
    /// The client's last release of the lock found no waiter of another
    /// client marked ([`HandOver::Answered`]): its next release is handed
    /// over to the first waiter.
    alone: bool,
    /// The first waiter was told of the client's release in flight when
    /// it was queued.
    handed: bool,
    /// Until when the client's last mark on the lock surely lives on the
    /// nodes ([`handle_marked`](Self::handle_marked)).
    marked_until: Option<Instant>,
    wakes: VecDeque<Wake>,
}

impl WaitQueue {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether nobody waits.
    pub fn is_empty(&self) -> bool {
        self.waiters.is_empty() && self.by_masters.is_empty()
    }

    #[cfg(feature = "simulation")]
    /// How many wait.
    pub fn len(&self) -> usize {
        self.waiters.len() + self.by_masters.len()
    }

    /// The waiter whose turn it is.
    pub fn first(&self) -> Option<WaiterId> {
        self.waiters.front().copied()
    }

    /// Whether a new acquire may attempt at once: only when nobody waits
    /// whom this client orders. Otherwise it would jump the queue; it joins
    /// instead ([`Acquisition::queue_behind`](crate::Acquisition::queue_behind)).
    pub fn may_attempt_now(&self) -> bool {
        self.waiters.is_empty()
    }

    /// A waiter of the client marked the lock's key as waited for
    /// ([`Acquisition::marked_until`](crate::Acquisition::marked_until)):
    /// the mark surely lives on the nodes until `until`. An acquire that
    /// queues behind the waiters now needs no mark of its own while that
    /// one outlives its wait
    /// ([`Acquisition::queue_behind`](crate::Acquisition::queue_behind)):
    /// a release publishes for any mark, whoever set it, and this client's
    /// queue hears it. A later `until` replaces an earlier one, never the
    /// other way.
    pub fn handle_marked(&mut self, until: Instant) {
        self.marked_until = self.marked_until.max(Some(until));
    }

    /// Until when the client's last mark on the lock surely lives
    /// ([`handle_marked`](Self::handle_marked)); `None` if no waiter
    /// marked since the queue was made.
    pub fn marked_until(&self) -> Option<Instant> {
        self.marked_until
    }

    /// `waiter` starts waiting, last. Joining first, it is told at once
    /// the notices it may have missed. Joining twice changes nothing.
    pub fn handle_join(&mut self, waiter: WaiterId) {
        if self.contains(waiter) {
            return;
        }
        self.waiters.push_back(waiter);
        if self.first() == Some(waiter) {
            self.wakes.push_back(Wake::Replay { waiter });
        }
    }

    /// `waiter` starts waiting for a lock whose masters order the waiters
    /// ([`Machine::ordered_by_masters`](crate::Machine::ordered_by_masters):
    /// a fair lock). The masters' queues say whose turn it is, and this
    /// client cannot know it: the head of the masters' queues may be any of
    /// its waiters. So such a waiter is told every notice of the channel,
    /// and is told at once the notices it may have missed; it neither waits
    /// behind this client's other waiters nor holds them back.
    pub fn handle_join_by_masters(&mut self, waiter: WaiterId) {
        if self.contains(waiter) {
            return;
        }
        self.by_masters.push(waiter);
        self.wakes.push_back(Wake::Replay { waiter });
    }

    fn contains(&self, waiter: WaiterId) -> bool {
        self.waiters.contains(&waiter) || self.by_masters.contains(&waiter)
    }

    /// A notice of the channel: for the waiter whose turn it is (none if
    /// nobody waits), and for every waiter the masters order; a
    /// [`Notice::HandedOver`] for the first only while no other client
    /// waits ([`handle_hand_over`](Self::handle_hand_over)).
    pub fn handle_notice(&mut self, notice: Notice) {
        // The client's own release goes to waiters the masters order:
        // their queues decide, so a head start overtakes nobody. This
        // client's own order is first come, first served among its
        // waiters, but the waiters of other clients hear of the release
        // from the masters: told now, our first waiter would always win
        // before them (4 clients x 2 tasks: the worst wait went from 6x to
        // 60x the fair cycle). So it is told only while no other client
        // waits, and otherwise hears the masters' notices with them.
        let first = match notice {
            Notice::HandedOver if !self.alone => None,
            _ => self.first(),
        };
        for waiter in first.iter().chain(&self.by_masters) {
            self.wakes.push_back(Wake::Tell {
                waiter: *waiter,
                notice,
            });
        }
    }

    /// What the client's own release of the lock tells
    /// ([`Machine::poll_hand_over`](crate::Machine::poll_hand_over)): queued
    /// on every node, it is a [`Notice::HandedOver`]
    /// ([`handle_notice`](Self::handle_notice)); answered, it says whether
    /// the next one may go to the first waiter when it is queued, and,
    /// where a node published no notice because only this client's
    /// waiters were marked there, it is a [`Notice::HandedOver`] for the
    /// first waiter if it was not told yet. Deliver that notice with the
    /// instant the release was queued (an attempt that started after it
    /// ran after the release on every node).
    pub fn handle_hand_over(&mut self, hand_over: &HandOver) {
        match *hand_over {
            HandOver::Queued { .. } => {
                self.handed = self.alone && self.first().is_some();
                self.handle_notice(Notice::HandedOver);
            }
            HandOver::Answered {
                others_waiting,
                unheard,
                ..
            } => {
                // A node that published nothing left the client's own
                // waiters to their client: the first is told now, if it
                // was not when the release was queued.
                if unheard
                    && !self.handed
                    && let Some(waiter) = self.first()
                {
                    self.wakes.push_back(Wake::Tell {
                        waiter,
                        notice: Notice::HandedOver,
                    });
                }
                self.handed = false;
                self.alone = !others_waiting;
            }
        }
    }

    /// `waiter` stops waiting; `served`: with a lock that excludes the next
    /// waiter (any kind but a read lock). If it was first and leaves
    /// otherwise (without the lock, or with a read lock the next may share),
    /// the next waiter's turn starts with the notices it may have missed.
    /// If it got such a lock, the next release (its own) is the next
    /// waiter's.
    pub fn handle_leave(&mut self, waiter: WaiterId, served: bool) {
        let was_first = self.first() == Some(waiter);
        self.waiters.retain(|other| *other != waiter);
        self.by_masters.retain(|other| *other != waiter);
        // Wakes still queued for it go nowhere.
        self.wakes.retain(|wake| match wake {
            Wake::Tell { waiter: to, .. } | Wake::Replay { waiter: to } => *to != waiter,
        });
        if was_first
            && !served
            && let Some(next) = self.first()
        {
            self.wakes.push_back(Wake::Replay { waiter: next });
        }
    }

    /// The next delivery to make.
    pub fn poll_wake(&mut self) -> Option<Wake> {
        self.wakes.pop_front()
    }
}
