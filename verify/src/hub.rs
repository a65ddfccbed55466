//! The notice hub in the model: waiters woken by release notices and by
//! their client's own hand-overs, through the core's real [`Hub`], with no
//! retry timer to fall back on.
//!
//! Each client of the model keeps one [`Hub`] and runs several tasks that
//! each take the lock once. A task's acquisition is planned by the hub
//! ([`Hub::plan`], on the core's real [`Acquisition`]); its attempts are
//! abstract: one test-and-set of the lock, atomic (the Redlock rounds
//! behind an attempt are what the other configurations check). A waiting
//! task attempts again only when the hub tells it a notice newer than its
//! last attempt, as an acquisition does
//! ([`Machine::handle_notice`]):
//! here no timer stands behind a lost wake-up.
//!
//! The world around the hubs: a release frees the lock and hands over to
//! its client's hub at once ([`HandOver::Queued`]), and answers later
//! ([`HandOver::Answered`]); it publishes while a waiter of another client
//! waits (a waiting task's mark lives), to every client whose listener is
//! subscribed then, each notice arriving when the model says; a listener
//! subscribes whenever its hub wants the channel, may lose its connection
//! (a fault budget; what was in flight to it is lost) and subscribes again.
//! A waiter may give up (a wait limit, a cancelled future; a budget).
//!
//! Properties: one holder at a time ([`HUB_ONE_HOLDER`], by construction of
//! the abstract lock: a check that the model's bookkeeping holds), and no
//! waiter stranded ([`HUB_NOT_STRANDED`]): once nothing but faults and
//! giving up can happen, no task still waits. The planted bug
//! [`Bug::HubForgetsReplay`] strands one.

use std::fmt::Write as _;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redlock_core::planted::{self, Bug};
use redlock_core::{
    Acquisition, Attempts, Config, HandOver, Hub, Key, Machine, NodeId, Settings, WaiterId,
};
use stateright::{Checker, HasDiscoveries, Model, Property};

use crate::{HashWriter, ModelRng, RESOURCE};

/// Never two tasks holding the lock.
pub const HUB_ONE_HOLDER: &str = "hub: one holder at a time";
/// Once only faults and giving up could still happen, no task waits.
pub const HUB_NOT_STRANDED: &str = "hub: no waiter stranded while it keeps asking";

/// One configuration of the hub model.
#[derive(Clone, Debug)]
pub struct HubSetup {
    /// A short name for reports.
    pub name: &'static str,
    /// Tasks of each client (each takes the lock once).
    pub tasks: Vec<usize>,
    /// Waiters that give up, in total.
    pub cancels: u8,
    /// Pub/sub connections lost, in total.
    pub losses: u8,
    /// The planted bug switched on, if any.
    pub bug: Option<Bug>,
}

impl HubSetup {
    /// The configurations of `make model`: two clients (two tasks and one),
    /// then with a lost connection, then three tasks of one client (the
    /// planted bug's world). Two clients of two tasks each ran past 11
    /// minutes (the logical clock keeps states apart): not run.
    pub fn all(quick: bool) -> Vec<HubSetup> {
        let small = HubSetup {
            name: "hub: C=2 (2+1 tasks), 1 give-up",
            tasks: vec![2, 1],
            cancels: 1,
            losses: 0,
            bug: None,
        };
        if quick {
            return vec![small];
        }
        vec![
            small.clone(),
            HubSetup {
                name: "hub: C=2 (2+1 tasks), 1 give-up, 1 lost connection",
                losses: 1,
                ..small
            },
            // The planted bug's world, with the correct hub.
            HubSetup {
                bug: None,
                ..HubSetup::planted()
            },
        ]
    }

    /// The configuration that must catch [`Bug::HubForgetsReplay`].
    pub fn planted() -> HubSetup {
        HubSetup {
            name: "hub: C=1 (3 tasks), 1 give-up",
            tasks: vec![3],
            cancels: 1,
            losses: 0,
            bug: Some(Bug::HubForgetsReplay),
        }
    }
}

/// What a task is doing.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Task {
    Idle,
    /// Registered with its hub; `since`: its last attempt (`None`: queued
    /// without attempting); `due`: told a notice not older than that (the
    /// acquisition's rule: one that never attempted counts any notice).
    Waiting {
        waiter: WaiterId,
        since: Option<u64>,
        due: bool,
    },
    Holding,
    Done {
        served: bool,
    },
}

#[derive(Clone, Debug)]
struct Client {
    hub: Hub,
    tasks: Vec<Task>,
    /// Its listener is subscribed to the channel.
    subscribed: bool,
    /// Its last connection was lost: the next subscription is a new one.
    lost: bool,
    /// Notices published to it, on their way.
    inbox: u8,
    /// Its release's answer, on its way: (another client's waiter was
    /// marked, only its own were).
    answer: Option<(bool, bool)>,
}

/// One state of the hub model.
#[derive(Clone, Debug)]
pub struct HubState {
    /// Logical time: one step per action, the instants the hubs see.
    clock: u64,
    clients: Vec<Client>,
    cancels_left: u8,
    losses_left: u8,
    fingerprint: u64,
}

impl Hash for HubState {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.fingerprint.hash(state);
    }
}

impl PartialEq for HubState {
    fn eq(&self, other: &Self) -> bool {
        self.fingerprint == other.fingerprint
    }
}

/// A step of the hub model.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum HubAction {
    /// Task (client, task) starts its acquisition.
    Start(usize, usize),
    /// A waiting task told a newer notice attempts.
    Attempt(usize, usize),
    /// The holder releases.
    Release(usize, usize),
    /// A client's release answers.
    Answer(usize),
    /// A notice reaches a client's listener.
    Arrive(usize),
    /// A client's listener confirms its subscription.
    Subscribe(usize),
    /// A client's pub/sub connection is lost (fault).
    Lose(usize),
    /// A waiting task gives up.
    GiveUp(usize, usize),
}

impl HubAction {
    /// Whether it is progress, not a fault or a give-up.
    fn progress(&self) -> bool {
        !matches!(self, HubAction::Lose(_) | HubAction::GiveUp(..))
    }
}

/// The hub model for one configuration.
pub struct HubModel {
    setup: HubSetup,
    settings: Arc<Settings>,
    channel: Key,
    base: Instant,
}

impl HubModel {
    /// The model of `setup`.
    pub fn new(setup: HubSetup) -> Self {
        let settings = Arc::new(Config::new(["m"]).validate().expect("a valid config"));
        let channel = settings.release_channel(&Key::from(RESOURCE));
        Self {
            setup,
            settings,
            channel,
            base: Instant::now(),
        }
    }

    fn at(&self, clock: u64) -> Instant {
        self.base + Duration::from_millis(clock)
    }

    fn holder(state: &HubState) -> Option<(usize, usize)> {
        state.clients.iter().enumerate().find_map(|(c, client)| {
            let t = client.tasks.iter().position(|t| *t == Task::Holding)?;
            Some((c, t))
        })
    }

    /// What the hub of client `c` asks to deliver: the waiting task told a
    /// notice newer than its last attempt is due. Then the listener
    /// follows the wanted channels.
    fn settle(&self, client: &mut Client) {
        while let Some(delivery) = client.hub.poll_delivery() {
            let at = delivery.at;
            for task in &mut client.tasks {
                if let Task::Waiting { waiter, since, due } = task
                    && *waiter == delivery.waiter
                    && since.is_none_or(|since| at >= self.at(since))
                {
                    *due = true;
                }
            }
        }
        if client.hub.poll_wanted_changed() && !client.hub.is_waiting() {
            client.subscribed = false;
        }
    }

    /// Task `t` of client `c` waits on the lock, its last attempt at
    /// `since` (`None`: queued without attempting); `clock`: now.
    fn wait(&self, client: &mut Client, t: usize, since: Option<u64>, clock: u64) {
        let waiter = client
            .hub
            .handle_join(vec![self.channel.clone()], false, self.at(clock));
        client.tasks[t] = Task::Waiting {
            waiter,
            since,
            due: false,
        };
        self.settle(client);
    }

    fn seal(&self, mut state: HubState) -> HubState {
        let mut hasher = DefaultHasher::new();
        {
            let mut w = HashWriter(&mut hasher);
            let _ = write!(
                w,
                "{}|{}|{}",
                state.clock, state.cancels_left, state.losses_left
            );
            for client in &state.clients {
                let _ = write!(
                    w,
                    "|{:?}|{:?}|{}|{}|{}|{:?}",
                    client.hub,
                    client.tasks,
                    client.subscribed,
                    client.lost,
                    client.inbox,
                    client.answer
                );
            }
        }
        state.fingerprint = hasher.finish();
        state
    }

    /// Whether only faults and giving up could still happen, with a task
    /// still waiting.
    fn stranded(&self, state: &HubState) -> bool {
        let mut actions = Vec::new();
        self.actions(state, &mut actions);
        let waiting = state
            .clients
            .iter()
            .flat_map(|client| &client.tasks)
            .any(|task| matches!(task, Task::Waiting { .. }));
        waiting && !actions.iter().any(HubAction::progress)
    }

    /// Checks every property; `stop_at_first`: until a counterexample.
    pub fn check(self, threads: usize, stop_at_first: bool) -> HubReport {
        let name = self.setup.name;
        let started = Instant::now();
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

    fn report(name: &'static str, started: Instant, checker: &impl Checker<Self>) -> HubReport {
        let mut violations = Vec::new();
        for property in [HUB_ONE_HOLDER, HUB_NOT_STRANDED] {
            if let Some(path) = checker.discovery(property) {
                let mut trace = format!("  counterexample to \"{property}\" ({name}):");
                for (state, action) in path.into_vec() {
                    let tasks: Vec<&Vec<Task>> = state.clients.iter().map(|c| &c.tasks).collect();
                    let _ = write!(trace, "\n    {tasks:?}");
                    if let Some(action) = action {
                        let _ = write!(trace, "\n      {action:?}");
                    }
                }
                violations.push((property, trace));
            }
        }
        HubReport {
            name,
            unique_states: checker.unique_state_count(),
            states: checker.state_count(),
            max_depth: checker.max_depth(),
            seconds: started.elapsed().as_secs_f64(),
            violations,
        }
    }
}

/// What one check of the hub model found.
#[derive(Debug)]
pub struct HubReport {
    /// The configuration's name.
    pub name: &'static str,
    /// Distinct states.
    pub unique_states: usize,
    /// States generated (with repeats).
    pub states: usize,
    /// Longest path explored.
    pub max_depth: usize,
    /// Wall time of the check.
    pub seconds: f64,
    /// Broken properties, each with its counterexample as text.
    pub violations: Vec<(&'static str, String)>,
}

impl HubReport {
    /// One line of figures.
    pub fn line(&self) -> String {
        let verdict = if self.violations.is_empty() {
            "no property violated".to_string()
        } else {
            let names: Vec<&str> = self.violations.iter().map(|(p, _)| *p).collect();
            format!("violated: {}", names.join(", "))
        };
        format!(
            "{}: {} distinct states ({} generated, depth {}) in {:.1} s, {verdict}",
            self.name, self.unique_states, self.states, self.max_depth, self.seconds
        )
    }
}

impl Model for HubModel {
    type State = HubState;
    type Action = HubAction;

    fn init_states(&self) -> Vec<HubState> {
        planted::set(self.setup.bug);
        let clients = self
            .setup
            .tasks
            .iter()
            .map(|&tasks| Client {
                hub: Hub::new(1),
                tasks: vec![Task::Idle; tasks],
                subscribed: false,
                lost: false,
                inbox: 0,
                answer: None,
            })
            .collect();
        vec![self.seal(HubState {
            clock: 0,
            clients,
            cancels_left: self.setup.cancels,
            losses_left: self.setup.losses,
            fingerprint: 0,
        })]
    }

    fn actions(&self, state: &HubState, actions: &mut Vec<HubAction>) {
        for (c, client) in state.clients.iter().enumerate() {
            for (t, task) in client.tasks.iter().enumerate() {
                match task {
                    Task::Idle => actions.push(HubAction::Start(c, t)),
                    Task::Waiting { due, .. } => {
                        if *due {
                            actions.push(HubAction::Attempt(c, t));
                        }
                        if state.cancels_left > 0 {
                            actions.push(HubAction::GiveUp(c, t));
                        }
                    }
                    Task::Holding if client.answer.is_none() => {
                        actions.push(HubAction::Release(c, t));
                    }
                    _ => {}
                }
            }
            if client.answer.is_some() {
                actions.push(HubAction::Answer(c));
            }
            if client.inbox > 0 {
                actions.push(HubAction::Arrive(c));
            }
            if client.hub.is_waiting() && !client.subscribed {
                actions.push(HubAction::Subscribe(c));
            }
            if client.subscribed && state.losses_left > 0 {
                actions.push(HubAction::Lose(c));
            }
        }
    }

    fn next_state(&self, last: &HubState, action: HubAction) -> Option<HubState> {
        planted::set(self.setup.bug);
        let mut state = last.clone();
        state.clock += 1;
        let clock = state.clock;
        let now = self.at(clock);
        let free = Self::holder(&state).is_none();
        match action {
            HubAction::Start(c, t) => {
                let client = &mut state.clients[c];
                let rng = ModelRng {
                    client: c as u8,
                    seq: t as u8,
                };
                let acquisition = Acquisition::new(
                    Arc::clone(&self.settings),
                    RESOURCE,
                    self.settings.default_ttl(),
                    Attempts::Retry,
                    now,
                    rng,
                );
                let mut planned = client.hub.plan(acquisition, now);
                if planned.poll_listen().is_some() {
                    // Queued behind the client's waiters.
                    self.wait(client, t, None, clock);
                } else if free {
                    client.tasks[t] = Task::Holding;
                } else {
                    self.wait(client, t, Some(clock), clock);
                }
            }
            HubAction::Attempt(c, t) => {
                let client = &mut state.clients[c];
                let Task::Waiting { waiter, .. } = client.tasks[t] else {
                    return None;
                };
                if free {
                    client.tasks[t] = Task::Holding;
                    client.hub.handle_leave(waiter, true, now);
                    self.settle(client);
                } else {
                    client.tasks[t] = Task::Waiting {
                        waiter,
                        since: Some(clock),
                        due: false,
                    };
                }
            }
            HubAction::Release(c, t) => {
                state.clients[c].tasks[t] = Task::Done { served: true };
                let others = state
                    .clients
                    .iter()
                    .enumerate()
                    .any(|(d, other)| d != c && other.hub.is_waiting());
                let own = state.clients[c].hub.is_waiting();
                if others {
                    for client in &mut state.clients {
                        if client.subscribed {
                            client.inbox += 1;
                        }
                    }
                }
                let client = &mut state.clients[c];
                client.answer = Some((others, own && !others));
                let queued = HandOver::Queued {
                    channels: vec![self.channel.clone()],
                };
                client.hub.handle_hand_over(&queued, now);
                self.settle(client);
            }
            HubAction::Answer(c) => {
                let client = &mut state.clients[c];
                let (others_waiting, unheard) = client.answer.take()?;
                let answered = HandOver::Answered {
                    channels: vec![self.channel.clone()],
                    others_waiting,
                    unheard,
                };
                client.hub.handle_hand_over(&answered, now);
                self.settle(client);
            }
            HubAction::Arrive(c) => {
                let client = &mut state.clients[c];
                client.inbox -= 1;
                client
                    .hub
                    .handle_notice(NodeId(0), self.channel.as_bytes(), now);
                self.settle(client);
            }
            HubAction::Subscribe(c) => {
                let client = &mut state.clients[c];
                client.subscribed = true;
                let resubscribed = std::mem::take(&mut client.lost);
                client.hub.handle_subscribed(
                    std::slice::from_ref(&self.channel),
                    resubscribed,
                    now,
                );
                self.settle(client);
            }
            HubAction::Lose(c) => {
                state.losses_left -= 1;
                let client = &mut state.clients[c];
                client.subscribed = false;
                client.lost = true;
                client.inbox = 0;
            }
            HubAction::GiveUp(c, t) => {
                state.cancels_left -= 1;
                let client = &mut state.clients[c];
                let Task::Waiting { waiter, .. } = client.tasks[t] else {
                    return None;
                };
                client.tasks[t] = Task::Done { served: false };
                client.hub.handle_leave(waiter, false, now);
                self.settle(client);
            }
        }
        Some(self.seal(state))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(HUB_ONE_HOLDER, |_: &Self, state: &HubState| {
                let holding = state.clients.iter().flat_map(|client| &client.tasks);
                holding.filter(|task| **task == Task::Holding).count() <= 1
            }),
            Property::always(HUB_NOT_STRANDED, |model: &Self, state: &HubState| {
                !model.stranded(state)
            }),
        ]
    }
}
