//! The election's model: clients campaign with the core's real fenced
//! [`Acquisition`], lead with the core's real [`Term`] (a [`KeptLock`]
//! renewing every retry period, and the loss instant; one campaign each in
//! the configurations run today), against the masters of the lock model (`Node`: set if
//! absent, fencing counter, extend and restore, compare-and-delete; keys
//! expire up to `early` ticks before their TTL on a master whose clock runs
//! fast, in model while within the drift allowance).
//!
//! Time is discrete (one tick, one millisecond of true time); each tick
//! first fires every client's timer that is due. Every request and every
//! answer waits in its FIFO link for any number of ticks, in any
//! interleaving.
//!
//! Properties, in every reachable state:
//! - [`ONE_LEADER_PER_TERM`]: no two clients elected with one term;
//! - [`TERMS_RISE`]: each election's term is larger than every earlier one;
//! - [`LOSS_FIRST`]: when a client is elected, no other client still leads
//!   (its loss fired before, at its own loss instant, in true time).
//!
//! [`KeptLock`]: redlock_core::KeptLock

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redlock_core::planted::{self, Bug};
use redlock_core::{
    AcquireEvent, Acquisition, Attempts, Config, ElectionTiming, LockSpec, Machine, Reply, Request,
    Settings, Term, TermEvent,
};
use stateright::{Checker, HasDiscoveries, Model, Property};

use crate::{HashWriter, ModelRng, Node, RESOURCE};

/// No two clients are elected with the same term.
pub const ONE_LEADER_PER_TERM: &str = "election: at most one leader per term";
/// Every election's term is larger than every earlier election's.
pub const TERMS_RISE: &str = "election: terms strictly rise";
/// A client is elected only once every other leader's loss has fired.
pub const LOSS_FIRST: &str =
    "election: a deposed leader's loss fires before a higher term is granted";

/// One configuration of the election model.
#[derive(Clone, Debug)]
pub struct ElectionSetup {
    /// A short name for reports.
    pub name: &'static str,
    /// Masters.
    pub nodes: usize,
    /// Clients.
    pub clients: usize,
    /// The lease (TTL) in ticks.
    pub lease_ms: u64,
    /// The renew deadline in ticks.
    pub renew_ms: u64,
    /// The retry period in ticks.
    pub retry_ms: u64,
    /// The per-node timeout in ticks.
    pub node_timeout_ms: u64,
    /// The last tick.
    pub horizon: u64,
    /// Campaigns each client may start (each a single attempt), at any tick.
    pub campaigns: u8,
    /// Master crashes in total (data kept; each restarts when the model says).
    pub crashes: u8,
    /// Per master, how many ticks early its keys expire.
    pub early: Vec<u64>,
    /// Whether an answer reaches its client in the step its request ran
    /// (the request may still wait any number of ticks): fewer states.
    pub answer_at_once: bool,
    /// The planted bug switched on, if any.
    pub bug: Option<Bug>,
}

impl ElectionSetup {
    /// N = 3, two clients, a lease of 5 ticks (validity 3 with the 2 ms
    /// drift allowance), renew deadline 2, retry period 1, two masters'
    /// clocks 2 ticks fast (the whole allowance): the first leader's keys
    /// die there at tick 3, when the second may be elected.
    pub fn small() -> Self {
        Self {
            name: "election N=3 C=2, clocks 2 ticks fast on two masters",
            nodes: 3,
            clients: 2,
            lease_ms: 5,
            renew_ms: 2,
            retry_ms: 1,
            node_timeout_ms: 1,
            horizon: 3,
            campaigns: 1,
            crashes: 0,
            early: vec![2, 2, 0],
            answer_at_once: true,
            bug: None,
        }
    }

    /// The configurations of `make model`. One, for now: with a master
    /// crash (`crashes: 1`) the world did not finish within 400 s on two
    /// cores at this horizon.
    pub fn all(_quick: bool) -> Vec<Self> {
        vec![Self::small()]
    }

    /// Each planted election bug, with the configuration and the property
    /// that must catch it.
    pub fn planted() -> Vec<(Bug, Self, &'static str)> {
        vec![
            (
                Bug::ElectionLosesAtExpiry,
                Self {
                    bug: Some(Bug::ElectionLosesAtExpiry),
                    ..Self::small()
                },
                LOSS_FIRST,
            ),
            (
                Bug::ElectionTermFromClient,
                Self {
                    bug: Some(Bug::ElectionTermFromClient),
                    ..Self::small()
                },
                TERMS_RISE,
            ),
        ]
    }
}

#[derive(Clone, Debug)]
enum Phase {
    Idle,
    Campaigning(Box<Acquisition<ModelRng>>),
    Leading(Box<Term>),
}

#[derive(Clone, Debug)]
struct Client {
    phase: Phase,
    campaigns_left: u8,
}

/// A state of the election model.
#[derive(Clone, Debug)]
pub struct ElectionState {
    now: u64,
    nodes: Vec<Node>,
    /// Requests on their way, per client and master.
    requests: Vec<VecDeque<Request>>,
    /// Answers on their way back, per client and master.
    replies: Vec<VecDeque<Reply>>,
    clients: Vec<Client>,
    crashes_left: u8,
    /// Every election so far: client and term.
    elected: Vec<(usize, u64)>,
    /// Properties broken on the way here.
    broken: Vec<&'static str>,
    fingerprint: u64,
}

impl Hash for ElectionState {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.fingerprint.hash(state);
    }
}

impl PartialEq for ElectionState {
    fn eq(&self, other: &Self) -> bool {
        self.fingerprint == other.fingerprint
    }
}

/// A step of the model.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ElectionAction {
    /// One tick passes; due timers fire.
    Tick,
    /// Client starts a campaign.
    Campaign(usize),
    /// The head request of client to master runs there.
    Deliver(usize, usize),
    /// The head answer of master to client reaches it.
    Answer(usize, usize),
    /// A master goes down (its data kept).
    Crash(usize),
    /// A master comes back.
    Restart(usize),
}

/// The election model of one [`ElectionSetup`].
pub struct ElectionModel {
    setup: ElectionSetup,
    settings: Arc<Settings>,
    timing: ElectionTiming,
    base: Instant,
}

impl ElectionModel {
    /// The model of `setup`.
    pub fn new(setup: ElectionSetup) -> Self {
        let settings = Config::new((0..setup.nodes).map(|i| format!("n{i}")))
            .allow_even_nodes(true)
            .ttl(Duration::from_millis(setup.lease_ms))
            .node_timeout(Duration::from_millis(setup.node_timeout_ms))
            .release_notices(false)
            .drift_factor(0.0)
            .native_commands(false)
            .validate()
            .expect("valid model settings");
        let timing = ElectionTiming::new(
            &settings,
            Duration::from_millis(setup.lease_ms),
            Duration::from_millis(setup.renew_ms),
            Duration::from_millis(setup.retry_ms),
        )
        .expect("valid model timings");
        Self {
            setup,
            settings: Arc::new(settings),
            timing,
            base: Instant::now(),
        }
    }

    fn at(&self, tick: u64) -> Instant {
        self.base + Duration::from_millis(tick)
    }

    fn link(&self, client: usize, node: usize) -> usize {
        client * self.setup.nodes + node
    }

    /// Sends what the client's machine queued and acts on its events.
    fn settle(&self, state: &mut ElectionState, c: usize) {
        let now = state.now;
        loop {
            let client = &mut state.clients[c];
            let mut sent = Vec::new();
            let mut elected = None;
            let mut lost = false;
            match &mut client.phase {
                Phase::Idle => return,
                Phase::Campaigning(acquisition) => {
                    sent.extend(std::iter::from_fn(|| acquisition.poll_request()));
                    while let Some(event) = acquisition.poll_event() {
                        match event {
                            AcquireEvent::Acquired(lock) => elected = Some(Some(lock)),
                            AcquireEvent::Failed(_) => elected = Some(None),
                            AcquireEvent::AttemptFailed { .. } => {}
                        }
                    }
                }
                Phase::Leading(term) => {
                    sent.extend(std::iter::from_fn(|| term.poll_request()));
                    while let Some(event) = term.poll_event() {
                        lost |= matches!(event, TermEvent::Lost(_));
                    }
                }
            }
            if lost {
                // Requests in flight stay in the network, as an adapter's
                // drain sends them; their answers go to nobody.
                client.phase = Phase::Idle;
            }
            for request in sent {
                let link = self.link(c, request.node.0);
                state.requests[link].push_back(request);
            }
            match elected {
                None => return,
                Some(None) => {
                    state.clients[c].phase = Phase::Idle;
                    return;
                }
                Some(Some(lock)) => {
                    let term = Term::new(lock, &self.timing).expect("a campaign is fenced");
                    let number = term.term();
                    if state.elected.iter().any(|&(_, t)| t == number) {
                        state.broken.push(ONE_LEADER_PER_TERM);
                    }
                    if state.elected.iter().any(|&(_, t)| t >= number) {
                        state.broken.push(TERMS_RISE);
                    }
                    let still_leading = state.clients.iter().enumerate().any(|(other, client)| {
                        other != c && matches!(&client.phase, Phase::Leading(t) if !t.is_over())
                    });
                    if still_leading {
                        state.broken.push(LOSS_FIRST);
                    }
                    state.elected.push((c, number));
                    state.clients[c].phase = Phase::Leading(Box::new(term));
                    // A term's first requests come at its first timer.
                    let _ = now;
                }
            }
        }
    }

    /// Client `c` starts a campaign now.
    fn start(&self, state: &mut ElectionState, c: usize) {
        let client = &mut state.clients[c];
        client.campaigns_left -= 1;
        let rng = ModelRng {
            client: c as u8,
            seq: client.campaigns_left.wrapping_mul(64),
        };
        let acquisition = Acquisition::with_spec(
            Arc::clone(&self.settings),
            LockSpec::Fenced(RESOURCE),
            self.timing.lease(),
            Attempts::Once,
            self.at(state.now),
            rng,
        )
        .expect("a fenced lock on one resource");
        client.phase = Phase::Campaigning(Box::new(acquisition));
        self.settle(state, c);
    }

    /// Feeds an answer to client `c`'s machine.
    fn answer(&self, state: &mut ElectionState, c: usize, reply: Reply, now: Instant) {
        match &mut state.clients[c].phase {
            Phase::Campaigning(a) => a.handle_reply(reply, now),
            Phase::Leading(t) => t.handle_reply(reply, now),
            Phase::Idle => {}
        }
        self.settle(state, c);
    }

    /// Fires every timer due at the current tick.
    fn fire(&self, state: &mut ElectionState) {
        let now = self.at(state.now);
        for c in 0..state.clients.len() {
            loop {
                let due = match &state.clients[c].phase {
                    Phase::Idle => None,
                    Phase::Campaigning(a) => a.poll_timeout(),
                    Phase::Leading(t) => t.poll_timeout(),
                };
                if due.is_none_or(|at| at > now) {
                    break;
                }
                match &mut state.clients[c].phase {
                    Phase::Campaigning(a) => a.handle_timeout(now),
                    Phase::Leading(t) => t.handle_timeout(now),
                    Phase::Idle => {}
                }
                self.settle(state, c);
            }
        }
    }

    fn seal(&self, mut state: ElectionState) -> ElectionState {
        let mut hasher = DefaultHasher::new();
        {
            let mut w = HashWriter(&mut hasher);
            let _ = write!(
                w,
                "{}|{:?}|{:?}|{:?}|{}|{:?}|{:?}",
                state.now,
                state.nodes,
                state.requests,
                state.replies,
                state.crashes_left,
                state.elected,
                state.broken
            );
            for client in &state.clients {
                let _ = write!(w, "|{}|{:?}", client.campaigns_left, client.phase);
            }
        }
        state.fingerprint = hasher.finish();
        state
    }

    /// Explores every state (`stop_at_first`: depth first, until the first
    /// counterexample).
    pub fn check(self, threads: usize, stop_at_first: bool) -> crate::hub::HubReport {
        let name = self.setup.name;
        let started = std::time::Instant::now();
        let builder = self.checker().threads(threads);
        if stop_at_first {
            let checker = builder
                .finish_when(HasDiscoveries::AnyFailures)
                .spawn_dfs()
                .join();
            Self::report(name, started, &checker)
        } else {
            Self::report(name, started, &builder.spawn_bfs().join())
        }
    }

    fn report(
        name: &'static str,
        started: std::time::Instant,
        checker: &impl Checker<Self>,
    ) -> crate::hub::HubReport {
        let mut violations = Vec::new();
        for property in [ONE_LEADER_PER_TERM, TERMS_RISE, LOSS_FIRST] {
            if let Some(path) = checker.discovery(property) {
                let mut trace = format!("  counterexample to \"{property}\" ({name}):");
                for (state, action) in path.into_vec() {
                    let _ = write!(trace, "\n    t={} elected={:?}", state.now, state.elected);
                    if let Some(action) = action {
                        let _ = write!(trace, "\n      {action:?}");
                    }
                }
                violations.push((property, trace));
            }
        }
        crate::hub::HubReport {
            name,
            unique_states: checker.unique_state_count(),
            states: checker.state_count(),
            max_depth: checker.max_depth(),
            seconds: started.elapsed().as_secs_f64(),
            violations,
        }
    }
}

impl Model for ElectionModel {
    type State = ElectionState;
    type Action = ElectionAction;

    fn init_states(&self) -> Vec<ElectionState> {
        planted::set(self.setup.bug);
        let links = self.setup.clients * self.setup.nodes;
        let mut state = ElectionState {
            now: 0,
            nodes: vec![
                Node {
                    up: true,
                    ..Node::default()
                };
                self.setup.nodes
            ],
            requests: vec![VecDeque::new(); links],
            replies: vec![VecDeque::new(); links],
            clients: vec![
                Client {
                    phase: Phase::Idle,
                    campaigns_left: self.setup.campaigns,
                };
                self.setup.clients
            ],
            crashes_left: self.setup.crashes,
            elected: Vec::new(),
            broken: Vec::new(),
            fingerprint: 0,
        };
        // Client 0 campaigns at tick 0 (the others at any tick): the
        // first leader's start fixes the origin of time, which only the
        // differences between clients matter to.
        self.start(&mut state, 0);
        vec![self.seal(state)]
    }

    fn actions(&self, state: &ElectionState, actions: &mut Vec<ElectionAction>) {
        if !state.broken.is_empty() {
            return;
        }
        if state.now < self.setup.horizon {
            actions.push(ElectionAction::Tick);
        }
        for (c, client) in state.clients.iter().enumerate() {
            if matches!(client.phase, Phase::Idle) && client.campaigns_left > 0 {
                actions.push(ElectionAction::Campaign(c));
            }
            for n in 0..self.setup.nodes {
                let link = self.link(c, n);
                if !state.requests[link].is_empty() {
                    actions.push(ElectionAction::Deliver(c, n));
                }
                if !state.replies[link].is_empty() {
                    actions.push(ElectionAction::Answer(c, n));
                }
            }
        }
        for (n, node) in state.nodes.iter().enumerate() {
            if node.up && state.crashes_left > 0 {
                actions.push(ElectionAction::Crash(n));
            }
            if !node.up {
                actions.push(ElectionAction::Restart(n));
            }
        }
    }

    fn next_state(&self, last: &ElectionState, action: ElectionAction) -> Option<ElectionState> {
        planted::set(self.setup.bug);
        let mut state = last.clone();
        let now = self.at(state.now);
        match action {
            ElectionAction::Tick => {
                state.now += 1;
                self.fire(&mut state);
            }
            ElectionAction::Campaign(c) => self.start(&mut state, c),
            ElectionAction::Deliver(c, n) => {
                let link = self.link(c, n);
                let request = state.requests[link].pop_front()?;
                if state.nodes[n].up {
                    let early = self.setup.early.get(n).copied().unwrap_or(0);
                    let response = state.nodes[n].run(&request, state.now, early);
                    let reply = Reply::to(&request, Ok(response));
                    if self.setup.answer_at_once {
                        self.answer(&mut state, c, reply, now);
                    } else {
                        state.replies[link].push_back(reply);
                    }
                }
            }
            ElectionAction::Answer(c, n) => {
                let link = self.link(c, n);
                let reply = state.replies[link].pop_front()?;
                self.answer(&mut state, c, reply, now);
            }
            ElectionAction::Crash(n) => {
                state.crashes_left -= 1;
                state.nodes[n].up = false;
            }
            ElectionAction::Restart(n) => state.nodes[n].up = true,
        }
        Some(self.seal(state))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(ONE_LEADER_PER_TERM, |_, s: &ElectionState| {
                !s.broken.contains(&ONE_LEADER_PER_TERM)
            }),
            Property::always(TERMS_RISE, |_, s: &ElectionState| {
                !s.broken.contains(&TERMS_RISE)
            }),
            Property::always(LOSS_FIRST, |_, s: &ElectionState| {
                !s.broken.contains(&LOSS_FIRST)
            }),
        ]
    }
}
