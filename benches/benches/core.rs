//! CPU-only micro-benchmarks of `redlock-core`: what the core's `Client`
//! costs per lock, with no I/O at all (the work an adapter's driver hands
//! it: start an operation, take its requests, give it the answers, read
//! its event).
//!
//! `cargo bench -p redlock-benches --bench core` (divan; pass
//! `-- --sample-count 20` or a benchmark name to narrow it down).

use std::cell::RefCell;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use divan::Bencher;
use rand::SeedableRng;
use rand::rngs::StdRng;
use redlock_core::{
    AcquireEvent, Attempts, Client, Config, Lock, LockSpec, OpEvent, Operation, Output, Reply,
    Request, RequestId, Response, RetryConfig, Settings, drift, remaining, retry_delay,
    valid_until,
};

fn main() {
    divan::main();
}

fn settings(nodes: usize) -> Arc<Settings> {
    let names: Vec<String> = (0..nodes).map(|i| format!("node-{i}:6379/0")).collect();
    Arc::new(
        Config::new(names)
            .validate()
            .expect("a valid configuration"),
    )
}

/// A client of `settings`, idle between iterations (every request it sends
/// is answered in the same iteration).
fn client(settings: &Arc<Settings>) -> RefCell<Client<StdRng>> {
    RefCell::new(Client::new(Arc::clone(settings), StdRng::seed_from_u64(1)))
}

/// What the client asks to send, and its operations' final events.
fn outputs(client: &mut Client<StdRng>) -> (Vec<(RequestId, Request)>, Vec<OpEvent>) {
    let (mut sent, mut events) = (Vec::new(), Vec::new());
    while let Some(output) = client.poll_output() {
        match output {
            Output::Transmit { id, request } => sent.push((id, request)),
            Output::Event {
                event,
                finished: Some(_),
                ..
            } => events.push(event),
            _ => {}
        }
    }
    (sent, events)
}

/// Runs `operation` on `client`, each node answering `answer(node)` 300 us
/// later; its final event, and how many requests it sent after.
fn run(
    client: &mut Client<StdRng>,
    operation: Operation<StdRng>,
    now: Instant,
    answer: impl Fn(usize) -> Response,
) -> (OpEvent, usize) {
    client.start(operation, now);
    let (sent, _) = outputs(client);
    let later = now + Duration::from_micros(300);
    for (id, request) in &sent {
        let response = answer(request.node.0);
        client.handle_reply(*id, Reply::to(request, Ok(response)), later);
    }
    let (after, mut events) = outputs(client);
    for (id, request) in &after {
        client.handle_reply(*id, Reply::to(request, Ok(Response::Int(1))), later);
    }
    let event = events.pop().expect("every operation ends once answered");
    (event, after.len())
}

fn acquisition(settings: &Arc<Settings>, rng: StdRng, now: Instant) -> Operation<StdRng> {
    Operation::acquire(
        Arc::clone(settings),
        LockSpec::Exclusive(b"bench-resource"),
        settings.default_ttl(),
        Attempts::Once,
        now,
        rng,
    )
    .expect("an exclusive lock is a valid spec")
}

/// One acquire over `nodes` nodes: start the attempt (draws the 20-byte
/// value), emit the N requests, take the yes votes, hand out the lock.
/// This is all the core does per `try_lock`.
fn acquire_once(
    client: &mut Client<StdRng>,
    settings: &Arc<Settings>,
    rng: StdRng,
    now: Instant,
) -> Lock {
    match run(client, acquisition(settings, rng, now), now, |_| {
        Response::Int(1)
    }) {
        (OpEvent::Acquire(AcquireEvent::Acquired(lock)), _) => lock,
        (other, _) => panic!("a quorum of yes votes always acquires: {other:?}"),
    }
}

/// One acquire decision over 1 to 7 nodes, on the client.
#[divan::bench(args = [1, 3, 5, 7])]
fn client_acquire(bencher: Bencher<'_, '_>, nodes: usize) {
    let settings = settings(nodes);
    let client = client(&settings);
    let now = Instant::now();
    bencher
        .with_inputs(|| StdRng::seed_from_u64(7))
        .bench_local_values(|rng| acquire_once(&mut client.borrow_mut(), &settings, rng, now));
}

/// The failing case over 5 nodes: three nodes held by someone else, so the
/// attempt fails and withdraws on every node.
#[divan::bench]
fn client_acquire_held(bencher: Bencher<'_, '_>) {
    let settings = settings(5);
    let client = client(&settings);
    let now = Instant::now();
    bencher
        .with_inputs(|| StdRng::seed_from_u64(7))
        .bench_local_values(|rng| {
            let held = |node| match node {
                0..3 => Response::Data(b"someone-else".to_vec()),
                _ => Response::Int(1),
            };
            run(
                &mut client.borrow_mut(),
                acquisition(&settings, rng, now),
                now,
                held,
            )
        });
}

/// A release over 5 nodes, on the client: emit 5 requests, take 5
/// answers, report.
#[divan::bench]
fn client_release(bencher: Bencher<'_, '_>) {
    let settings = settings(5);
    let client = client(&settings);
    let now = Instant::now();
    bencher
        .with_inputs(|| {
            acquire_once(
                &mut client.borrow_mut(),
                &settings,
                StdRng::seed_from_u64(7),
                now,
            )
        })
        .bench_local_values(|mut lock| {
            let later = now + Duration::from_millis(1);
            let release = Operation::release(&mut lock, later);
            run(&mut client.borrow_mut(), release, later, |_| {
                Response::Int(1)
            })
        });
}

/// Validity arithmetic: drift for the TTL, the end of validity, what is left.
#[divan::bench]
fn validity_arithmetic(bencher: Bencher<'_, '_>) {
    let settings = settings(5);
    let ttl = settings.default_ttl();
    let start = Instant::now();
    let now = start + Duration::from_millis(3);
    bencher.bench_local(|| {
        let drift = drift(black_box(ttl), black_box(0.01));
        let until = valid_until(black_box(start), ttl, drift);
        until.and_then(|until| remaining(until, black_box(now)))
    });
}

/// `Lock::validity(now)`, what a guard's `validity()` costs besides the clock.
#[divan::bench]
fn lock_validity(bencher: Bencher<'_, '_>) {
    let settings = settings(5);
    let now = Instant::now();
    let lock = acquire_once(
        &mut client(&settings).borrow_mut(),
        &settings,
        StdRng::seed_from_u64(7),
        now,
    );
    let later = now + Duration::from_millis(5);
    bencher.bench_local(|| black_box(&lock).validity(black_box(later)));
}

/// The retry schedule: `delay + uniform(0, jitter)` from the caller's RNG.
#[divan::bench]
fn retry_schedule(bencher: Bencher<'_, '_>) {
    let retry = RetryConfig::default();
    let mut rng = StdRng::seed_from_u64(7);
    bencher.bench_local(|| retry_delay(black_box(&retry), &mut rng));
}
