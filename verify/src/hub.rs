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
//! On a master with `DELIFEQ` (Valkey 9, [`HubSetup::delifeq`]) a release
//! is the core's own [`Release`], planned by its client's hub
//! ([`Hub::plan_release`]), or not (made before the client's waiters came):
//! sent as a plain `DELIFEQ` where the core says so, it deletes the value
//! only if no waiter marked it (a waiter's attempt, or its mark, marks the
//! holder's value, `redlock_core::waited`), and publishes nothing; a
//! `DELIFEQ` that deleted nothing has the release script follow its
//! answer, which deletes the value, publishes as the script does, and
//! answers the release. What the release hands over, and when, is the
//! core's ([`Machine::poll_hand_over`]).
//!
//! Properties: one holder at a time ([`HUB_ONE_HOLDER`], by construction of
//! the abstract lock: a check that the model's bookkeeping holds), and no
//! waiter stranded ([`HUB_NOT_STRANDED`]): once nothing but faults and
//! giving up can happen, no task still waits. The planted bugs
//! [`Bug::HubForgetsReplay`] and, on a master with `DELIFEQ`,
//! [`Bug::HandOverBeforeFollowUp`] strand one.

use std::fmt::Write as _;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redlock_core::native::{Call, Native, NodeFacts, Server, Version};
use redlock_core::planted::{self, Bug};
use redlock_core::{
    Acquisition, Attempts, Command, Config, HandOver, Hub, Key, LockValue, Machine, NodeId,
    Release, Reply, Request, Response, RoundId, Settings, WaiterId,
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
    /// The master has `DELIFEQ` (Valkey 9): releases are the core's
    /// [`Release`], and a value a waiter marked is deleted only by the
    /// script that follows the `DELIFEQ`'s answer.
    pub delifeq: bool,
    /// The planted bug switched on, if any.
    pub bug: Option<Bug>,
}

impl HubSetup {
    /// The configurations of `make model`: two clients (two tasks and one),
    /// then with a lost connection, then three tasks of one client (the
    /// planted bug's world); and the same on a master with `DELIFEQ`, its
    /// three tasks of one client the world of
    /// [`Bug::HandOverBeforeFollowUp`]. Two clients of two tasks each ran
    /// past 11 minutes (the logical clock keeps states apart): not run.
    pub fn all(quick: bool) -> Vec<HubSetup> {
        let small = HubSetup {
            name: "hub: C=2 (2+1 tasks), 1 give-up",
            tasks: vec![2, 1],
            cancels: 1,
            losses: 0,
            delifeq: false,
            bug: None,
        };
        let delifeq = HubSetup {
            name: "hub, DELIFEQ: C=2 (2+1 tasks), 1 give-up",
            delifeq: true,
            ..small.clone()
        };
        if quick {
            return vec![small, delifeq];
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
            delifeq.clone(),
            HubSetup {
                name: "hub, DELIFEQ: C=2 (2+1 tasks), 1 give-up, 1 lost connection",
                losses: 1,
                ..delifeq
            },
            HubSetup {
                bug: None,
                ..HubSetup::planted_delifeq()
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
            delifeq: false,
            bug: Some(Bug::HubForgetsReplay),
        }
    }

    /// The configuration that must catch [`Bug::HandOverBeforeFollowUp`]:
    /// three tasks of one client on a master with `DELIFEQ`, so that a
    /// release of the client finds the client's own waiters, one of which
    /// marked the holder's value, and its previous release told it that no
    /// other client waits (the next one hands over as soon as it is
    /// queued).
    pub fn planted_delifeq() -> HubSetup {
        HubSetup {
            name: "hub, DELIFEQ: C=1 (3 tasks)",
            tasks: vec![3],
            cancels: 0,
            losses: 0,
            delifeq: true,
            bug: Some(Bug::HandOverBeforeFollowUp),
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
    /// On a master with `DELIFEQ`: its release, the core's machine, until
    /// answered.
    release: Option<InFlight>,
}

/// A release on a master with `DELIFEQ`, sent and not answered yet.
#[derive(Clone, Debug)]
struct InFlight {
    release: Release,
    /// The master's answer, on its way; or, where a `DELIFEQ` deleted
    /// nothing, the release script that follows it, still to run: the lock
    /// is held until then.
    next: Result<Reply, Request>,
}

/// One state of the hub model.
#[derive(Clone, Debug)]
pub struct HubState {
    /// Logical time: one step per action, the instants the hubs see.
    clock: u64,
    clients: Vec<Client>,
    cancels_left: u8,
    losses_left: u8,
    /// A waiter marked the holder's value as waited for (a waiter's
    /// attempt or mark, on a master with `DELIFEQ`).
    marked: bool,
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
    /// The holder releases; `true`: planned by its client's hub
    /// ([`Hub::plan_release`]), `false`: made before the client's waiters
    /// came (on a master with `DELIFEQ` only, where it matters).
    Release(usize, usize, bool),
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

    /// Whether the lock is free: nobody holds it, and no release's script
    /// is still to delete a marked value.
    fn free(state: &HubState) -> bool {
        Self::holder(state).is_none()
            && !state.clients.iter().any(|client| {
                client
                    .release
                    .as_ref()
                    .is_some_and(|in_flight| in_flight.next.is_err())
            })
    }

    /// Whether a waiter of another client than `c` waits: a release script
    /// of `c`'s publishes then (the waiters' marks, `RELEASE_IF_WAITED`).
    fn others_wait(state: &HubState, c: usize) -> bool {
        state
            .clients
            .iter()
            .enumerate()
            .any(|(d, other)| d != c && other.hub.is_waiting())
    }

    /// A notice published for every client subscribed now.
    fn publish(state: &mut HubState) {
        for client in &mut state.clients {
            if client.subscribed {
                client.inbox += 1;
            }
        }
    }

    /// What `client`'s `release` hands over now, as the driver gives it:
    /// only while some task of the client waits (it keeps it until then).
    fn hand_over(client: &mut Client, release: &mut Release, now: Instant) {
        if client.hub.is_waiting() {
            while let Some(hand_over) = release.poll_hand_over() {
                client.hub.handle_hand_over(&hand_over, now);
            }
        }
    }

    /// Task `t` of client `c` releases on a master with `DELIFEQ`: the
    /// core's release, `planned` by the hub or not, sent as the core says.
    fn release_delifeq(&self, state: &mut HubState, c: usize, planned: bool, now: Instant) {
        let key = Key::from(RESOURCE);
        let release = Release::new(
            &self.settings,
            key,
            LockValue::from_string("v"),
            RoundId(state.clock),
            now,
        );
        let mut release = if planned {
            state.clients[c].hub.plan_release(release)
        } else {
            release
        };
        let request = release.poll_request().expect("one master, one request");
        let call = request.call(&NodeFacts::new(Server::Valkey, Version(9, 1, 2)));
        let next = match call {
            Call::Native(Native::DelIfEq) if state.marked => {
                let nothing = Reply {
                    native: Some(Native::DelIfEq),
                    ..Reply::to(&request, Ok(Response::Int(0)))
                };
                Err(request
                    .follow_up(&nothing)
                    .expect("the script follows a DELIFEQ that deleted nothing"))
            }
            Call::Native(native) => Ok(Reply {
                native: Some(native),
                ..Reply::to(&request, Ok(Response::Int(1)))
            }),
            Call::Script(_) => Ok(self.run_script(state, c, &request)),
        };
        let client = &mut state.clients[c];
        Self::hand_over(client, &mut release, now);
        self.settle(client);
        client.release = Some(InFlight { release, next });
    }

    /// The release script of client `c` runs: it deletes the value and
    /// publishes while a waiter of another client waits.
    fn run_script(&self, state: &mut HubState, c: usize, request: &Request) -> Reply {
        let others = Self::others_wait(state, c);
        if others {
            Self::publish(state);
        }
        Reply::to(request, Ok(Response::Int(if others { 3 } else { 1 })))
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
                "{}|{}|{}|{}",
                state.clock, state.cancels_left, state.losses_left, state.marked
            );
            for client in &state.clients {
                let _ = write!(
                    w,
                    "|{:?}|{:?}|{}|{}|{}|{:?}|{:?}",
                    client.hub,
                    client.tasks,
                    client.subscribed,
                    client.lost,
                    client.inbox,
                    client.answer,
                    client.release
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
                release: None,
            })
            .collect();
        vec![self.seal(HubState {
            clock: 0,
            clients,
            cancels_left: self.setup.cancels,
            losses_left: self.setup.losses,
            marked: false,
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
                    Task::Holding if client.answer.is_none() && client.release.is_none() => {
                        actions.push(HubAction::Release(c, t, true));
                        if self.setup.delifeq && client.hub.is_waiting() {
                            actions.push(HubAction::Release(c, t, false));
                        }
                    }
                    _ => {}
                }
            }
            if client.answer.is_some() || client.release.is_some() {
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
        let free = Self::free(&state);
        match action {
            HubAction::Start(c, t) => {
                let client = &mut state.clients[c];
                let hub = &mut client.hub;
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
                let mut planned = hub.plan(acquisition, now);
                // A waiter's mark, or its attempt (which names its client),
                // marks the holder's value; a first attempt names nobody.
                let marks = std::iter::from_fn(|| planned.poll_request()).any(|r| {
                    r.client.is_some() || matches!(r.command, Command::MarkWaiting { .. })
                });
                if marks && !free {
                    state.marked = true;
                }
                let client = &mut state.clients[c];
                if planned.poll_listen().is_some() {
                    // Queued behind the client's waiters.
                    self.wait(client, t, None, clock);
                } else if free {
                    client.tasks[t] = Task::Holding;
                    state.marked = false;
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
                    state.marked = false;
                } else {
                    client.tasks[t] = Task::Waiting {
                        waiter,
                        since: Some(clock),
                        due: false,
                    };
                    // The attempt names its client: it marks the holder.
                    state.marked = true;
                }
            }
            HubAction::Release(c, t, planned) if self.setup.delifeq => {
                state.clients[c].tasks[t] = Task::Done { served: true };
                self.release_delifeq(&mut state, c, planned, now);
            }
            HubAction::Answer(c) if self.setup.delifeq => {
                let InFlight { mut release, next } = state.clients[c].release.take()?;
                let reply = match next {
                    Ok(reply) => reply,
                    // The script that follows the DELIFEQ deletes the value.
                    Err(script) => self.run_script(&mut state, c, &script),
                };
                release.handle_reply(reply, now);
                assert!(release.is_done(), "one master answered");
                let client = &mut state.clients[c];
                Self::hand_over(client, &mut release, now);
                self.settle(client);
            }
            HubAction::Release(c, t, _) => {
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
