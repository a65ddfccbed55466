//! What the nodes hold for a lock key, and what a quorum of them says.
//!
//! Nothing here takes part in the algorithm: the reads are not votes, and a
//! lock seen on a quorum may expire the next moment. They answer "who holds
//! this key, where, and for how long" for a human or a script (the
//! `redlock status` command). An [`Operation::inspect`](crate::Operation::inspect), driven like every
//! [`Machine`], sends [`scripts::INSPECT`](crate::scripts::INSPECT) to each
//! node; each reply is read by [`InspectReply::parse`], and the replies of
//! every node are summed up by [`LockStatus::from_reads`].

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::ops::read_all::{NodeRead, ReadAll};
use crate::{Command, NodeError, NodeErrorKind, Response, RoundId, Settings, Votes, quorum};

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
            // A mark that waiters wait (`waited`) is not part of the
            // holder's value: the same holder on every node, releasable.
            (Response::Data(value), Response::Int(pttl)) => Some(Holding {
                value: crate::waited::unmarked(&value).to_vec(),
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

    /// For the reads of a semaphore's permits key
    /// ([`Settings::permits_key`]): the number of permits a quorum of
    /// masters keeps, while a permit is held or was within a TTL; `None`
    /// when no quorum keeps one number.
    pub fn permits(&self) -> Option<u32> {
        let holder = self.holder.as_ref()?;
        std::str::from_utf8(&holder.value).ok()?.parse().ok()
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

/// What an inspection ([`Operation::inspect`](crate::Operation::inspect)) read on every node: its
/// final event.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct InspectReport {
    /// One entry per node, in node order: the node's reply, or why it could
    /// not be read (an error, or no answer within the per-node timeout).
    pub reads: Vec<Result<InspectReply, NodeError>>,
    votes: Votes,
}

impl InspectReport {
    /// The reads as [`Votes`], for logs and metrics: a node read is
    /// [`NodeVote::Granted`](crate::NodeVote::Granted), a node that could not be read
    /// [`NodeVote::Failed`](crate::NodeVote::Failed). Not votes on the lock: nothing was asked.
    pub fn votes(&self) -> &Votes {
        &self.votes
    }

    /// What the reads say together ([`LockStatus::from_reads`]).
    pub fn status(&self) -> LockStatus {
        LockStatus::from_reads(
            self.reads
                .iter()
                .map(|read| read.as_ref().map(|reply| reply.holding.as_ref())),
        )
    }
}

/// One read of a lock key on every node ([`scripts::INSPECT`](crate::scripts::INSPECT)),
/// as a state machine driven like every `Machine` (`ReadAll`): the read behind
/// `redlock status`.
///
/// It sends one request per node at once, all with the per-node timeout
/// ([`Settings::node_timeout`]), and gives its [`InspectReport`] once every
/// node answered or at that deadline, whichever comes first: a node that has
/// not answered then is reported as timed out. It decides nothing about the
/// lock and writes nothing.
///
/// ```
/// use std::time::{Duration, Instant};
/// use redlock_core::{Config, Inspection, LockState, Machine, Reply, Response, RoundId};
///
/// let settings = Config::new(["a", "b", "c"]).validate().unwrap();
/// let start = Instant::now();
/// let mut inspection = Inspection::new(&settings, b"report", RoundId(7), start);
/// let requests: Vec<_> = std::iter::from_fn(|| inspection.poll_request()).collect();
/// let held = Response::Array(vec![
///     Response::Data(b"v".to_vec()), Response::Int(900), Response::Nil,
/// ]);
/// inspection.handle_reply(Reply::to(&requests[0], Ok(held.clone())), start);
/// inspection.handle_reply(Reply::to(&requests[1], Ok(held)), start);
/// assert_eq!(inspection.poll_event(), None); // the third may still answer
/// // Its timeout: the third node did not answer.
/// inspection.handle_timeout(inspection.poll_timeout().unwrap());
/// let report = inspection.poll_event().unwrap();
/// assert!(inspection.is_done());
/// assert!(report.reads[2].is_err());
/// assert_eq!(report.status().state(), LockState::Held);
/// ```
#[cfg_attr(not(feature = "simulation"), allow(unreachable_pub))]
pub type Inspection = ReadAll<InspectReply>;

#[cfg_attr(not(feature = "simulation"), allow(unreachable_pub))]
impl ReadAll<InspectReply> {
    #[cfg(feature = "simulation")]
    /// Reads the lock on `resource` on every node, starting at `now`, in
    /// round `round` (copied into every request; replies of other rounds are
    /// ignored).
    pub fn new(settings: &Settings, resource: &[u8], round: RoundId, now: Instant) -> Self {
        Self::of_key(settings, settings.key(resource), round, now)
    }

    /// As [`new`](Self::new), for a lock key given whole: a semaphore's
    /// permit ([`Settings::permit_key`]).
    pub fn of_key(settings: &Settings, key: crate::Key, round: RoundId, now: Instant) -> Self {
        let counter = settings.fencing_key(&key);
        let keys: Arc<[crate::Key]> = Arc::from([key, counter]);
        Self::start(settings, keys, Command::Inspect, round, now)
    }
}

impl NodeRead for InspectReply {
    type Report = InspectReport;

    fn parse(response: Response) -> Result<Self, NodeError> {
        InspectReply::parse(response)
    }

    fn report(reads: Vec<Result<Self, NodeError>>, votes: Votes) -> InspectReport {
        InspectReport { reads, votes }
    }
}
