//! Fair locks (`LockSpec::Fair`) over three simulated masters that run the
//! fair scripts' model (the one `tests/tests/lua_model.rs` checks against the
//! real Lua), stepped by hand in virtual time: waiters are served in the
//! order the masters queued them, not the order they happen to attempt in;
//! masters whose queues disagree, and a dead head, hold a waiter back for
//! at most `FAIR_PATIENCE` attempts; a waiter that gives up leaves nothing
//! behind. With the feature `planted-bugs`, the bugs that break the last
//! two are caught here.

#[path = "../../redlock-testkit/src/model.rs"]
#[allow(dead_code, unreachable_pub)]
mod redis;

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::StdRng;
use redis::Store;
use redlock_core::{
    AcquireEvent, Acquisition, Attempts, Command, Config, FAIR_PATIENCE, Lock, LockKind, LockSpec,
    Machine, NodeError, NodeErrorKind, Reply, Request, Settings,
};

const RESOURCE: &[u8] = b"printer";

struct World {
    masters: Vec<Store>,
    start: Instant,
    /// Virtual time since `start`.
    now: Duration,
    settings: Arc<Settings>,
}

impl World {
    fn new() -> Self {
        let settings = Config::new(["a", "b", "c"]).validate().unwrap();
        Self {
            masters: (0..3).map(|_| Store::default()).collect(),
            start: Instant::now(),
            now: Duration::ZERO,
            settings: Arc::new(settings),
        }
    }

    fn instant(&self) -> Instant {
        self.start + self.now
    }

    fn clock(&self) -> f64 {
        self.now.as_micros() as f64
    }

    fn run(&mut self, request: &Request) -> Reply {
        let clock = self.clock();
        let answer = self.masters[request.node.0].run(clock, request);
        Reply::to(request, Ok(answer))
    }

    fn waiter(&self, seed: u64) -> Acquisition<StdRng> {
        Acquisition::with_spec(
            Arc::clone(&self.settings),
            LockSpec::Fair(RESOURCE),
            self.settings.default_ttl(),
            Attempts::Within(Duration::from_secs(3_600)),
            self.instant(),
            StdRng::seed_from_u64(seed),
        )
        .unwrap()
    }

    /// Sends what `machine` queued, every master answering at once; its
    /// lock if it won.
    fn step<M: Machine<Event = AcquireEvent>>(&mut self, machine: &mut M) -> Option<Lock> {
        let mut lock = None;
        loop {
            let mut sent = false;
            while let Some(request) = machine.poll_request() {
                sent = true;
                let reply = self.run(&request);
                machine.handle_reply(reply, self.instant());
            }
            while let Some(event) = machine.poll_event() {
                if let AcquireEvent::Acquired(won) = event {
                    lock = Some(won);
                }
            }
            if !sent {
                return lock;
            }
        }
    }

    /// The waiter's next attempt, now (as if its retry timer fired).
    fn attempt(&mut self, waiter: &mut Acquisition<StdRng>) -> Option<Lock> {
        self.now += Duration::from_millis(1);
        let at = waiter.poll_timeout().expect("still waiting");
        waiter.handle_timeout(at.max(self.instant()));
        self.step(waiter)
    }

    fn release(&mut self, lock: &mut Lock) {
        let mut release = lock.release(self.instant());
        while let Some(request) = release.poll_request() {
            let reply = self.run(&request);
            release.handle_reply(reply, self.instant());
        }
        assert!(release.is_done());
    }

    /// Serves every waiter, one per round: in each round those not served
    /// yet attempt, newest first; exactly one wins and releases. The order
    /// they were served in.
    fn serve(&mut self, waiters: &mut [Acquisition<StdRng>]) -> Vec<usize> {
        let mut served = Vec::new();
        for _round in 0..waiters.len() {
            let mut winner = None;
            for index in (0..waiters.len()).rev() {
                if served.contains(&index) {
                    continue;
                }
                if let Some(lock) = self.attempt(&mut waiters[index]) {
                    assert!(winner.is_none(), "two holders at once");
                    winner = Some((index, lock));
                }
            }
            let (index, mut lock) = winner.expect("someone is served each round");
            served.push(index);
            self.release(&mut lock);
        }
        served
    }

    /// Keys alive on each master (locks and queue keys).
    fn keys(&self) -> Vec<Vec<Vec<u8>>> {
        let clock = self.clock();
        self.masters.iter().map(|m| m.live_keys(clock)).collect()
    }

    /// Puts a waiter id that never asks again at the head of master
    /// `node`'s queue, its entry alive for an hour.
    fn plant_head(&mut self, node: usize, waiter: &str) {
        let settings = Arc::clone(&self.settings);
        let mut ghost = Acquisition::with_spec(
            settings,
            LockSpec::Fair(RESOURCE),
            self.settings.default_ttl(),
            Attempts::Once,
            self.instant(),
            StdRng::seed_from_u64(0),
        )
        .unwrap();
        let mut request = ghost.poll_request().expect("a request per node");
        request.node = redlock_core::NodeId(node);
        let LockKind::Fair {
            by_queue, ticket, ..
        } = request.kind
        else {
            unreachable!("a fair spec")
        };
        request.kind = LockKind::Fair {
            waiter: waiter.into(),
            entry: self.settings.ttl(Duration::from_secs(3_600)).unwrap(),
            by_queue,
            ticket,
        };
        // A holder's value, so that the ghost queues instead of winning.
        let holder = Request {
            kind: LockKind::Exclusive,
            keys: Arc::from(&request.keys[..1]),
            command: Command::Acquire {
                ttl: self.settings.default_ttl(),
            },
            ..request.clone()
        };
        let clock = self.clock();
        self.masters[node].run(clock, &holder);
        self.masters[node].run(clock, &request);
        let release = Request {
            command: Command::Release,
            ..holder
        };
        self.masters[node].run(clock, &release);
        ghost.abandon(self.instant());
    }
}

#[test]
fn waiters_are_served_in_the_order_the_masters_queued_them() {
    let mut world = World::new();
    let mut holder = world.waiter(1);
    let mut held = world.step(&mut holder).expect("a free lock");
    // More waiters than FAIR_PATIENCE: the last waits through 5 releases
    // that each find the key free and another waiter's turn, and must not
    // fall back, since the queue moves.
    let mut waiters: Vec<_> = (0..6).map(|i| world.waiter(10 + i)).collect();
    for waiter in &mut waiters {
        world.now += Duration::from_millis(1);
        assert!(world.step(waiter).is_none(), "held");
    }
    world.release(&mut held);
    // They attempt newest first; each time only the oldest left wins.
    assert_eq!(world.serve(&mut waiters), vec![0, 1, 2, 3, 4, 5]);
    assert!(
        world.keys().iter().all(Vec::is_empty),
        "left: {:?}",
        world.keys()
    );
}

/// Three live waiters whose first attempts reach the masters in three
/// different orders (each is first on one master, so none is head on a
/// quorum): their tickets bring the masters to one order, and each is
/// served in turn by the queue, none falling back to the plain rule. Without
/// tickets they stand off until `FAIR_PATIENCE` runs out.
#[test]
fn masters_that_saw_waiters_arrive_in_different_orders_come_to_agree() {
    let mut world = World::new();
    let mut holder = world.waiter(1);
    let mut held = world.step(&mut holder).expect("a free lock");
    let mut waiters: Vec<_> = (0..3).map(|i| world.waiter(20 + i)).collect();
    let requests: Vec<Vec<Request>> = waiters
        .iter_mut()
        .map(|waiter| std::iter::from_fn(|| waiter.poll_request()).collect())
        .collect();
    world.now += Duration::from_millis(1);
    // Master n sees waiter n first, then the next ones round the ring.
    for (node, order) in [[0, 1, 2], [1, 2, 0], [2, 0, 1]].into_iter().enumerate() {
        for index in order {
            let request = &requests[index][node];
            assert_eq!(request.node.0, node);
            let reply = world.run(request);
            waiters[index].handle_reply(reply, world.instant());
        }
    }
    for waiter in &mut waiters {
        assert!(world.step(waiter).is_none(), "held");
    }
    world.release(&mut held);
    world.serve(&mut waiters);
    for waiter in &waiters {
        assert!(
            matches!(waiter.kind(), LockKind::Fair { by_queue: true, .. }),
            "served by the queue, not by the fall-back"
        );
    }
    assert!(
        world.keys().iter().all(Vec::is_empty),
        "left: {:?}",
        world.keys()
    );
}

/// Three ghosts, each first on one master: no waiter is head on a quorum.
/// Returns the attempts the live waiter made (its first attempt's higher
/// ticket brings one more at once, which the ghosts cannot answer), or
/// `None` if 20 retries were not enough.
fn served_despite_disagreeing_masters() -> Option<u32> {
    let mut world = World::new();
    for (node, ghost) in ["ghost-a", "ghost-b", "ghost-c"].iter().enumerate() {
        world.plant_head(node, ghost);
    }
    world.now += Duration::from_millis(1);
    let mut waiter = world.waiter(7);
    let served =
        world.step(&mut waiter).is_some() || (0..20).any(|_| world.attempt(&mut waiter).is_some());
    served.then(|| waiter.attempts())
}

#[test]
fn masters_that_disagree_on_the_head_hold_a_waiter_back_a_bounded_number_of_attempts() {
    let attempts = served_despite_disagreeing_masters().expect("served");
    println!("served at attempt {attempts} (FAIR_PATIENCE = {FAIR_PATIENCE})");
    assert_eq!(attempts, FAIR_PATIENCE + 1);
}

/// Only attempts that found the key free and another waiter's turn count
/// towards `FAIR_PATIENCE`: attempts that fail because nodes fail keep the
/// waiter in the masters' order however many there are.
#[test]
fn attempts_that_fail_for_want_of_answers_never_make_a_waiter_fall_back() {
    let world = World::new();
    let mut waiter = world.waiter(3);
    let mut now = world.instant();
    for _ in 0..FAIR_PATIENCE + 2 {
        let requests: Vec<Request> = std::iter::from_fn(|| waiter.poll_request()).collect();
        let attempt = requests.iter().filter(|r| r.command.ttl().is_some());
        for request in attempt {
            let down = NodeError::new(NodeErrorKind::Connection, "down");
            waiter.handle_reply(Reply::to(request, Err(down)), now);
        }
        assert!(
            matches!(waiter.kind(), LockKind::Fair { by_queue: true, .. }),
            "still by the queue after {} attempts",
            waiter.attempts()
        );
        now = waiter.poll_timeout().expect("waiting for its retry");
        waiter.handle_timeout(now);
    }
    assert!(waiter.attempts() > FAIR_PATIENCE);
}

/// A garbage answer is no place in a queue: whatever score it carries, the
/// waiter does not try again at once, it waits for its retry.
#[test]
fn a_garbage_answer_never_brings_the_next_attempt_forward() {
    let world = World::new();
    let mut waiter = world.waiter(4);
    let now = world.instant();
    let requests: Vec<Request> = std::iter::from_fn(|| waiter.poll_request()).collect();
    // A "queued" answer at position 0, which the script never gives.
    let garbage = || {
        use redlock_core::Response::Int;
        Ok(redlock_core::Response::Array(vec![Int(0), Int(0), Int(9)]))
    };
    for request in requests.iter().filter(|r| r.command.ttl().is_some()) {
        waiter.handle_reply(Reply::to(request, garbage()), now);
    }
    assert!(matches!(
        waiter.poll_event(),
        Some(AcquireEvent::AttemptFailed { .. })
    ));
    assert!(waiter.current_attempt().is_none(), "waits for its retry");
}

#[test]
fn a_waiter_that_gives_up_leaves_every_queue() {
    let mut world = World::new();
    let mut holder = world.waiter(1);
    let mut held = world.step(&mut holder).expect("a free lock");
    let mut waiter = world.waiter(2);
    assert!(world.step(&mut waiter).is_none());
    assert!(
        world.keys().iter().all(|keys| keys.len() == 3),
        "queued: {:?}",
        world.keys()
    );
    waiter.abandon(world.instant());
    world.step(&mut waiter);
    world.release(&mut held);
    assert!(
        world.keys().iter().all(Vec::is_empty),
        "left: {:?}",
        world.keys()
    );
}

/// The leave of a waiter that gives up between attempts must arrive: it
/// has the release timeout from when it was queued, as a withdraw has.
#[test]
fn a_waiters_leave_has_the_release_timeout() {
    let mut world = World::new();
    let mut holder = world.waiter(1);
    let _held = world.step(&mut holder).expect("a free lock");
    let mut waiter = world.waiter(2);
    assert!(world.step(&mut waiter).is_none());
    world.now += Duration::from_millis(5);
    let now = world.instant();
    waiter.abandon(now);
    let leaves: Vec<_> = std::iter::from_fn(|| waiter.poll_request()).collect();
    assert_eq!(leaves.len(), 3, "{leaves:?}");
    for leave in &leaves {
        assert_eq!(leave.command, Command::Leave);
        assert_eq!(leave.deadline, now + world.settings.release_timeout());
    }
}

#[test]
fn a_dead_waiters_entry_expires() {
    let mut world = World::new();
    let mut holder = world.waiter(1);
    let mut held = world.step(&mut holder).expect("a free lock");
    let mut dead = world.waiter(2);
    assert!(world.step(&mut dead).is_none());
    let LockKind::Fair { entry, .. } = dead.kind().clone() else {
        unreachable!("a fair lock")
    };
    assert!(entry <= world.settings.default_ttl());
    world.release(&mut held);
    // It never asks again; a newcomer waits behind it until its entry dies.
    let mut next = world.waiter(3);
    assert!(world.step(&mut next).is_none(), "the dead waiter is first");
    world.now += entry.as_duration() + Duration::from_millis(1);
    let mut lock = world.attempt(&mut next).expect("its entry died");
    world.release(&mut lock);
}

#[cfg(feature = "planted-bugs")]
mod planted {
    use redlock_core::planted::{self, Bug};

    use super::*;

    #[test]
    fn a_core_that_never_falls_back_is_caught() {
        planted::set(Some(Bug::FairNeverFallsBack));
        let served = served_despite_disagreeing_masters();
        planted::set(None);
        assert_eq!(served, None, "the planted bug went unnoticed");
    }

    #[test]
    fn a_core_that_forgets_to_leave_is_caught() {
        planted::set(Some(Bug::FairLeaveForgotten));
        let mut world = World::new();
        let mut holder = world.waiter(1);
        let mut held = world.step(&mut holder).expect("a free lock");
        let mut waiter = world.waiter(2);
        assert!(world.step(&mut waiter).is_none());
        waiter.abandon(world.instant());
        world.step(&mut waiter);
        world.release(&mut held);
        planted::set(None);
        assert!(
            world.keys().iter().any(|keys| !keys.is_empty()),
            "the planted bug went unnoticed"
        );
    }
}
