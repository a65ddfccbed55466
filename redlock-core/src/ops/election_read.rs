//! Who leads an election, as one read of every node tells: advisory.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::ops::machine::Machine;
use crate::ops::read_all::{NodeRead, ReadAll};
use crate::{
    Command, ElectionTiming, Key, NodeError, NodeErrorKind, Reply, Request, Response, RoundId,
    Settings, Votes,
};

/// A leader, as the nodes tell it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The leader's id: its lock value.
    pub id: Vec<u8>,
    /// Its term: the highest fencing counter among the nodes that hold its id.
    pub term: u64,
    /// The value it proclaimed under this term, if a node holds one.
    pub value: Option<Vec<u8>>,
}

/// One node's answer to [`scripts::READ_LEADER`](crate::scripts::READ_LEADER).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct LeaderReply {
    /// The lock key's value (the leader's id), if the key exists.
    pub holder: Option<Vec<u8>>,
    /// The node's fencing counter, if it holds a number.
    pub counter: Option<u64>,
    /// The node's leader record: term, id and value.
    pub record: Option<(u64, Vec<u8>, Vec<u8>)>,
}

impl LeaderReply {
    /// Reads the script's `{value, counter, record}`; anything else is a
    /// [`NodeErrorKind::Protocol`] error.
    pub fn parse(response: Response) -> Result<Self, NodeError> {
        let unexpected = |response: &dyn std::fmt::Debug| {
            NodeError::new(
                NodeErrorKind::Protocol,
                format!("unexpected answer to the read-leader script: {response:?}"),
            )
        };
        let Response::Array(items) = response else {
            return Err(unexpected(&response));
        };
        let [holder, counter, record] =
            <[Response; 3]>::try_from(items).map_err(|items| unexpected(&items))?;
        let bytes = |response: Response| match response {
            Response::Data(bytes) => Some(bytes),
            _ => None,
        };
        let number = |bytes: &[u8]| std::str::from_utf8(bytes).ok()?.parse::<u64>().ok();
        let record = bytes(record).and_then(|record| {
            let mut parts = record.splitn(3, |&b| b == 0);
            let term = number(parts.next()?)?;
            let id = parts.next()?.to_vec();
            let value = parts.next()?.to_vec();
            Some((term, id, value))
        });
        Ok(Self {
            // Without a waiter's mark ([`waited`](crate::waited)): the id.
            holder: bytes(holder).map(|held| crate::waited::unmarked(&held).to_vec()),
            counter: bytes(counter).as_deref().and_then(number),
            record,
        })
    }
}

/// What a read of the leader ([`Operation::read_leader`](crate::Operation::read_leader)) found on
/// every node: its final event.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaderReport {
    /// One entry per node, in node order.
    pub reads: Vec<Result<LeaderReply, NodeError>>,
}

impl LeaderReport {
    /// The leader: an id held on a quorum of the nodes, with the highest
    /// counter among them as its term and the value of a record of that id
    /// and term. Advisory: the answer is already old when it arrives, and
    /// a leader may have stepped down since (use the term to fence).
    pub fn leader(&self) -> Option<Leader> {
        let quorum = crate::quorum(self.reads.len());
        let replies: Vec<&LeaderReply> =
            self.reads.iter().filter_map(|r| r.as_ref().ok()).collect();
        let id = replies
            .iter()
            .filter_map(|r| r.holder.as_ref())
            .find(|id| {
                replies
                    .iter()
                    .filter(|r| r.holder.as_ref() == Some(*id))
                    .count()
                    >= quorum
            })?;
        let holding = || replies.iter().filter(|r| r.holder.as_ref() == Some(id));
        let term = holding().filter_map(|r| r.counter).max()?;
        let value = replies
            .iter()
            .filter_map(|r| r.record.as_ref())
            .find(|(t, i, _)| *t == term && i == id)
            .map(|(_, _, value)| value.clone());
        Some(Leader {
            id: id.clone(),
            term,
            value,
        })
    }
}

/// One read of an election on every node, driven like every `Machine`
/// (`ReadAll`): the read behind a one-shot "who leads" and each poll of
/// an observer. It gives its [`LeaderReport`] once every node answered or
/// at the per-node timeout; it decides nothing and writes nothing.
#[cfg_attr(not(feature = "simulation"), allow(unreachable_pub))]
pub type LeaderRead = ReadAll<LeaderReply>;

#[cfg_attr(not(feature = "simulation"), allow(unreachable_pub))]
impl ReadAll<LeaderReply> {
    /// Reads the election `name` on every node from `now`, in round `round`.
    pub fn new(settings: &Settings, name: &[u8], round: RoundId, now: Instant) -> Self {
        let key = settings.key(name);
        let keys: Arc<[Key]> = Arc::from([
            key.clone(),
            settings.fencing_key(&key),
            settings.leader_key(&key),
        ]);
        Self::start(settings, keys, Command::ReadLeader, round, now)
    }
}

impl NodeRead for LeaderReply {
    type Report = LeaderReport;

    fn parse(response: Response) -> Result<Self, NodeError> {
        LeaderReply::parse(response)
    }

    fn report(reads: Vec<Result<Self, NodeError>>, _votes: Votes) -> LeaderReport {
        LeaderReport { reads }
    }
}

/// What an observer tells: each leader once, by identity and term. Feed it
/// every [`LeaderReport`]; a report tells news when its leader has another
/// id than the last one told, a higher term, or the same term with the
/// leader's value newly arrived. A report of the same leader under a lower
/// term (a minority of nodes behind) tells nothing.
///
/// Terms rise while the servers keep their data. Where a quorum of them
/// restarted empty, the next leader's term starts again from 1: a leader
/// with another id is told all the same, whatever its term, so an observer
/// never stays on a leader that is gone.
#[derive(Clone, Debug, Default)]
#[cfg_attr(not(feature = "simulation"), allow(unreachable_pub))]
pub struct LeaderWatch {
    last: Option<Leader>,
}

#[cfg_attr(not(feature = "simulation"), allow(unreachable_pub))]
impl LeaderWatch {
    /// A watch that has told nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The leader to tell after `report`, if any.
    pub fn handle_report(&mut self, report: &LeaderReport) -> Option<Leader> {
        let leader = report.leader()?;
        let news = match &self.last {
            None => true,
            Some(last) => {
                leader.id != last.id
                    || leader.term > last.term
                    || (leader.term == last.term
                        && leader.value.is_some()
                        && last.value != leader.value)
            }
        };
        if news {
            self.last = Some(leader.clone());
            return Some(leader);
        }
        None
    }

    /// The last leader told.
    #[cfg(feature = "simulation")]
    pub fn last(&self) -> Option<&Leader> {
        self.last.as_ref()
    }
}

/// An observer of an election ([`Operation::observe`](crate::Operation::observe)):
/// a [`LeaderRead`] of every node at once, then one each period after the
/// last one ended, each new leader told once ([`LeaderWatch`]). It never
/// ends by itself: cancel it (a closed client ends it).
#[derive(Debug)]
pub(crate) struct Observation {
    settings: Arc<Settings>,
    name: Box<[u8]>,
    period: Duration,
    watch: LeaderWatch,
    /// The read under way.
    read: Option<LeaderRead>,
    /// When the next read starts, while none is under way.
    next_read: Instant,
    /// Reads started: each its own round, so a late answer to one is never
    /// counted in the next.
    reads: u64,
    leaders: VecDeque<Leader>,
}

impl Observation {
    /// Observes the election `name` from `now`, reading every `period`; a
    /// zero period is the default timings' retry period
    /// ([`ElectionTiming::default_for`]).
    pub(crate) fn new(
        settings: &Arc<Settings>,
        name: &[u8],
        period: Duration,
        now: Instant,
    ) -> Self {
        let period = if period.is_zero() {
            ElectionTiming::default_for(settings).retry_period()
        } else {
            period
        };
        let mut this = Self {
            settings: Arc::clone(settings),
            name: name.into(),
            period,
            watch: LeaderWatch::new(),
            read: None,
            next_read: now,
            reads: 0,
            leaders: VecDeque::new(),
        };
        this.handle_timeout(now);
        this
    }

    /// The read under way, once it has its report: a leader that is news
    /// is told, and the next read waits one period.
    fn finish_read(&mut self, now: Instant) {
        let Some(report) = self.read.as_mut().and_then(LeaderRead::poll_event) else {
            return;
        };
        self.read = None;
        self.next_read = now + self.period;
        if let Some(leader) = self.watch.handle_report(&report) {
            self.leaders.push_back(leader);
        }
    }
}

impl Machine for Observation {
    type Event = Leader;

    fn poll_request(&mut self) -> Option<Request> {
        self.read.as_mut()?.poll_request()
    }

    fn poll_event(&mut self) -> Option<Leader> {
        self.leaders.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match &self.read {
            Some(read) => read.poll_timeout(),
            None => Some(self.next_read),
        }
    }

    fn handle_reply(&mut self, reply: Reply, now: Instant) {
        if let Some(read) = &mut self.read {
            read.handle_reply(reply, now);
            self.finish_read(now);
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        match &mut self.read {
            Some(read) => {
                read.handle_timeout(now);
                self.finish_read(now);
            }
            None if now >= self.next_read => {
                self.reads += 1;
                self.read = Some(LeaderRead::new(
                    &self.settings,
                    &self.name,
                    RoundId(self.reads),
                    now,
                ));
            }
            None => {}
        }
    }

    fn is_done(&self) -> bool {
        false
    }
}
