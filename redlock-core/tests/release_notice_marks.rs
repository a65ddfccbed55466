//! A waiter never misses the release it waits for, though a release
//! publishes only while a waiter's mark lives (`scripts::MARK_WAITING`,
//! `scripts::RELEASE_IF_WAITED`).
//!
//! Every placement of the holder's release on each of three nodes, relative
//! to the waiter's requests there (before it listens, before its mark,
//! between its mark and its attempt, after its attempt), and every order in
//! which the nodes run their queues: the waiter must get the lock without
//! its retry timer ever firing (its retry delay is ten seconds; only a
//! notice, or the fresh attempt made once it listens, can wake it). The
//! nodes run the simulation's script models (`redlock-testkit/src/model.rs`), which
//! `tests/tests/lua_model.rs` checks against the real Lua.
//!
//! Two broken variants show that the check has teeth: a waiter whose marks
//! are lost, and one whose mark reaches a node after its attempt there.
//!
//! All of it twice: the holder's release as the script, and as Valkey 9's
//! plain `DELIFEQ`, which deletes only a value no waiter marked
//! (`redlock_core::waited`); where it deletes nothing, the release sends
//! its script after it, which reaches the node behind whatever was queued
//! there meanwhile. The holder's release is the core's own machine, fed
//! every answer.

#[path = "../../redlock-testkit/src/model.rs"]
#[allow(dead_code, unreachable_pub)]
mod redis;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::StdRng;
use redlock_core::native::{Call, Native, NodeFacts, Server, Version};
use redlock_core::{
    AcquireEvent, Acquisition, Attempts, Command, Config, Hub, Machine, NodeId, Notice, Release,
    Reply, Request, Response, RetryConfig, Settings, WaiterId, scripts,
};

const NODES: usize = 3;

/// How the waiter's marks are handled, for the controls: its mark
/// requests, and the mark on the holder's value its attempts carry (their
/// client, `redlock_core::waited`), which the controls strip.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Marks {
    /// As the core sends them.
    Sent,
    /// Lost on the way.
    Lost,
    /// Each reaches its node after the attempt it was queued before.
    Late,
}

/// How the holder's release reaches each node.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Via {
    /// The release script, which publishes inside.
    Script,
    /// `DELIFEQ`, then the script where it deleted nothing.
    Plain,
}

const VIAS: [Via; 2] = [Via::Script, Via::Plain];

fn valkey9() -> NodeFacts {
    NodeFacts::new(Server::Valkey, Version(9, 1, 2))
}

fn settings(via: Via) -> Arc<Settings> {
    Arc::new(
        Config::new((0..NODES).map(|i| format!("n{i}")))
            .ttl(Duration::from_secs(30))
            .retry(
                RetryConfig::default()
                    .count(5)
                    .delay(Duration::from_secs(10))
                    .jitter(Duration::ZERO),
            )
            .native_commands(via == Via::Plain)
            .validate()
            .unwrap(),
    )
}

/// Runs every request `machine` queued on `stores` at `clock`, and gives
/// it their answers at `now`.
fn answer_all(
    machine: &mut Acquisition<StdRng>,
    stores: &mut [redis::Store],
    clock: f64,
    now: Instant,
) {
    while let Some(request) = machine.poll_request() {
        let response = stores[request.node.0].run(clock, &request);
        machine.handle_reply(Reply::to(&request, Ok(response)), now);
    }
}

/// A waiter for `job` that retries until it gets it, fenced or not.
fn waiter(settings: &Arc<Settings>, start: Instant, fenced: bool) -> Acquisition<StdRng> {
    let new = if fenced {
        Acquisition::fenced
    } else {
        Acquisition::new
    };
    new(
        settings.clone(),
        b"job",
        settings.default_ttl(),
        Attempts::Retry,
        start,
        StdRng::seed_from_u64(2),
    )
}

/// A holder, its values drawn from `seed`, takes the free `job` on every
/// node at `clock`.
fn take(
    settings: &Arc<Settings>,
    stores: &mut [redis::Store],
    seed: u64,
    ttl: redlock_core::Ttl,
    clock: f64,
    now: Instant,
) -> redlock_core::Lock {
    let mut holder = Acquisition::new(
        settings.clone(),
        b"job",
        ttl,
        Attempts::Once,
        now,
        StdRng::seed_from_u64(seed),
    );
    answer_all(&mut holder, stores, clock, now);
    match holder.poll_event() {
        Some(AcquireEvent::Acquired(lock)) => lock,
        other => panic!("the holder takes the free lock: {other:?}"),
    }
}

/// One operation queued at a node.
#[derive(Debug)]
enum Op {
    Waiter(Request),
    Holder(Request),
}

struct World {
    start: Instant,
    step: u64,
    stores: Vec<redis::Store>,
    queues: Vec<VecDeque<Op>>,
    waiter: Acquisition<StdRng>,
    /// The holder's release, fed its answers.
    release: Option<Release>,
    /// Plain `DELIFEQ`s sent, and release scripts sent after them.
    plain_releases: usize,
    scripts_after: usize,
    subscribed: bool,
    marks: Marks,
    via: Via,
    acquired: bool,
    timer_needed: bool,
    /// Release notices the waiter heard.
    heard: usize,
    /// Marks the waiter sent.
    marks_sent: usize,
}

impl World {
    fn now(&mut self) -> Instant {
        self.step += 1;
        self.start + Duration::from_millis(self.step)
    }

    fn clock(&self) -> f64 {
        self.step as f64 * 1000.0
    }

    /// Queues the waiter's new requests at their nodes, in order.
    fn drain_waiter(&mut self) {
        let mut late: Vec<Vec<Request>> = vec![Vec::new(); NODES];
        while let Some(mut request) = self.waiter.poll_request() {
            let node = request.node.0;
            if self.marks != Marks::Sent && !matches!(request.command, Command::MarkWaiting { .. })
            {
                request.client = None;
            }
            if matches!(request.command, Command::MarkWaiting { .. }) {
                self.marks_sent += 1;
            }
            match (request.command, self.marks) {
                (Command::MarkWaiting { .. }, Marks::Lost) => {}
                (Command::MarkWaiting { .. }, Marks::Late) => late[node].push(request),
                _ => self.queues[node].push_back(Op::Waiter(request)),
            }
        }
        for (node, marks) in late.into_iter().enumerate() {
            for mark in marks {
                self.queues[node].push_back(Op::Waiter(mark));
            }
        }
        while let Some(event) = self.waiter.poll_event() {
            match event {
                AcquireEvent::Acquired(_) => self.acquired = true,
                AcquireEvent::Failed(error) => panic!("the waiter gave up: {error}"),
                AcquireEvent::AttemptFailed { .. } => {}
            }
        }
        let _ = self.waiter.poll_listen();
    }

    /// A release notice published on `node`: heard if the waiter listens.
    fn hear(&mut self, node: usize, now: Instant) {
        if self.subscribed {
            self.heard += 1;
            self.waiter
                .handle_notice(Notice::Released(NodeId(node)), now);
        }
    }

    /// Runs the next operation queued at `node`; false if none.
    fn run(&mut self, node: usize) -> bool {
        let Some(op) = self.queues[node].pop_front() else {
            return false;
        };
        let now = self.now();
        let clock = self.clock();
        match op {
            Op::Waiter(request) => {
                let response = self.stores[node].run(clock, &request);
                self.waiter
                    .handle_reply(Reply::to(&request, Ok(response)), now);
            }
            Op::Holder(request) => {
                let facts = match self.via {
                    Via::Script => NodeFacts::default(),
                    Via::Plain => valkey9(),
                };
                let call = request.call(&facts);
                let response = match call {
                    Call::Script(script) => {
                        assert_eq!(script, scripts::RELEASE_IF_WAITED);
                        self.scripts_after += usize::from(self.via == Via::Plain);
                        self.stores[node].run(clock, &request)
                    }
                    Call::Native(plain) => {
                        assert_eq!(plain, Native::DelIfEq);
                        self.plain_releases += 1;
                        self.stores[node].run_native(clock, &request, plain)
                    }
                };
                if response == Response::Int(3) {
                    self.hear(node, now);
                }
                let reply = Reply::via(&request, call, Ok(response));
                // The connection sends what follows the answer before
                // handing it over: behind what the node queued meanwhile.
                if let Some(next) = request.follow_up(&reply) {
                    self.queues[node].push_back(Op::Holder(next));
                    self.drain_waiter();
                    return true;
                }
                let release = self.release.as_mut().expect("a release is under way");
                release.handle_reply(reply, now);
                // Sent once the answer is in: behind what the node queued
                // meanwhile.
                while let Some(again) = release.poll_request() {
                    self.queues[again.node.0].push_back(Op::Holder(again));
                }
            }
        }
        self.drain_waiter();
        true
    }
}

/// How the waiter comes to wait.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Shape {
    /// Its first attempt finds the lock held; its first attempt once it
    /// listens marks.
    Attempted,
    /// It queues behind its client's waiters (`Acquisition::queue_behind`):
    /// it marks at once, without attempting, and its first attempt once
    /// it listens, an extra one before its retry, sends no mark of its own.
    Queued,
    /// It queues behind its client's waiters as another of them has just
    /// marked (`WaitQueue::marked_until`): that mark outlives its wait, so
    /// it sends no mark at all.
    Covered,
}

/// Whether the waiter got the lock without its timer, for one placement of
/// the release per node (0: before the waiter listens, 1: before its next
/// mark, 2: between mark and attempt, 3: after the attempt) and one order
/// of the nodes: `Some(notices heard)` when it was.
fn woken_after(
    via: Via,
    placement: [usize; NODES],
    order: [usize; NODES],
    marks: Marks,
) -> Option<usize> {
    woken_in(via, Shape::Attempted, placement, order, marks)
}

/// As [`woken_after`], for a waiter of `shape`.
fn woken_in(
    via: Via,
    shape: Shape,
    placement: [usize; NODES],
    order: [usize; NODES],
    marks: Marks,
) -> Option<usize> {
    let settings = settings(via);
    let start = Instant::now();
    let mut stores: Vec<redis::Store> = (0..NODES).map(|_| redis::Store::default()).collect();
    // The holder takes the lock on every node.
    let mut lock = take(
        &settings,
        &mut stores,
        1,
        settings.default_ttl(),
        0.0,
        start,
    );
    let mut client_marked = None;
    if shape == Shape::Covered {
        // The client's waiter ahead of it queued, and marked, first.
        let mut first = Acquisition::new(
            settings.clone(),
            b"job",
            settings.default_ttl(),
            Attempts::Retry,
            start,
            StdRng::seed_from_u64(3),
        );
        first.queue_behind(start, None);
        while let Some(request) = first.poll_request() {
            assert!(matches!(request.command, Command::MarkWaiting { .. }));
            if marks != Marks::Lost {
                stores[request.node.0].run(0.0, &request);
            }
        }
        client_marked = first.marked_until();
    }
    let mut waiter = waiter(&settings, start, false);
    if shape != Shape::Attempted {
        waiter.queue_behind(start, client_marked);
    }
    let mut world = World {
        start,
        step: 0,
        stores,
        queues: (0..NODES).map(|_| VecDeque::new()).collect(),
        waiter,
        release: None,
        plain_releases: 0,
        scripts_after: 0,
        subscribed: false,
        marks,
        via,
        acquired: false,
        timer_needed: false,
        heard: 0,
        marks_sent: 0,
    };
    // Its first attempt finds the lock held and asks to listen, or it
    // marks and asks to listen without attempting.
    world.drain_waiter();
    for node in 0..NODES {
        while world.run(node) {}
    }
    assert!(!world.acquired);
    let marked_before = world.marks_sent;
    let release_at = world.now();
    let mut release = lock.release(release_at);
    let releases: Vec<Request> = std::iter::from_fn(|| release.poll_request()).collect();
    world.release = Some(release);
    // Releases placed before the waiter listens.
    for request in &releases {
        if placement[request.node.0] == 0 {
            world.queues[request.node.0].push_back(Op::Holder(request.clone()));
            world.run(request.node.0);
        }
    }
    // It listens now: a fresh attempt, marking first.
    world.subscribed = true;
    let now = world.now();
    world.waiter.handle_notice(Notice::Subscribed, now);
    world.drain_waiter();
    let marks_of_attempt = world.marks_sent - marked_before;
    match shape {
        Shape::Attempted => assert_eq!(marks_of_attempt, NODES),
        Shape::Queued => {
            assert_eq!(marked_before, NODES, "marked when it queued");
            assert_eq!(marks_of_attempt, 0, "its mark lives past the retry");
        }
        Shape::Covered => {
            assert_eq!(marked_before, 0, "the client's mark outlives its wait");
            assert_eq!(
                marks_of_attempt, 0,
                "the client's mark lives past the retry"
            );
        }
    }
    for request in releases {
        let node = request.node.0;
        let at = match placement[node] {
            0 => continue,
            1 => 0,
            2 => 1,
            _ => world.queues[node].len(),
        };
        let at = at.min(world.queues[node].len());
        world.queues[node].insert(at, Op::Holder(request));
    }
    // The nodes run their queues in `order`, one operation each in turn.
    for _ in 0..1_000 {
        let ran = order.iter().fold(false, |ran, &node| world.run(node) | ran);
        if !ran {
            break;
        }
    }
    if !world.acquired && !world.waiter.is_done() {
        world.timer_needed = true;
    }
    LAST_COUNTS.with(|counts| counts.set((world.plain_releases, world.scripts_after)));
    (world.acquired && !world.timer_needed).then_some(world.heard)
}

fn orders() -> Vec<[usize; NODES]> {
    vec![
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
    ]
}

fn placements() -> impl Iterator<Item = [usize; NODES]> {
    (0..4usize.pow(NODES as u32)).map(|mut code| {
        let mut placement = [0; NODES];
        for slot in &mut placement {
            *slot = code % 4;
            code /= 4;
        }
        placement
    })
}

#[test]
fn a_waiter_is_woken_by_the_release_wherever_it_falls() {
    for via in VIAS {
        let (mut cases, mut by_notice) = (0, 0);
        for (placement, order) in schedules() {
            let heard = woken_after(via, placement, order, Marks::Sent).unwrap_or_else(|| {
                panic!(
                    "release ({via:?}) placed {placement:?}, nodes run in order {order:?}: \
                     the waiter needed its retry timer"
                )
            });
            cases += 1;
            by_notice += usize::from(heard > 0);
        }
        println!(
            "{via:?}: {cases} schedules, the waiter was woken in every one, {by_notice} by notices"
        );
        // Both ways are exercised: the attempt that finds the lock free, and
        // the notice of a release that came after it.
        assert!(by_notice > 0 && by_notice < cases);
    }
}

/// Every placement of the release and every order of the nodes.
fn schedules() -> impl Iterator<Item = ([usize; NODES], [usize; NODES])> {
    placements().flat_map(|placement| orders().into_iter().map(move |order| (placement, order)))
}

/// A waiter of `shape` is woken without its timer in every schedule.
fn assert_always_woken(shape: Shape) {
    for via in VIAS {
        for (placement, order) in schedules() {
            assert!(
                woken_in(via, shape, placement, order, Marks::Sent).is_some(),
                "release ({via:?}) placed {placement:?}, nodes run in order {order:?}: \
                 the waiter ({shape:?}) needed its retry timer"
            );
        }
    }
}

/// Whether a waiter of `shape`, its marks handled as `marks`, needs its
/// timer in some schedule, with either release.
fn missed(shape: Shape, marks: Marks) -> bool {
    VIAS.into_iter().all(|via| {
        let missed = schedules()
            .find(|&(placement, order)| woken_in(via, shape, placement, order, marks).is_none());
        println!("{via:?}, {shape:?}, marks {marks:?}: missed {missed:?}");
        missed.is_some()
    })
}

#[test]
fn a_queued_waiter_whose_attempt_sends_no_mark_is_woken_wherever_the_release_falls() {
    assert_always_woken(Shape::Queued);
    // Its marks lost, it misses one.
    assert!(
        missed(Shape::Queued, Marks::Lost),
        "no mark, yet every release was heard"
    );
}

#[test]
fn a_queued_waiter_under_its_clients_mark_sends_none_and_is_woken_wherever_the_release_falls() {
    assert_always_woken(Shape::Covered);
    // The client's mark lost, it misses one: that mark is what wakes it.
    assert!(
        missed(Shape::Covered, Marks::Lost),
        "no mark, yet every release was heard"
    );
}

#[test]
fn a_waiter_whose_marks_are_lost_misses_a_release() {
    assert!(
        missed(Shape::Attempted, Marks::Lost),
        "no mark, yet every release was heard"
    );
}

#[test]
fn a_mark_that_comes_after_the_attempt_misses_a_release() {
    assert!(
        missed(Shape::Attempted, Marks::Late),
        "a late mark, yet every release was heard"
    );
}

#[test]
fn nobody_waiting_the_plain_release_is_one_delifeq_per_node() {
    let settings = settings(Via::Plain);
    let start = Instant::now();
    let mut stores: Vec<redis::Store> = (0..NODES).map(|_| redis::Store::default()).collect();
    let mut lock = take(
        &settings,
        &mut stores,
        1,
        settings.default_ttl(),
        0.0,
        start,
    );
    let mut release = lock.release(start).every_node();
    let mut sent = 0;
    while let Some(request) = release.poll_request() {
        let call = request.call(&valkey9());
        assert_eq!(call, Call::Native(Native::DelIfEq));
        sent += 1;
        let response = stores[request.node.0].run_native(1.0, &request, Native::DelIfEq);
        assert_eq!(response, Response::Int(1));
        release.handle_reply(Reply::via(&request, call, Ok(response)), start);
    }
    assert_eq!(sent, NODES, "one command per node, nothing after it");
    let report = release.poll_event().expect("decided");
    assert_eq!(report.released(), NODES);
}

#[test]
fn a_waiters_attempt_marks_the_holder_so_the_plain_release_falls_back_and_publishes() {
    for (placement, order) in schedules() {
        let (heard, plain, after) = woken_counts(placement, order);
        assert!(
            heard == 0 || after > 0,
            "placed {placement:?}, order {order:?}: heard without a script after the DELIFEQ"
        );
        assert!(plain > 0, "placed {placement:?}: the release went plain");
    }
}

/// For the plain release: notices heard, `DELIFEQ`s sent, and scripts
/// sent after them.
fn woken_counts(placement: [usize; NODES], order: [usize; NODES]) -> (usize, usize, usize) {
    let heard = woken_after(Via::Plain, placement, order, Marks::Sent).expect("woken");
    LAST_COUNTS.with(|counts| {
        let (plain, after) = counts.get();
        (heard, plain, after)
    })
}

thread_local! {
    /// The last world's `plain_releases` and `scripts_after`.
    static LAST_COUNTS: std::cell::Cell<(usize, usize)> = const { std::cell::Cell::new((0, 0)) };
}

#[test]
fn nobody_waiting_the_release_publishes_nothing() {
    let settings = settings(Via::Script);
    let start = Instant::now();
    let mut stores: Vec<redis::Store> = (0..NODES).map(|_| redis::Store::default()).collect();
    let mut lock = take(
        &settings,
        &mut stores,
        1,
        settings.default_ttl(),
        0.0,
        start,
    );
    let mut release = lock.release(start);
    while let Some(request) = release.poll_request() {
        assert_eq!(request.script(), scripts::RELEASE_IF_WAITED);
        assert_eq!(
            request.keys[1],
            settings.waiters_key(&settings.key(b"job")),
            "the release reads the waiters mark"
        );
        let response = stores[request.node.0].run(1.0, &request);
        assert_eq!(response, Response::Int(1));
        assert!(!stores[request.node.0].marked(request.keys[1].as_bytes(), 1.0));
    }
}

/// Another client takes the key between a waiter's mark and its attempt on
/// every node: the mark found the key free (it set only the waiters' key),
/// so it is the attempt, which names its client, that marks the new
/// holder's value (`redlock_core::waited`). The new holder's plain
/// `DELIFEQ` then deletes nothing, and the script after it publishes. An
/// attempt that named nobody would leave the value unmarked: the `DELIFEQ`
/// would delete it silently, and the waiter wait for its retry timer.
#[test]
fn a_holder_between_the_mark_and_the_attempt_is_marked_by_the_attempt() {
    const SECOND: f64 = 1_000_000.0;
    let settings = settings(Via::Plain);
    let start = Instant::now();
    let at = |ms| start + Duration::from_millis(ms);
    let mut stores: Vec<redis::Store> = (0..NODES).map(|_| redis::Store::default()).collect();
    // The first holder's key lives one second.
    let ttl = settings.ttl(Duration::from_secs(1)).unwrap();
    take(&settings, &mut stores, 1, ttl, 0.0, start);
    let mut waiter = waiter(&settings, start, false);
    answer_all(&mut waiter, &mut stores, 0.001 * SECOND, at(1));
    assert!(!waiter.is_done(), "the first attempt finds the lock held");
    assert!(waiter.poll_listen().is_some(), "it asks to listen");
    // It listens: its marks, then its attempt, on every node.
    waiter.handle_notice(Notice::Subscribed, at(2));
    let requests: Vec<Request> = std::iter::from_fn(|| waiter.poll_request()).collect();
    let (marks, attempts): (Vec<_>, Vec<_>) = requests
        .into_iter()
        .partition(|request| matches!(request.command, Command::MarkWaiting { .. }));
    assert_eq!((marks.len(), attempts.len()), (NODES, NODES));
    // The first holder's key has expired when the marks land.
    for mark in &marks {
        let response = stores[mark.node.0].run(1.1 * SECOND, mark);
        waiter.handle_reply(Reply::to(mark, Ok(response)), at(3));
    }
    // The second holder takes the key, then the attempts land.
    let mut second = take(
        &settings,
        &mut stores,
        3,
        settings.default_ttl(),
        1.2 * SECOND,
        start,
    );
    for attempt in &attempts {
        let response = stores[attempt.node.0].run(1.3 * SECOND, attempt);
        waiter.handle_reply(Reply::to(attempt, Ok(response)), at(4));
    }
    assert!(!waiter.is_done(), "the second holder holds the lock");
    // Its plain release: a `DELIFEQ` that deletes nothing, then the script,
    // which publishes, on every node.
    let mut release = second.release(at(5));
    let mut published = 0;
    while let Some(request) = release.poll_request() {
        let call = request.call(&valkey9());
        let plain = stores[request.node.0].run_native(1.4 * SECOND, &request, Native::DelIfEq);
        let reply = Reply::via(&request, call, Ok(plain));
        let script = request
            .follow_up(&reply)
            .unwrap_or_else(|| panic!("node {}: the DELIFEQ deleted the value", request.node.0));
        let response = stores[request.node.0].run(1.4 * SECOND, &script);
        published += usize::from(response == Response::Int(3));
        release.handle_reply(Reply::to(&script, Ok(response)), at(6));
    }
    assert_eq!(published, NODES, "the release published on every node");
}

/// A waiter for several keys, the resources of a multi-resource lock or
/// the slots of a semaphore, marks every one of them on every node: the
/// release that frees any of them must publish.
#[test]
fn a_waiter_for_several_keys_marks_each_of_them() {
    let specs = [
        redlock_core::LockSpec::Multi(&[b"a", b"b"]),
        redlock_core::LockSpec::Semaphore {
            resource: b"pool",
            permits: 2,
        },
    ];
    for spec in specs {
        let settings = settings(Via::Script);
        let start = Instant::now();
        let mut stores: Vec<redis::Store> = (0..NODES).map(|_| redis::Store::default()).collect();
        let acquisition = |seed, attempts| {
            Acquisition::with_spec(
                settings.clone(),
                spec,
                settings.default_ttl(),
                attempts,
                start,
                StdRng::seed_from_u64(seed),
            )
            .unwrap()
        };
        let mut attempt =
            |machine: &mut Acquisition<StdRng>| answer_all(machine, &mut stores, 0.0, start);
        // Held: both resources, or both permits.
        let holders = match spec {
            redlock_core::LockSpec::Semaphore { permits, .. } => permits,
            _ => 1,
        };
        for seed in 0..u64::from(holders) {
            let mut holder = acquisition(seed + 1, Attempts::Once);
            attempt(&mut holder);
            assert!(
                matches!(holder.poll_event(), Some(AcquireEvent::Acquired(_))),
                "{spec:?}: holder {seed} is granted"
            );
        }
        let mut waiter = acquisition(9, Attempts::Retry);
        attempt(&mut waiter);
        assert!(waiter.poll_listen().is_some(), "{spec:?}: it waits");
        waiter.handle_notice(Notice::Subscribed, start + Duration::from_millis(1));
        let marks = std::iter::from_fn(|| waiter.poll_request())
            .filter(|request| matches!(request.command, Command::MarkWaiting { .. }))
            .count();
        assert_eq!(marks, 2 * NODES, "{spec:?}: two keys on every node");
    }
}

/// The marks of an attempt a notice starts between retries, `before` its
/// retry; and the instants of the waiter's last mark's end, of its retry
/// and of the notice.
fn marks_of_extra_attempt(fenced: bool, before: Duration) -> (usize, Instant, Instant, Instant) {
    let settings = settings(Via::Script);
    let start = Instant::now();
    let mut stores: Vec<redis::Store> = (0..NODES).map(|_| redis::Store::default()).collect();
    take(
        &settings,
        &mut stores,
        1,
        settings.default_ttl(),
        0.0,
        start,
    );
    let mut waiter = waiter(&settings, start, fenced);
    answer_all(&mut waiter, &mut stores, 0.0, start);
    assert!(waiter.poll_listen().is_some(), "it waits");
    let subscribed = start + Duration::from_millis(1);
    waiter.handle_notice(Notice::Subscribed, subscribed);
    answer_all(&mut waiter, &mut stores, 0.0, subscribed);
    let marked = waiter.marked_until().expect("its attempt marked");
    let retry = waiter.poll_timeout().expect("it waits for its retry");
    let at = retry - before;
    // The release is heard from a quorum of the nodes.
    waiter.handle_notice(Notice::Released(NodeId(0)), at);
    waiter.handle_notice(Notice::Released(NodeId(1)), at);
    let requests: Vec<Request> = std::iter::from_fn(|| waiter.poll_request()).collect();
    assert!(!requests.is_empty(), "a quorum's notices start an attempt");
    let marks = requests
        .iter()
        .filter(|request| matches!(request.command, Command::MarkWaiting { .. }))
        .count();
    (marks, marked, retry, at)
}

/// An attempt a notice starts between retries goes without a mark exactly
/// while the last mark lives, by one per-node timeout, past both the retry
/// it goes back to and its own end (`mark_lives_past`); a fenced attempt
/// takes two rounds, so one that starts within a per-node timeout of the
/// retry marks.
#[test]
fn an_extra_attempt_goes_unmarked_exactly_while_the_last_mark_lives_past_the_retry() {
    let timeout = settings(Via::Script).node_timeout();
    for fenced in [false, true] {
        let attempt = timeout * if fenced { 2 } else { 1 };
        let (mut marked_cases, mut unmarked_cases) = (0, 0);
        let befores = (1..=60u32)
            .map(|ms| Duration::from_millis(5) * ms)
            .chain([Duration::from_secs(5)]);
        for before in befores {
            let (marks, marked, retry, at) = marks_of_extra_attempt(fenced, before);
            let lives_past = marked >= retry.max(at + attempt) + timeout;
            assert_eq!(
                marks == 0,
                lives_past,
                "fenced {fenced}, notice {before:?} before the retry: {marks} marks"
            );
            if lives_past {
                unmarked_cases += 1;
            } else {
                marked_cases += 1;
            }
        }
        assert!(unmarked_cases > 0, "fenced {fenced}: none went unmarked");
        assert!(
            !fenced || marked_cases > 0,
            "a fenced attempt just before its retry marks"
        );
    }
}

/// What one task of [`Turns`] is doing.
enum Task {
    /// Acquiring; its waiter id once it waits with its client's hub.
    Acquiring(Box<Acquisition<StdRng>>, Option<WaiterId>),
    Holding(Box<redlock_core::Lock>),
    Releasing(Box<Release>),
    Done,
}

/// Tasks of one client taking turns at one lock, several times each, with
/// the client's notice hub and nothing else to wake them: no node lets
/// them subscribe, and their retry timers never fire. Each release is the
/// client's own, so only its hand-over (`Notice::HandedOver`, through the
/// hub) tells the next waiter. Each node runs its requests in the order
/// they reached it; a `DELIFEQ`'s follow-up (`Request::follow_up`) reaches
/// its node once the `DELIFEQ` answered, behind what was queued there
/// meanwhile, as the adapter's connection sends it.
struct Turns {
    settings: Arc<Settings>,
    via: Via,
    stores: Vec<redis::Store>,
    /// Per node, the requests on their way, with the task that sent each.
    queues: Vec<VecDeque<(usize, Request)>>,
    hub: Hub,
    tasks: Vec<Task>,
    /// Turns each task has still to take.
    left: Vec<usize>,
    start: Instant,
    /// Virtual milliseconds since `start`.
    step: u64,
    granted: usize,
    /// Whether the hub plans each release (`Hub::plan_release`). Not: each
    /// release is as if made before any of its client's waiters came, and
    /// they came while it was on its way.
    planned: bool,
    /// `DELIFEQ`s that deleted nothing, and so had the script follow them.
    follow_ups: usize,
}

impl Turns {
    fn now(&mut self) -> Instant {
        self.step += 1;
        self.start + Duration::from_millis(self.step)
    }

    fn clock(&self) -> f64 {
        self.step as f64 * 1000.0
    }

    /// Task `t` asks for the lock, planned by the hub.
    fn ask(&mut self, t: usize) {
        let now = self.now();
        let acquisition = Acquisition::new(
            self.settings.clone(),
            b"job",
            self.settings.default_ttl(),
            Attempts::Retry,
            now,
            StdRng::seed_from_u64(100 + self.step),
        );
        let acquisition = self.hub.plan(acquisition, now);
        self.tasks[t] = Task::Acquiring(Box::new(acquisition), None);
        self.left[t] -= 1;
        self.drive(t);
    }

    /// The holder, task `t`, releases, planned by the hub.
    fn release(&mut self, t: usize) {
        let Task::Holding(lock) = &mut self.tasks[t] else {
            panic!("task {t} holds nothing");
        };
        let now = self.start + Duration::from_millis(self.step + 1);
        let mut release = lock.release(now).every_node();
        if self.planned {
            release = self.hub.plan_release(release);
        }
        self.step += 1;
        self.tasks[t] = Task::Releasing(Box::new(release));
        self.drive(t);
    }

    /// Does for task `t` what the adapter's driver does after each input:
    /// sends what its machine queued, registers it as a waiter, gives its
    /// hand-overs to the hub, and acts on its events; then delivers what
    /// the hub asks.
    fn drive(&mut self, t: usize) {
        let now = self.start + Duration::from_millis(self.step);
        match &mut self.tasks[t] {
            Task::Acquiring(acquisition, waiter) => {
                while let Some(request) = acquisition.poll_request() {
                    self.queues[request.node.0].push_back((t, request));
                }
                if let Some(channels) = acquisition.poll_listen() {
                    let by_masters = acquisition.ordered_by_masters();
                    *waiter = Some(self.hub.handle_join(channels, by_masters, now));
                }
                while let Some(hand_over) = acquisition.poll_hand_over() {
                    self.hub.handle_hand_over(&hand_over, now);
                }
                while let Some(event) = acquisition.poll_event() {
                    match event {
                        AcquireEvent::Acquired(lock) => {
                            if let Some(waiter) = *waiter {
                                self.hub.handle_leave(waiter, true, now);
                            }
                            self.tasks[t] = Task::Holding(Box::new(lock));
                            self.granted += 1;
                            break;
                        }
                        AcquireEvent::AttemptFailed { .. } => {}
                        AcquireEvent::Failed(error) => panic!("task {t} gave up: {error}"),
                    }
                }
            }
            Task::Releasing(release) => {
                while let Some(request) = release.poll_request() {
                    self.queues[request.node.0].push_back((t, request));
                }
                if self.hub.is_waiting() {
                    while let Some(hand_over) = release.poll_hand_over() {
                        self.hub.handle_hand_over(&hand_over, now);
                    }
                }
                if let Some(report) = release.poll_event() {
                    assert_eq!(report.released(), NODES, "{report}");
                    self.tasks[t] = Task::Done;
                    // Released, it asks again at once, as a task that
                    // takes turns does.
                    if self.left[t] > 0 {
                        self.ask(t);
                    }
                }
            }
            Task::Holding(_) | Task::Done => {}
        }
        while let Some(delivery) = self.hub.poll_delivery() {
            let told = self.tasks.iter().position(|task| {
                matches!(task, Task::Acquiring(_, Some(waiter)) if *waiter == delivery.waiter)
            });
            if let Some(told) = told {
                if let Task::Acquiring(acquisition, _) = &mut self.tasks[told] {
                    acquisition.handle_delivery(delivery.notice, delivery.at, now);
                }
                self.drive(told);
            }
        }
    }

    /// Runs the next request queued at `node`; false if none.
    fn run(&mut self, node: usize) -> bool {
        let Some((t, request)) = self.queues[node].pop_front() else {
            return false;
        };
        let now = self.now();
        let clock = self.clock();
        let facts = match self.via {
            Via::Script => NodeFacts::default(),
            Via::Plain => valkey9(),
        };
        let call = request.call(&facts);
        let response = match call {
            Call::Script(_) => self.stores[node].run(clock, &request),
            Call::Native(plain) => self.stores[node].run_native(clock, &request, plain),
        };
        let reply = Reply::via(&request, call, Ok(response));
        if let Some(next) = request.follow_up(&reply) {
            self.follow_ups += usize::from(next.command == Command::Release);
            self.queues[node].push_back((t, next));
            return true;
        }
        match &mut self.tasks[t] {
            Task::Acquiring(acquisition, _) => acquisition.handle_reply(reply, now),
            Task::Releasing(release) => release.handle_reply(reply, now),
            // A reply to an acquisition that ended: nobody reads it.
            Task::Holding(_) | Task::Done => {}
        }
        self.drive(t);
        true
    }
}

/// `tasks` tasks of one client take `rounds` turns each at one lock, the
/// nodes running their queues in `order`, each release `planned` by the
/// client's hub or not: whether every waiter was handed the lock without
/// its retry timer, and how many release `DELIFEQ`s the script followed
/// (`Err` names the waiters left waiting when nothing else could happen).
fn turns_taken(
    via: Via,
    planned: bool,
    (tasks, rounds): (usize, usize),
    order: [usize; NODES],
) -> Result<usize, String> {
    let settings = Arc::new(
        settings(via)
            .as_ref()
            .clone()
            .with_client_tag(redlock_core::LockValue::from_string("client-1")),
    );
    let mut turns = Turns {
        settings,
        via,
        stores: (0..NODES).map(|_| redis::Store::default()).collect(),
        queues: (0..NODES).map(|_| VecDeque::new()).collect(),
        hub: Hub::new(NODES),
        tasks: (0..tasks).map(|_| Task::Done).collect(),
        left: vec![rounds; tasks],
        start: Instant::now(),
        step: 0,
        granted: 0,
        planned,
        follow_ups: 0,
    };
    // One after another they ask, each once the nodes ran what the one
    // before sent: the first takes the lock, the second is turned away,
    // the others queue behind it.
    for t in 0..tasks {
        turns.ask(t);
        while order.iter().fold(false, |ran, &node| turns.run(node) | ran) {}
    }
    loop {
        let ran = order.iter().fold(false, |ran, &node| turns.run(node) | ran);
        if ran {
            continue;
        }
        // Everything sent has run. The holder holds a while (longer than a
        // per-node timeout: a task that asks again then marks the lock
        // itself), releases, and asks again once released.
        if let Some(t) = turns
            .tasks
            .iter()
            .position(|t| matches!(t, Task::Holding(_)))
        {
            turns.step += 200;
            turns.release(t);
            continue;
        }
        let asks = (0..tasks).find(|&t| matches!(turns.tasks[t], Task::Done) && turns.left[t] > 0);
        if let Some(t) = asks {
            turns.ask(t);
            continue;
        }
        let waiting: Vec<usize> = (0..tasks)
            .filter(|&t| matches!(turns.tasks[t], Task::Acquiring(..)))
            .collect();
        if waiting.is_empty() {
            assert_eq!(turns.granted, tasks * rounds);
            return Ok(turns.follow_ups);
        }
        return Err(format!(
            "tasks {waiting:?} wait for their retry timers after {} grants",
            turns.granted
        ));
    }
}

/// Tasks of one client taking turns hand the lock over to each other
/// without a retry timer, in every order of the nodes, on a server with
/// `DELIFEQ` and on one without. The client's hub has a release its
/// waiters wait for sent as the script (`Hub::plan_release`): it hands
/// over once queued, and the attempt it starts runs after it on every node;
/// no `DELIFEQ` deletes nothing there, so none has the script follow it.
/// A release that went as a `DELIFEQ` all the same (made before the
/// waiters came) hands over once its nodes answered, after the script that
/// follows a `DELIFEQ` that deleted nothing.
#[test]
fn tasks_of_one_client_hand_the_lock_over_without_their_timers() {
    for via in VIAS {
        for planned in [true, false] {
            for order in orders() {
                let follow_ups = turns_taken(via, planned, (3, 4), order).unwrap_or_else(|stuck| {
                    panic!("{via:?}, planned {planned}, nodes in order {order:?}: {stuck}");
                });
                let expected = via == Via::Plain && !planned;
                assert_eq!(follow_ups > 0, expected, "{via:?}, planned {planned}");
            }
        }
    }
}

/// The fix of issue 52 reverted (planted bug `HandOverBeforeFollowUp`): the
/// release goes as a plain `DELIFEQ` though the client's own waiters wait,
/// and hands over as soon as it is queued. A task that asks again marks the
/// holder's value for its client, so the `DELIFEQ` deletes nothing; the
/// attempt the hand-over sends reaches each node before the script that
/// follows the `DELIFEQ`'s answer, and is turned away; that script
/// publishes nothing for the client's own waiter, whose hand-over was
/// spent: it waits for its retry timer. With the script at once (a server
/// without `DELIFEQ`), the bug changes nothing.
#[cfg(feature = "planted-bugs")]
#[test]
fn a_hand_over_before_the_follow_up_leaves_the_waiter_to_its_timer() {
    use redlock_core::planted::{self, Bug};
    planted::set(Some(Bug::HandOverBeforeFollowUp));
    let outcomes: Vec<_> = VIAS
        .into_iter()
        .flat_map(|via| [true, false].map(|planned| (via, planned)))
        .flat_map(|(via, planned)| orders().into_iter().map(move |order| (via, planned, order)))
        .map(|(via, planned, order)| {
            let outcome = turns_taken(via, planned, (3, 4), order);
            (via, planned, order, outcome)
        })
        .collect();
    planted::set(None);
    for (via, planned, order, outcome) in outcomes {
        println!("{via:?}, planned {planned}, nodes in order {order:?}: {outcome:?}");
        match via {
            Via::Plain => assert!(outcome.is_err(), "the planted bug went unnoticed"),
            Via::Script => assert!(outcome.is_ok(), "{outcome:?}"),
        }
    }
}
