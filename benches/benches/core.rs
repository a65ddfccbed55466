//! CPU-only micro-benchmarks of `redlock-core`: what the state machines cost
//! per lock, with no I/O at all.
//!
//! `cargo bench -p redlock-benches --bench core` (divan; pass
//! `-- --sample-count 20` or a benchmark name to narrow it down).

use redlock_core::Machine;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use divan::Bencher;
use rand::SeedableRng;
use rand::rngs::StdRng;
use redlock_core::{
    AcquireEvent, Acquisition, Attempts, Config, Lock, Reply, Request, Response, RetryConfig,
    Settings, drift, remaining, retry_delay, valid_until,
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

/// One acquire over `nodes` nodes: start the attempt (draws the 20-byte
/// value), emit the N requests, take a quorum of yes votes, hand out the
/// lock. This is all the core does per `try_lock`.
fn acquire_once(settings: &Arc<Settings>, rng: StdRng, now: Instant) -> Lock {
    let mut acquisition = Acquisition::new(
        Arc::clone(settings),
        b"bench-resource",
        settings.default_ttl(),
        Attempts::Once,
        now,
        rng,
    );
    let mut requests: [Option<Request>; 16] = Default::default();
    let mut count = 0;
    while let Some(request) = acquisition.poll_request() {
        requests[count] = Some(request);
        count += 1;
    }
    let later = now + Duration::from_micros(300);
    for request in requests.iter().take(count).flatten() {
        acquisition.handle_reply(Reply::to(request, Ok(Response::Int(1))), later);
        if let Some(AcquireEvent::Acquired(lock)) = acquisition.poll_event() {
            return lock;
        }
    }
    panic!("a quorum of yes votes always acquires");
}

/// One acquire decision over 5 nodes (3 yes votes decide it).
#[divan::bench(args = [1, 3, 5, 7])]
fn acquire_decision(bencher: Bencher<'_, '_>, nodes: usize) {
    let settings = settings(nodes);
    let now = Instant::now();
    bencher
        .with_inputs(|| StdRng::seed_from_u64(7))
        .bench_local_values(|rng| acquire_once(&settings, rng, now));
}

/// The failing case over 5 nodes: three nodes held by someone else, so the
/// attempt fails at once and queues releases on every node.
#[divan::bench]
fn acquire_decision_held(bencher: Bencher<'_, '_>) {
    let settings = settings(5);
    let now = Instant::now();
    bencher
        .with_inputs(|| StdRng::seed_from_u64(7))
        .bench_local_values(|rng| {
            let mut acquisition = Acquisition::new(
                Arc::clone(&settings),
                b"bench-resource",
                settings.default_ttl(),
                Attempts::Once,
                now,
                rng,
            );
            let requests: Vec<Request> =
                std::iter::from_fn(|| acquisition.poll_request()).collect();
            let later = now + Duration::from_micros(300);
            for request in &requests[..3] {
                let other = Ok(Response::Data(b"someone-else".to_vec()));
                acquisition.handle_reply(Reply::to(request, other), later);
            }
            let event = acquisition.poll_event();
            let releases = std::iter::from_fn(|| acquisition.poll_request()).count();
            (event, releases)
        });
}

/// A release round over 5 nodes: emit 5 requests, take 5 answers, report.
#[divan::bench]
fn release_round(bencher: Bencher<'_, '_>) {
    let settings = settings(5);
    let now = Instant::now();
    bencher
        .with_inputs(|| acquire_once(&settings, StdRng::seed_from_u64(7), now))
        .bench_local_values(|mut lock| {
            let later = now + Duration::from_millis(1);
            let mut release = lock.release(later);
            let requests: Vec<Request> = std::iter::from_fn(|| release.poll_request()).collect();
            for request in &requests {
                release.handle_reply(Reply::to(request, Ok(Response::Int(1))), later);
            }
            release.poll_event()
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
    let lock = acquire_once(&settings, StdRng::seed_from_u64(7), now);
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
