//! What a [`Client`](super::Client) keeps apart from its operations: the
//! requests in flight, with their deadlines, and each node's state.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::time::Instant;

use crate::native::Call;
use crate::{Form, Key, NodeError, NodeId, Request, Ttl};

use super::node::NodeState;
use super::{OpId, Output, RequestId};

/// A request sent, until its answer, its deadline or its give-up.
#[derive(Debug)]
pub(super) struct Flight {
    pub(super) node: NodeId,
    /// The operation that waits for its answer, if it still runs.
    pub(super) op: Option<OpId>,
    pub(super) deadline: Instant,
    pub(super) give_up_at: Instant,
    /// The request: owed again if it must arrive and its connection
    /// breaks, sent again in full if its node answers `NOSCRIPT`.
    pub(super) request: Request,
    /// Its answer is a vote (not a release's, not a read's): one from a
    /// node that restarted since does not count.
    pub(super) votes: bool,
    /// Its deadline passed unanswered, and its node heard of it.
    pub(super) overdue: bool,
}

impl Flight {
    /// When the client next looks at it.
    pub(super) fn timer(&self) -> Instant {
        if self.overdue {
            self.give_up_at
        } else {
            self.deadline
        }
    }
}

/// The requests in flight and what each node owes, apart from the
/// operations, so both can be borrowed at once.
#[derive(Debug)]
pub(super) struct Links {
    pub(super) nodes: Box<[NodeState]>,
    pub(super) flights: HashMap<RequestId, Flight, foldhash::fast::FixedState>,
    pub(super) timers: BTreeSet<(Instant, RequestId)>,
    pub(super) next_request: u64,
    /// The longest TTL any request sent so far asked for.
    pub(super) longest_ttl: Ttl,
}

impl Links {
    /// Whether `request` goes to its node now, or the answer it gets
    /// instead: its node restarted under the client less than its wait
    /// ago, or is known slow ([`NodeHealth::admit`]).
    pub(super) fn admit(&mut self, request: &Request, now: Instant) -> Result<(), NodeError> {
        self.nodes[request.node.0].admit(request, now)
    }

    /// Files `request` as in flight for `op` and asks for it to be sent.
    pub(super) fn transmit<R>(
        &mut self,
        outputs: &mut VecDeque<Output<R>>,
        op: Option<OpId>,
        request: Request,
    ) {
        self.file(outputs, op, request, false);
    }

    /// Sends `flight`'s request again at `now`, in full (`EVAL`), for the
    /// same operation: its node answered `NOSCRIPT`. Past its deadline it
    /// is overdue at once, as the first send was: the node's late answer is
    /// not held against it twice.
    pub(super) fn send_in_full<R>(
        &mut self,
        outputs: &mut VecDeque<Output<R>>,
        flight: Flight,
        now: Instant,
    ) {
        let request = Request {
            form: Form::InFull,
            // The script itself, not a plain command it may be followed by.
            native: false,
            ..flight.request
        };
        let overdue = flight.overdue || request.deadline <= now;
        // In the place of the first send: before any request for its key
        // that waits for its turn on a cluster node.
        self.emit(outputs, flight.op, request, overdue);
    }

    fn file<R>(
        &mut self,
        outputs: &mut VecDeque<Output<R>>,
        op: Option<OpId>,
        request: Request,
        overdue: bool,
    ) {
        if let Some(request) = self.nodes[request.node.0].hold(op, request) {
            self.emit(outputs, op, request, overdue);
        }
    }

    /// Sends the next request for `key` that waits for its turn on cluster
    /// node `node`, if its turn came at `now` ([`NodeState::next_turn`]).
    pub(super) fn turn<R>(
        &mut self,
        outputs: &mut VecDeque<Output<R>>,
        node: NodeId,
        key: &Key,
        now: Instant,
    ) {
        if let Some((op, request)) = self.nodes[node.0].next_turn(key, now) {
            self.emit(outputs, op, request, false);
        }
    }

    /// Sends `request` now, in the form its node's last connection can
    /// take: a repeat in full stays so (and its script is cached by it).
    fn emit<R>(
        &mut self,
        outputs: &mut VecDeque<Output<R>>,
        op: Option<OpId>,
        mut request: Request,
        overdue: bool,
    ) {
        if request.form != Form::InFull {
            request.form = match request.call(&self.nodes[request.node.0].facts) {
                Call::Native(native) => Form::Native(native),
                Call::Script(_) => Form::Digest,
            };
        }
        let id = RequestId(self.next_request);
        self.next_request += 1;
        if let Some(ttl) = request.command.ttl() {
            self.longest_ttl = self.longest_ttl.max(ttl);
        }
        let flight = Flight {
            node: request.node,
            op,
            deadline: request.deadline,
            give_up_at: request.give_up_at,
            request: request.clone(),
            votes: !(request.command.must_arrive() || request.command.only_reads()),
            overdue,
        };
        self.nodes[request.node.0].sent(request.key(), id);
        self.timers.insert((flight.timer(), id));
        self.flights.insert(id, flight);
        outputs.push_back(Output::Transmit { id, request });
    }

    /// Takes request `id` out of flight: answered, or forgotten.
    pub(super) fn land(&mut self, id: RequestId) -> Option<Flight> {
        let flight = self.flights.remove(&id)?;
        self.nodes[flight.node.0].landed(flight.request.key());
        Some(flight)
    }

    /// Sends again what `node` is owed and was not given up at `now`.
    pub(super) fn resend<R>(
        &mut self,
        outputs: &mut VecDeque<Output<R>>,
        node: NodeId,
        now: Instant,
    ) {
        let state = &mut self.nodes[node.0];
        state.forget_given_up(now);
        state.retry_at = None;
        let owed = std::mem::take(&mut state.owed);
        for request in owed {
            self.transmit(outputs, None, request);
        }
    }
}
