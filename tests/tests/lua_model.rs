//! The simulation's Redis model is the Lua that really runs: random
//! workloads of the core's own machines (every lock kind and semaphore permits; acquire, extend,
//! restore, release, withdraw (a semaphore's keeping a slot too), fenced rounds, waiters marks, the marks
//! on a holder's value a waiter's attempt or mark sets, and keys of another
//! type at a lock's name), each request run both by the real
//! server (its script, as the client sends it) and by the simulation's
//! node (`redlock-testkit/src/model.rs`), must get the same answer
//! every time. A script changed without its model (or the reverse) fails
//! here, so the simulation's schedules keep testing the scripts that run.

mod support;

#[path = "../../redlock-testkit/src/model.rs"]
#[allow(dead_code, unreachable_pub)]
mod model;

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, RngExt, SeedableRng};
use redis::Value;
use redlock_core::{
    AcquireEvent, Acquisition, Attempts, Command, Config, Lock, LockSpec, LockValue, Machine,
    NodeError, Release, Reply, Request, Response, RoundId, Settings,
};
use redlock_tests::RedisNode;

/// Steps per seed: each starts, extends or releases one lock.
const STEPS: usize = 1_000;

#[test]
fn the_scripts_answer_as_the_simulation_model_does() {
    let compared = workload(None).unwrap_or_else(|mismatch| panic!("{mismatch}"));
    println!("{compared} requests: the scripts and the model agreed on every one");
}

#[test]
fn a_script_that_differs_from_the_model_is_found() {
    // A planted script bug: extends run the release script, which answers
    // as an extend does (1) but deletes the key. Only a later request tells.
    let mismatch = workload(Some(redlock_core::scripts::RELEASE))
        .expect_err("the planted script bug went unnoticed");
    println!("found: {mismatch}");
}

/// Runs the random workloads; the requests compared, or the first
/// disagreement. `extend_script` replaces the exclusive extend script.
fn workload(extend_script: Option<&'static str>) -> Result<usize, String> {
    let node = RedisNode::start();
    let settings = Arc::new(
        Config::new(["node"])
            .ttl(Duration::from_secs(60))
            .retry(
                redlock_core::RetryConfig::default()
                    .count(0)
                    // Fair queue entries then live a whole TTL: none
                    // expires between the model's clock and the server's.
                    .delay(Duration::from_secs(30)),
            )
            .validate()
            .unwrap()
            .with_client_tag(LockValue::from_string("this client")),
    );
    let mut real = node.connection().unwrap();
    let start = Instant::now();
    let (seconds, micros): (i64, i64) = redis::cmd("TIME").query(&mut real).unwrap();
    let mut pair = Pair {
        real,
        model: model::Store::with_epoch((seconds * 1_000_000 + micros) as f64),
        start,
        compared: 0,
        extend_script,
        attempt_client: None,
        permit_releases: 0,
        permits_deleted: 0,
        keep_withdraws: [0; 4],
    };
    for seed in 0..10 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut held: Vec<Lock> = Vec::new();
        // Fair acquisitions between attempts: their entries wait in the
        // queue while other steps run.
        let mut waiting: Vec<Acquisition<StdRng>> = Vec::new();
        // The hashes step 14 put at a resource's name.
        let mut foreign: Vec<redlock_core::Key> = Vec::new();
        for _ in 0..STEPS {
            match rng.random_range(0..17) {
                12 => {
                    let resource = ["r1", "r2"][rng.random_range(0..2)].as_bytes();
                    let mut acquisition = Acquisition::with_spec(
                        Arc::clone(&settings),
                        LockSpec::Fair(resource),
                        settings.default_ttl(),
                        Attempts::Within(Duration::from_secs(3_600)),
                        Instant::now(),
                        StdRng::seed_from_u64(rng.next_u64()),
                    )
                    .unwrap();
                    match pair.step(&mut acquisition)? {
                        Some(lock) => held.push(lock),
                        // (Unless it ended: a key of another type.)
                        None if !acquisition.is_done() => waiting.push(acquisition),
                        None => {}
                    }
                }
                13 if !waiting.is_empty() => {
                    let at = rng.random_range(0..waiting.len());
                    let mut acquisition = waiting.swap_remove(at);
                    if rng.random_bool(0.3) {
                        // Gives up: leaves the queue.
                        acquisition.abandon(Instant::now());
                        pair.step(&mut acquisition)?;
                        continue;
                    }
                    if rng.random_bool(0.3) {
                        pair.ticket(&acquisition, &settings, rng.random_range(0..8))?;
                    }
                    // Its next attempt, now.
                    let at = acquisition.poll_timeout().expect("still waiting");
                    acquisition.handle_timeout(at);
                    match pair.step(&mut acquisition)? {
                        Some(lock) => held.push(lock),
                        // (Unless it ended: a key of another type.)
                        None if !acquisition.is_done() => waiting.push(acquisition),
                        None => {}
                    }
                }
                0..5 => {
                    let spec_rng = StdRng::seed_from_u64(rng.next_u64());
                    if let Some(lock) = pair.acquire(&settings, &mut rng, spec_rng)? {
                        held.push(lock);
                    }
                }
                5..7 if !held.is_empty() => {
                    let at = rng.random_range(0..held.len());
                    let lock = &mut held[at];
                    let now = Instant::now();
                    // Longer than the grant's, sometimes: a permit's extend
                    // must then lengthen its permits key too.
                    let ttl = Duration::from_millis([60_000, 90_000][rng.random_range(0..2)]);
                    let Ok(mut extension) = lock.extend(settings.ttl(ttl).unwrap(), now) else {
                        continue;
                    };
                    // Sometimes the restore an extension sends where a quorum
                    // confirmed the lock and this node had lost it, first.
                    let request = extension.poll_request().expect("one node");
                    if rng.random_bool(0.3) {
                        let mut restore = request.clone();
                        restore.command = Command::Restore {
                            ttl: settings.default_ttl(),
                        };
                        let _ = pair.run(&restore)?;
                    }
                    let answer = pair.run(&request)?;
                    extension.handle_reply(Reply::to(&request, answer), Instant::now());
                    if let Ok(extended) = pair.drive(&mut extension)? {
                        lock.apply(&extended);
                    }
                }
                7 | 8 if !held.is_empty() => {
                    let at = rng.random_range(0..held.len());
                    let mut lock = held.swap_remove(at);
                    let mut release = lock.release(Instant::now());
                    pair.drive(&mut release)?;
                    // A release reads the marks and leaves them.
                    let key = lock.keys()[0].clone();
                    pair.compare_mark(&settings.waiters_key(&key))?;
                    pair.compare_mark(&settings.others_waiting_key(&key))?;
                    // A permit's: every slot of its semaphore (its permits
                    // key is compared after each request that names it).
                    if lock
                        .keys()
                        .last()
                        .is_some_and(|key| key.as_bytes() == b"{s}\0permits")
                    {
                        for slot in 0..3 {
                            pair.compare_value(&settings.permit_key(b"s", slot))?;
                        }
                        pair.permit_releases += 1;
                    }
                }
                9 => {
                    // A waiter's mark, of this client, another one or an
                    // anonymous one: its TTL only grows. (Long TTLs: no mark
                    // expires between the model's clock and the server's,
                    // where their answers could differ; step 10 drops them.)
                    let key = settings.key(["r1", "r2"][rng.random_range(0..2)].as_bytes());
                    let ttl = settings
                        .ttl(Duration::from_millis(
                            [30_000, 45_000, 60_000][rng.random_range(0..3)],
                        ))
                        .unwrap();
                    let client = match rng.random_range(0..3) {
                        0 => settings.client_tag().cloned(),
                        1 => Some(LockValue::from_string("another client")),
                        _ => None,
                    };
                    let request = Request {
                        round: RoundId(0),
                        node: redlock_core::NodeId(0),
                        keys: Arc::from([
                            key.clone(),
                            settings.waiters_key(&key),
                            settings.others_waiting_key(&key),
                        ]),
                        value: LockValue::random(&mut rng, settings.value_len()),
                        kind: redlock_core::LockKind::Exclusive,
                        command: Command::MarkWaiting { ttl },
                        client,
                        native: false,
                        aof: false,
                        form: Default::default(),
                        deadline: Instant::now(),
                        give_up_at: Instant::now(),
                        payload: None,
                    };
                    let _ = pair.run(&request)?;
                    pair.compare_mark(&settings.waiters_key(&key))?;
                    pair.compare_mark(&settings.others_waiting_key(&key))?;
                    // And the holder's value it marked, if any.
                    pair.compare_value(&key)?;
                }
                10 => {
                    // The last waiter's mark expired, or the others mark.
                    let key = settings.key(["r1", "r2"][rng.random_range(0..2)].as_bytes());
                    let mark = if rng.random_bool(0.5) {
                        settings.waiters_key(&key)
                    } else {
                        settings.others_waiting_key(&key)
                    };
                    let _: i64 = redis::cmd("DEL")
                        .arg(mark.as_bytes())
                        .query(&mut pair.real)
                        .unwrap();
                    pair.model.forget(mark.as_bytes());
                }
                14 => {
                    // Another program's hash at a resource's name, or at a
                    // semaphore's slot, where nothing is: a script that
                    // reads it fails with WRONGTYPE on both, keeping what
                    // it wrote before.
                    let key = match rng.random_range(0..3) {
                        2 => settings.permit_key(b"s", 1),
                        at => settings.key(["r1", "r2"][at].as_bytes()),
                    };
                    let exists: bool = redis::cmd("EXISTS")
                        .arg(key.as_bytes())
                        .query(&mut pair.real)
                        .unwrap();
                    if !exists {
                        let _: i64 = redis::cmd("HSET")
                            .arg(key.as_bytes())
                            .arg("field")
                            .arg("value")
                            .query(&mut pair.real)
                            .unwrap();
                        pair.model.put_hash(key.as_bytes());
                        foreign.push(key);
                    }
                }
                16 => {
                    // A semaphore's withdraw, plain or keeping a slot (a
                    // won permit's, to a master not heard from): by a held
                    // permit's value or anyone's, which sometimes sits in
                    // a second slot too, the kept slot ours, another
                    // value's, absent or (step 14) another type's.
                    let permits = rng.random_range(2..4);
                    let permit = held.iter().find(|lock| {
                        lock.keys()
                            .last()
                            .is_some_and(|key| key.as_bytes() == b"{s}\0permits")
                    });
                    let (value, own) = match permit {
                        Some(lock) if rng.random_bool(0.7) => (
                            lock.value().clone(),
                            (0..permits)
                                .find(|&slot| lock.key() == &settings.permit_key(b"s", slot)),
                        ),
                        _ => (LockValue::random(&mut rng, settings.value_len()), None),
                    };
                    let request =
                        |keys: Arc<[redlock_core::Key]>, kind, command, payload| Request {
                            round: RoundId(0),
                            node: redlock_core::NodeId(0),
                            keys,
                            value: value.clone(),
                            kind,
                            command,
                            client: None,
                            native: false,
                            aof: false,
                            form: Default::default(),
                            deadline: Instant::now(),
                            give_up_at: Instant::now(),
                            payload,
                        };
                    if rng.random_bool(0.5) {
                        // Our value set at a free slot as well, as a late
                        // grant of another slot leaves it.
                        let slot = settings.permit_key(b"s", rng.random_range(0..permits));
                        let ttl = settings.default_ttl();
                        let set = request(
                            Arc::from([slot.clone()]),
                            redlock_core::LockKind::Exclusive,
                            Command::Acquire { ttl },
                            None,
                        );
                        let _ = pair.run(&set)?;
                        pair.compare_value(&slot)?;
                    }
                    let kept = match rng.random_range(0..3) {
                        0 => None,
                        1 => own.or(Some(0)),
                        _ => Some(rng.random_range(0..permits)),
                    };
                    let mut keys: Vec<_> = (0..permits)
                        .map(|slot| settings.permit_key(b"s", slot))
                        .collect();
                    keys.push(settings.permits_key(&settings.key(b"s")));
                    let withdraw = request(
                        keys.into(),
                        redlock_core::LockKind::Semaphore { start: 0 },
                        Command::Withdraw,
                        kept.map(|slot| Arc::from(slot.to_string().as_bytes())),
                    );
                    if let Some(slot) = kept {
                        // What the kept slot holds: ours, another value,
                        // nothing, or another type.
                        let key = settings.permit_key(b"s", slot);
                        let held = redis::cmd("GET").arg(key.as_bytes()).query(&mut pair.real);
                        let case = match held {
                            Ok(Some(held)) if held == value.as_bytes().to_vec() => 0,
                            Ok(Some::<Vec<u8>>(_)) => 1,
                            Ok(None) => 2,
                            Err(_) => 3,
                        };
                        pair.keep_withdraws[case] += 1;
                    }
                    let _ = pair.run(&withdraw)?;
                    for slot in 0..permits {
                        pair.compare_value(&settings.permit_key(b"s", slot))?;
                    }
                }
                15 if !foreign.is_empty() => {
                    let key = foreign.swap_remove(rng.random_range(0..foreign.len()));
                    let _: i64 = redis::cmd("DEL")
                        .arg(key.as_bytes())
                        .query(&mut pair.real)
                        .unwrap();
                    pair.model.forget(key.as_bytes());
                }
                _ => {
                    // A release by a value that may be anyone's or no one's.
                    let key = settings.key(["r1", "r2"][rng.random_range(0..2)].as_bytes());
                    let value = match held.first() {
                        Some(lock) if rng.random_bool(0.5) => lock.value().clone(),
                        _ => LockValue::random(&mut rng, settings.value_len()),
                    };
                    let mut release = Release::new(
                        &settings,
                        key,
                        value,
                        RoundId(rng.next_u64()),
                        Instant::now(),
                    );
                    pair.drive(&mut release)?;
                }
            }
        }
    }
    // Permit releases ran, and some took the permits key with them.
    if pair.keep_withdraws.contains(&0) {
        return Err(format!(
            "withdraws keeping a slot that was ours, another value's, absent, another \
             type's: {:?}, each wanted",
            pair.keep_withdraws
        ));
    }
    if pair.permit_releases == 0 || pair.permits_deleted == 0 {
        return Err(format!(
            "the workload released {} permits, {} of them leaving no permits key",
            pair.permit_releases, pair.permits_deleted
        ));
    }
    println!(
        "{} permit releases, {} leaving no permits key; withdraws keeping a slot that \
         was ours, another value's, absent, another type's: {:?}",
        pair.permit_releases, pair.permits_deleted, pair.keep_withdraws
    );
    Ok(pair.compared)
}

/// The real server and the model, fed the same requests.
struct Pair {
    real: redis::Connection,
    model: model::Store,
    start: Instant,
    compared: usize,
    extend_script: Option<&'static str>,
    /// The client the attempts name, as a waiter's do: they mark the
    /// holder they find (`redlock_core::waited`).
    attempt_client: Option<LockValue>,
    /// Releases of a semaphore's permit (`SEMAPHORE_RELEASE`), and those
    /// after which no permits key was left: the workload must have both.
    permit_releases: usize,
    permits_deleted: usize,
    /// Semaphore withdraws that kept a slot (`ARGV[2]`) holding our
    /// value, another value, nothing, another type: the workload must
    /// have each.
    keep_withdraws: [usize; 4],
}

impl Pair {
    /// Starts acquiring a random kind of lock and drives it to its end.
    fn acquire(
        &mut self,
        settings: &Arc<Settings>,
        rng: &mut StdRng,
        machine_rng: StdRng,
    ) -> Result<Option<Lock>, String> {
        let resource = ["r1", "r2"][rng.random_range(0..2)].as_bytes();
        let both = [&b"r1"[..], b"r2"];
        // Reentrant locks keep a hash at their key: half of them on the
        // others' resources, where scripts meet keys of another type.
        let spec = match rng.random_range(0..8) {
            0 => LockSpec::Exclusive(resource),
            // Slot keys of their own (`{s}\0permit<i>`), two permits or
            // three: the masters keep the first k and refuse the other.
            6 => LockSpec::Semaphore {
                resource: b"s",
                permits: rng.random_range(2..4),
            },
            // The same slots, with their counters (`{s}\0permit<i>\0fencing`).
            7 => LockSpec::FencedSemaphore {
                resource: b"s",
                permits: rng.random_range(2..4),
            },
            1 => LockSpec::Fenced(resource),
            2 => LockSpec::Read(resource),
            3 => LockSpec::Write(resource),
            4 => LockSpec::Multi(&both),
            _ => LockSpec::Reentrant {
                resource: if rng.random_bool(0.5) { resource } else { b"h" },
                owner: ["o1", "o2"][rng.random_range(0..2)],
            },
        };
        let mut acquisition = Acquisition::with_spec(
            Arc::clone(settings),
            spec,
            settings.default_ttl(),
            Attempts::Once,
            Instant::now(),
            machine_rng,
        )
        .unwrap();
        // As a waiter of this client, of another, or of none (its value
        // stands in), or not a waiter.
        self.attempt_client = match rng.random_range(0..4) {
            0 => settings.client_tag().cloned(),
            1 => Some(LockValue::from_string("another client")),
            2 => Some(LockValue::random(rng, settings.value_len())),
            _ => None,
        };
        let event = self.drive(&mut acquisition);
        self.attempt_client = None;
        // (Only theirs are strings a waiter marks.)
        if matches!(
            acquisition.kind(),
            redlock_core::LockKind::Exclusive | redlock_core::LockKind::Multi
        ) {
            for key in acquisition.keys().iter() {
                self.compare_value(key)?;
            }
        }
        match event? {
            AcquireEvent::Acquired(lock) => Ok(Some(lock)),
            _ => Ok(None),
        }
    }

    /// A fair acquire of `acquisition`'s waiter carrying `ticket`, as if
    /// another master had given it that place: one node alone never
    /// raises an entry or places a new one past the tail otherwise. A
    /// grant it wins is released at once (both compared too).
    fn ticket(
        &mut self,
        acquisition: &Acquisition<StdRng>,
        settings: &Settings,
        ticket: u64,
    ) -> Result<(), String> {
        let redlock_core::LockKind::Fair {
            waiter,
            entry,
            by_queue,
            ..
        } = acquisition.kind().clone()
        else {
            unreachable!("a fair acquisition")
        };
        let request = Request {
            round: RoundId(ticket),
            node: redlock_core::NodeId(0),
            keys: acquisition.keys().clone(),
            value: LockValue::from_string(format!("ticket-{ticket}")),
            kind: redlock_core::LockKind::Fair {
                waiter,
                entry,
                by_queue,
                ticket,
            },
            command: Command::Acquire {
                ttl: settings.default_ttl(),
            },
            client: None,
            native: false,
            aof: false,
            form: Default::default(),
            deadline: Instant::now() + Duration::from_secs(1),
            give_up_at: Instant::now() + Duration::from_secs(1),
            payload: None,
        };
        if self.run(&request)? == Ok(Response::Int(1)) {
            let _ = self.run(&Request {
                command: Command::Withdraw,
                ..request
            })?;
        }
        Ok(())
    }

    /// Sends what a fair acquisition queued (an attempt, or the leaves at
    /// its end) to both, and its lock if it won.
    fn step(&mut self, acquisition: &mut Acquisition<StdRng>) -> Result<Option<Lock>, String> {
        let mut lock = None;
        loop {
            let mut sent = false;
            while let Some(request) = acquisition.poll_request() {
                sent = true;
                let answer = self.run(&request)?;
                acquisition.handle_reply(Reply::to(&request, answer), Instant::now());
            }
            while let Some(event) = acquisition.poll_event() {
                if let AcquireEvent::Acquired(won) = event {
                    lock = Some(won);
                }
            }
            if !sent {
                return Ok(lock);
            }
        }
    }

    /// Runs `machine` to its final event, every request answered by both.
    fn drive<M: Machine>(&mut self, machine: &mut M) -> Result<M::Event, String> {
        let mut last = None;
        loop {
            while let Some(request) = machine.poll_request() {
                let answer = self.run(&request)?;
                machine.handle_reply(Reply::to(&request, answer), Instant::now());
            }
            while let Some(event) = machine.poll_event() {
                last = Some(event);
            }
            if machine.is_done() {
                return Ok(last.expect("a machine that is done gave its final event"));
            }
            // One node answers at once: nothing is left to wait for.
            let at = machine
                .poll_timeout()
                .expect("an unfinished machine has a timeout");
            machine.handle_timeout(at);
        }
    }

    /// A waiters mark (or a semaphore's permits key) on both: present on
    /// both or on neither, with TTLs within 100 ms of each other (the two
    /// clocks tick apart).
    fn compare_mark(&mut self, mark: &redlock_core::Key) -> Result<(), String> {
        let real: i64 = redis::cmd("PTTL")
            .arg(mark.as_bytes())
            .query(&mut self.real)
            .unwrap();
        let clock = self.start.elapsed().as_micros() as f64;
        let modelled = self.model.pttl(mark.as_bytes(), clock);
        // Near its expiry one may have dropped it a moment before the other.
        let agree = match (real, modelled) {
            (-2, -2) => true,
            (-2, left) | (left, -2) => (0..=100).contains(&left),
            (real, modelled) => real >= 0 && modelled >= 0 && (real - modelled).abs() <= 100,
        };
        if !agree {
            return Err(format!(
                "{mark:?}: PTTL {real} on the server, {modelled} in the model"
            ));
        }
        Ok(())
    }

    /// The string at `key` on both (a lock's value, marked or not): the
    /// same on both.
    fn compare_value(&mut self, key: &redlock_core::Key) -> Result<(), String> {
        let real: Option<Vec<u8>> = redis::cmd("GET")
            .arg(key.as_bytes())
            .query(&mut self.real)
            .unwrap_or(None);
        let clock = self.start.elapsed().as_micros() as f64;
        let modelled = self.model.string(key.as_bytes(), clock);
        if real != modelled {
            return Err(format!(
                "the value at {key:?}: {real:?} on the server, {modelled:?} in the model"
            ));
        }
        Ok(())
    }

    /// One request on both; their answers must agree (an error reply by
    /// its code, `WRONGTYPE`).
    fn run(&mut self, request: &Request) -> Result<Result<Response, NodeError>, String> {
        let waiters;
        let request = match (&self.attempt_client, request.command, &request.kind) {
            (
                Some(client),
                Command::Acquire { .. } | Command::AcquireFenced { .. },
                redlock_core::LockKind::Exclusive | redlock_core::LockKind::Multi,
            ) => {
                waiters = Request {
                    client: Some(client.clone()),
                    ..request.clone()
                };
                &waiters
            }
            _ => request,
        };
        let script = match (self.extend_script, request.command, &request.kind) {
            (
                Some(planted),
                redlock_core::Command::Extend { .. },
                redlock_core::LockKind::Exclusive,
            ) => planted,
            _ => request.script(),
        };
        let mut call = redis::cmd("EVAL");
        call.arg(script).arg(request.keys.len());
        for key in request.keys.iter() {
            call.arg(key.as_bytes());
        }
        support::push_arguments(&mut call, request.arguments());
        let real = call.query::<Value>(&mut self.real);
        let clock = self.start.elapsed().as_micros() as f64;
        let modelled = self.model.try_run(clock, request, None);
        let (real, mut modelled) = match (real, modelled) {
            (Ok(real), Ok(modelled)) => (support::to_response(real), modelled),
            (Err(real), Err(modelled)) if real.code() == modelled.split(' ').next() => {
                self.compared += 1;
                let kind = redlock_core::NodeErrorKind::from_error_code("WRONGTYPE");
                return Ok(Err(NodeError::new(kind, modelled)));
            }
            (real, modelled) => {
                return Err(format!(
                    "{} of a {:?} lock on {:?} after {} requests: the script answered \
                     {real:?}, the model {modelled:?}",
                    request.command.name(),
                    request.kind,
                    request.keys,
                    self.compared
                ));
            }
        };
        if matches!(request.command, Command::AcquireFenced { .. }) {
            same_clock(&real, &mut modelled)?;
        }
        if modelled != real {
            return Err(format!(
                "{} of a {:?} lock on {:?} after {} requests: the script answered {real:?}, \
                 the model {modelled:?}",
                request.command.name(),
                request.kind,
                request.keys,
                self.compared
            ));
        }
        self.compared += 1;
        // A semaphore's permits key (the last key of its acquires and
        // withdraws, and of a permit's extends and releases): the same k,
        // and TTLs that agree.
        let permit = matches!(
            request.command,
            Command::Extend { .. } | Command::Restore { .. } | Command::Release | Command::Withdraw
        ) && request.payload.is_some()
            && !matches!(request.kind, redlock_core::LockKind::Semaphore { .. });
        if matches!(request.kind, redlock_core::LockKind::Semaphore { .. }) || permit {
            let permits = request.keys.last().expect("a semaphore's permits key");
            self.compare_value(permits)?;
            self.compare_mark(permits)?;
            let undo = matches!(request.command, Command::Release | Command::Withdraw);
            let clock = self.start.elapsed().as_micros() as f64;
            if permit && undo && self.model.string(permits.as_bytes(), clock).is_none() {
                self.permits_deleted += 1;
            }
        }
        Ok(Ok(real))
    }
}

/// A fenced grant ends with the node's clock (`TIME`, microseconds): the
/// server's and the model's tick apart, so they must only be within a
/// minute of each other (the model's epoch is the server's clock at the
/// start); the model's then takes the server's, for the comparison of the rest.
fn same_clock(real: &Response, modelled: &mut Response) -> Result<(), String> {
    const APART: u64 = 60_000_000;
    let (Response::Array(real), Response::Array(modelled)) = (real, modelled) else {
        return Ok(());
    };
    if real.len() != modelled.len() || real.len() < 3 {
        return Ok(());
    }
    if let (Some(Response::Int(real)), Some(Response::Int(modelled))) =
        (real.last(), modelled.last_mut())
    {
        if real.abs_diff(*modelled) > APART {
            return Err(format!(
                "a fenced grant's clock: the server said {real} µs, the model {modelled} µs"
            ));
        }
        *modelled = *real;
    }
    Ok(())
}
