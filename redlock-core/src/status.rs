//! What the nodes hold for a lock key, and what a quorum of them says.
//!
//! Nothing here takes part in the algorithm: the reads are not votes, and a
//! lock seen on a quorum may expire the next moment. They answer "who holds
//! this key, where, and for how long" for a human or a script (the
//! `redlock status` command). Each node runs
//! [`scripts::INSPECT`](crate::scripts::INSPECT); its reply
//! is read by [`InspectReply::parse`], and the replies of every node are
//! summed up by [`LockStatus::from_reads`].

use std::fmt;
use std::time::Duration;

use crate::{NodeError, NodeErrorKind, Response, quorum};

/// A lock key present on a node.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holding {
    /// The stored value: the holder's [`LockValue`](crate::LockValue) for
    /// keys set by Redlock. **Whoever knows it can release the lock**;
    /// `Debug` shows only a prefix.
    pub value: Vec<u8>,
    /// The node's `PTTL`: how long until this node expires the key, as the
    /// node's clock counts. `None` when the key has no expiry, which Redlock
    /// never does: something else wrote it.
    pub pttl: Option<Duration>,
}

impl Holding {
    /// A key holding `value` for `pttl`.
    pub fn new(value: impl Into<Vec<u8>>, pttl: Option<Duration>) -> Self {
        Self {
            value: value.into(),
            pttl,
        }
    }
}

impl fmt::Debug for Holding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Holding")
            .field("value", &Prefix(&self.value))
            .field("pttl", &self.pttl)
            .finish()
    }
}

/// The first 8 bytes of a lock value, for `Debug`: the rest releases it.
struct Prefix<'a>(&'a [u8]);

impl fmt::Debug for Prefix<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = &self.0[..self.0.len().min(8)];
        write!(f, "{}…", String::from_utf8_lossy(shown))
    }
}

/// One node's answer to [`scripts::INSPECT`](crate::scripts::INSPECT).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct InspectReply {
    /// The lock key's value and PTTL; `None`: no such key.
    pub holding: Option<Holding>,
    /// The node's fencing counter for the resource, if the key exists and
    /// holds a number.
    pub fencing_counter: Option<u64>,
}

impl InspectReply {
    /// Reads the script's `{value, pttl, counter}`; anything else is a
    /// [`NodeErrorKind::Protocol`] error.
    pub fn parse(response: Response) -> Result<Self, NodeError> {
        let unexpected = |response: &dyn fmt::Debug| {
            NodeError::new(
                NodeErrorKind::Protocol,
                format!("unexpected answer to the inspect script: {response:?}"),
            )
        };
        let Response::Array(items) = response else {
            return Err(unexpected(&response));
        };
        let [stored, pttl, counter] =
            <[Response; 3]>::try_from(items).map_err(|items| unexpected(&items))?;
        let holding = match (stored, pttl) {
            (Response::Nil, _) | (_, Response::Int(-2)) => None,
            (Response::Data(value), Response::Int(pttl)) => Some(Holding {
                value,
                // -1: no expiry. Other negatives do not exist.
                pttl: u64::try_from(pttl).ok().map(Duration::from_millis),
            }),
            (stored, pttl) => return Err(unexpected(&(stored, pttl))),
        };
        let fencing_counter = match counter {
            Response::Data(bytes) => std::str::from_utf8(&bytes)
                .ok()
                .and_then(|text| text.parse().ok()),
            _ => None,
        };
        Ok(Self {
            holding,
            fencing_counter,
        })
    }
}

/// Whether a lock is held, as one read of every node tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockState {
    /// One value is on a quorum of nodes.
    Held,
    /// A quorum answered and no value is on a quorum of them.
    NotHeld,
    /// Too few nodes answered to tell.
    Unknown,
}

/// The value held on a quorum of nodes.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The value (it can release the lock; `Debug` shows only a prefix).
    pub value: Vec<u8>,
    /// Nodes holding it: a quorum or more.
    pub nodes: usize,
    /// How long a quorum of nodes still holds it, unless it is extended or
    /// released: the quorum-th longest PTTL. `None`: a quorum holds it with
    /// no expiry (not set by Redlock).
    pub remaining: Option<Duration>,
}

impl fmt::Debug for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Holder")
            .field("value", &Prefix(&self.value))
            .field("nodes", &self.nodes)
            .field("remaining", &self.remaining)
            .finish()
    }
}

/// What one read of every node says about a lock: made by
/// [`LockStatus::from_reads`].
///
/// ```
/// use std::time::Duration;
/// use redlock_core::{Holding, LockState, LockStatus};
///
/// let ms = Duration::from_millis;
/// let held = [Holding::new("v", Some(ms(900))), Holding::new("v", Some(ms(700)))];
/// let other = Holding::new("w", Some(ms(5)));
/// let reads: [Result<Option<&Holding>, ()>; 5] =
///     [Ok(Some(&held[0])), Ok(Some(&held[1])), Ok(None), Ok(Some(&other)), Err(())];
/// let status = LockStatus::from_reads(reads);
/// assert_eq!(status.state(), LockState::NotHeld); // "v" is on 2 nodes, the quorum is 3
///
/// let reads: [Result<Option<&Holding>, ()>; 3] =
///     [Ok(Some(&held[0])), Ok(Some(&held[1])), Err(())];
/// let status = LockStatus::from_reads(reads);
/// let holder = status.holder.as_ref().unwrap();
/// assert_eq!((holder.nodes, holder.remaining), (2, Some(ms(700))));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockStatus {
    /// Nodes read (all of them).
    pub nodes: usize,
    /// Nodes a lock needs: [`quorum`] of `nodes`.
    pub quorum: usize,
    /// Nodes that answered.
    pub answered: usize,
    /// Nodes that answered with the key present, whatever its value.
    pub with_key: usize,
    /// The value on a quorum of nodes, if any.
    pub holder: Option<Holder>,
}

impl LockStatus {
    /// Sums up one read of **every** node (the count sets the quorum): `Ok`
    /// with what the node holds (`None`: no key), or `Err` for a node that
    /// could not be read.
    pub fn from_reads<'a, E>(
        reads: impl IntoIterator<Item = Result<Option<&'a Holding>, E>>,
    ) -> Self {
        let mut nodes = 0;
        let mut answered = 0;
        // Each value seen, with the PTTL on each node that holds it.
        let mut values: Vec<(&[u8], Vec<Option<Duration>>)> = Vec::new();
        for read in reads {
            nodes += 1;
            let Ok(holding) = read else { continue };
            answered += 1;
            let Some(holding) = holding else { continue };
            match values.iter_mut().find(|(value, _)| *value == holding.value) {
                Some((_, pttls)) => pttls.push(holding.pttl),
                None => values.push((&holding.value, vec![holding.pttl])),
            }
        }
        let quorum = quorum(nodes);
        let with_key = values.iter().map(|(_, pttls)| pttls.len()).sum();
        let holder = values
            .into_iter()
            .find(|(_, pttls)| pttls.len() >= quorum)
            .map(|(value, mut pttls)| {
                // The lock stands while a quorum holds the key: the quorum-th
                // longest PTTL. A key without expiry (`None`) lasts longest.
                pttls.sort_by_key(|pttl| std::cmp::Reverse(pttl.unwrap_or(Duration::MAX)));
                Holder {
                    value: value.to_vec(),
                    nodes: pttls.len(),
                    remaining: pttls[quorum - 1],
                }
            });
        Self {
            nodes,
            quorum,
            answered,
            with_key,
            holder,
        }
    }

    /// Held, not held, or unknown (fewer than a quorum answered).
    pub fn state(&self) -> LockState {
        if self.holder.is_some() {
            LockState::Held
        } else if self.answered < self.quorum {
            LockState::Unknown
        } else {
            LockState::NotHeld
        }
    }
}
