//! One read of every node: the machine behind `redlock status`
//! ([`Inspection`](crate::Inspection)) and an election's "who leads"
//! ([`LeaderRead`](crate::LeaderRead)).

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use crate::ops::machine::Machine;
use crate::quorum::Round;
use crate::{
    Command, Key, LockKind, LockValue, NodeError, NodeVote, Reply, Request, Response, RoundId,
    Settings, Votes,
};

/// What one node's answer to a read is, and what the answers of every node
/// make together: [`InspectReply`](crate::InspectReply) and
/// [`LeaderReply`](crate::LeaderReply).
#[cfg_attr(not(feature = "simulation"), allow(unreachable_pub))]
pub trait NodeRead: Clone + fmt::Debug + Sized {
    /// The reads of every node together: the machine's one event.
    type Report: fmt::Debug;

    /// One node's answer, or why it is not one.
    fn parse(response: Response) -> Result<Self, NodeError>;

    /// The report of these reads, one per node in node order (a node that
    /// did not answer in time is a timeout), and the reads as votes.
    fn report(reads: Vec<Result<Self, NodeError>>, votes: Votes) -> Self::Report;
}

/// One read of some keys on every node, run like every operation by the
/// [`Client`](crate::Client).
///
/// It sends one request per node at once, all with the per-node timeout
/// ([`Settings::node_timeout`]), and gives its report once every node
/// answered or at that deadline, whichever comes first: a node that has
/// not answered then is reported as timed out. It decides nothing and
/// writes nothing.
#[derive(Debug)]
#[cfg_attr(not(feature = "simulation"), allow(unreachable_pub))]
pub struct ReadAll<R: NodeRead> {
    round: Round,
    reads: Vec<Option<Result<R, NodeError>>>,
    requests: VecDeque<Request>,
    report: Option<R::Report>,
    done: bool,
}

impl<R: NodeRead> ReadAll<R> {
    /// Reads `keys` with `command` on every node from `now`, in round
    /// `round` (copied into every request; replies of other rounds are
    /// ignored).
    pub(crate) fn start(
        settings: &Settings,
        keys: Arc<[Key]>,
        command: Command,
        round: RoundId,
        now: Instant,
    ) -> Self {
        let round = Round::new(round, settings, now, settings.node_timeout());
        // The scripts take no value: an empty one goes as their unused ARGV.
        let value = LockValue::from_string(String::new());
        let requests = round
            .fan_out(&keys, &LockKind::Exclusive, &value, command, round.deadline)
            .collect();
        Self {
            reads: vec![None; settings.node_names().len()],
            round,
            requests,
            report: None,
            done: false,
        }
    }

    fn finish(&mut self, now: Instant) {
        self.done = true;
        let timeout = self.round.timeout;
        let reads = std::mem::take(&mut self.reads)
            .into_iter()
            .map(|read| read.unwrap_or_else(|| Err(NodeError::timeout(timeout))))
            .collect();
        self.report = Some(R::report(reads, self.round.votes(now)));
    }
}

impl<R: NodeRead> Machine for ReadAll<R> {
    /// The report, once every node answered or timed out.
    type Event = R::Report;

    fn poll_request(&mut self) -> Option<Request> {
        self.requests.pop_front()
    }

    fn poll_event(&mut self) -> Option<R::Report> {
        self.report.take()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        (!self.done).then_some(self.round.deadline)
    }

    fn handle_reply(&mut self, reply: Reply, now: Instant) {
        if self.done {
            return;
        }
        let read = reply.result.and_then(R::parse);
        let vote = match &read {
            Ok(_) => NodeVote::Granted,
            Err(error) => NodeVote::Failed(error.clone()),
        };
        // Counted once per node: a repeated or stray answer changes nothing.
        if !self.round.record(reply.round, reply.node, vote) {
            return;
        }
        if let Some(slot) = self.reads.get_mut(reply.node.0) {
            *slot = Some(read);
        }
        if self.round.all_answered() {
            self.finish(now);
        }
    }

    /// Times out the nodes that have not answered.
    fn handle_timeout(&mut self, now: Instant) {
        if !self.done && now >= self.round.deadline {
            self.round.expire();
            self.finish(now);
        }
    }

    fn is_done(&self) -> bool {
        self.done
    }
}
