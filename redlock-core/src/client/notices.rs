//! Each node's pub/sub link for release notices, as a
//! [`Client`](super::Client) keeps it: made the first time an acquire
//! waits, kept subscribed to exactly the channels the hub wants, one
//! subscribe or unsubscribe at a time, and made again after a backoff when
//! it is lost. Nothing depends on it: a node without one sends no notices,
//! and its waiters retry on their timers.

use std::collections::{BTreeSet, VecDeque};
use std::time::Instant;

use rand_core::Rng;

use crate::{Backoff, Key, NodeId};

use super::Output;

/// A node's pub/sub link, as the driver last said.
#[derive(Debug)]
enum Link {
    /// None, and none asked for: nothing was wanted yet.
    Idle,
    /// [`Output::ConnectNotices`] was emitted; its outcome comes next.
    Connecting,
    /// Connected, subscribed to `subscribed`; `pending` was asked and is
    /// not confirmed yet; `listened` once a subscription was confirmed.
    Up {
        subscribed: BTreeSet<Key>,
        pending: Option<Pending>,
        listened: bool,
    },
    /// Lost, or its attempt failed: the next one is due at `retry_at`, if
    /// something is wanted then.
    Down { retry_at: Instant },
}

/// A change of subscriptions asked of a link and not confirmed yet.
#[derive(Debug)]
enum Pending {
    Subscribe(Vec<Key>),
    Unsubscribe(Vec<Key>),
}

/// One node's release-notice link.
#[derive(Debug)]
pub(super) struct NoticeLink {
    link: Link,
    /// The wait before an attempt after a loss: reset only by a link that
    /// subscribes (one that connects but may not subscribe, an ACL user
    /// without `SUBSCRIBE`, must not reconnect in a tight loop).
    backoff: Backoff,
    /// A link of this node was lost before: what it subscribes to now is a
    /// subscription again, and a release meanwhile may have gone unheard.
    lost_before: bool,
}

impl NoticeLink {
    pub(super) fn new() -> Self {
        Self {
            link: Link::Idle,
            backoff: Backoff::reconnect(),
            lost_before: false,
        }
    }

    /// Whether a link is up (connected, whatever it subscribed to).
    fn is_up(&self) -> bool {
        matches!(self.link, Link::Up { .. })
    }

    /// Whether a link is up and the node accepted a subscription on it: not
    /// between a connection and a refusal (an ACL user without
    /// `SUBSCRIBE`).
    pub(super) fn is_listening(&self) -> bool {
        matches!(self.link, Link::Up { listened: true, .. })
    }

    /// Asks what brings the link to serve `wanted` at `now`: a connection
    /// while something is wanted and none is up (once its retry is due),
    /// then the channels it lacks, then the ones nobody wants any more.
    pub(super) fn reconcile<R>(
        &mut self,
        node: NodeId,
        wanted: &BTreeSet<Key>,
        now: Instant,
        outputs: &mut VecDeque<Output<R>>,
    ) {
        match &mut self.link {
            Link::Idle | Link::Down { .. } if wanted.is_empty() => {}
            Link::Down { retry_at } if *retry_at > now => {}
            Link::Idle | Link::Down { .. } => {
                self.link = Link::Connecting;
                outputs.push_back(Output::ConnectNotices(node));
            }
            Link::Connecting
            | Link::Up {
                pending: Some(_), ..
            } => {}
            Link::Up {
                subscribed,
                pending,
                ..
            } => {
                let add: Vec<Key> = wanted.difference(subscribed).cloned().collect();
                if !add.is_empty() {
                    *pending = Some(Pending::Subscribe(add.clone()));
                    outputs.push_back(Output::Subscribe {
                        node,
                        channels: add,
                    });
                    return;
                }
                let remove: Vec<Key> = subscribed.difference(wanted).cloned().collect();
                if !remove.is_empty() {
                    *pending = Some(Pending::Unsubscribe(remove.clone()));
                    outputs.push_back(Output::Unsubscribe {
                        node,
                        channels: remove,
                    });
                }
            }
        }
    }

    /// The connection asked for is up.
    pub(super) fn connected(&mut self) {
        if matches!(self.link, Link::Connecting) {
            self.link = Link::Up {
                subscribed: BTreeSet::new(),
                pending: None,
                listened: false,
            };
        }
    }

    /// The link was lost, or its attempt failed, at `now`: the next attempt
    /// waits for the backoff.
    pub(super) fn lost(&mut self, now: Instant, rng: &mut impl Rng) {
        self.lost_before |= self.is_up();
        let mut wait = self.backoff.next(rng);
        if planted!(ReconnectWithoutBackoff) {
            wait = std::time::Duration::ZERO;
        }
        self.link = Link::Down {
            retry_at: now + wait,
        };
    }

    /// The subscribe or unsubscribe asked for was confirmed: the channels
    /// newly subscribed, and whether it is a subscription again (a link
    /// was lost before), for the hub.
    pub(super) fn confirmed(&mut self) -> Option<(Vec<Key>, bool)> {
        let Link::Up {
            subscribed,
            pending,
            listened,
        } = &mut self.link
        else {
            return None;
        };
        match pending.take()? {
            Pending::Subscribe(channels) => {
                self.backoff.reset();
                *listened = true;
                subscribed.extend(channels.iter().cloned());
                Some((channels, self.lost_before))
            }
            Pending::Unsubscribe(channels) => {
                for channel in &channels {
                    subscribed.remove(channel);
                }
                None
            }
        }
    }

    /// When the next attempt is due, while the link is down.
    pub(super) fn retry_at(&self) -> Option<Instant> {
        match self.link {
            Link::Down { retry_at } => Some(retry_at),
            _ => None,
        }
    }
}
