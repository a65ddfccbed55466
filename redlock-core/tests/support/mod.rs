//! Helpers the hand-driven tests share: their settings, a machine's
//! requests, the nodes' usual answers and the lock an acquisition reports.
//! (The simulation, with its virtual masters, is `sim/`.)

// Each file under `tests/` is a crate of its own and uses only some of
// these; the others would be dead code there.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::{SeedableRng, rngs::StdRng};
use redlock_core::{
    AcquireEvent, Acquisition, Attempts, Command, Config, Lock, Machine, NodeId, Notice, Reply,
    Request, Response, RetryConfig, Settings,
};

/// One millisecond of virtual time.
pub(crate) const MS: Duration = Duration::from_millis(1);

/// Three nodes, a 1 s TTL and a 10 ms per-node timeout; `count` retries
/// `delay` apart, without jitter, so that an attempt that starts sooner was
/// started by something else (a release notice, a hand-over).
pub(crate) fn three_nodes(count: u32, delay: Duration) -> Config {
    Config::new(["a", "b", "c"])
        .ttl(Duration::from_secs(1))
        .node_timeout(10 * MS)
        .retry(
            RetryConfig::default()
                .count(count)
                .delay(delay)
                .jitter(Duration::ZERO),
        )
}

/// Three nodes, a 5 ms per-node timeout and 10 retries 1 s apart, without
/// jitter: within a test's few hundred milliseconds, only a release notice
/// (or a wait limit's last attempt) starts an attempt.
pub(crate) fn slow_retries() -> Arc<Settings> {
    Arc::new(
        Config::new(["a", "b", "c"])
            .node_timeout(5 * MS)
            .retry(
                RetryConfig::default()
                    .count(10)
                    .delay(Duration::from_secs(1))
                    .jitter(Duration::ZERO),
            )
            .validate()
            .unwrap(),
    )
}

/// Every request `machine` queued.
pub(crate) fn drain(machine: &mut impl Machine) -> Vec<Request> {
    std::iter::from_fn(|| machine.poll_request()).collect()
}

/// The requests `machine` queued but a waiter's marks
/// ([`Command::MarkWaiting`]), which are no votes
/// (`release_notice_marks.rs` checks them).
pub(crate) fn drain_but_marks(machine: &mut impl Machine) -> Vec<Request> {
    std::iter::from_fn(|| machine.poll_request())
        .filter(|r| !matches!(r.command, Command::MarkWaiting { .. }))
        .collect()
}

/// A node's yes: the key is ours.
pub(crate) fn yes(request: &Request) -> Reply {
    Reply::to(request, Ok(Response::Int(1)))
}

/// A node's no: another value holds the key.
pub(crate) fn held(request: &Request) -> Reply {
    Reply::to(request, Ok(Response::Data(b"other".to_vec())))
}

/// The lock `acquire` reports next; anything else fails the test.
pub(crate) fn expect_lock(acquire: &mut impl Machine<Event = AcquireEvent>) -> Lock {
    match acquire.poll_event() {
        Some(AcquireEvent::Acquired(lock)) => lock,
        other => panic!("expected the lock, got {other:?}"),
    }
}

/// Release notices from two of three nodes: more than failed attempts can
/// free while someone holds a quorum, so the lock may have been released.
pub(crate) fn released<R: rand_core::Rng>(acquire: &mut Acquisition<R>, now: Instant) {
    for node in 0..2 {
        acquire.handle_notice(Notice::Released(NodeId(node)), now);
    }
}

/// A lock on `job` with `settings`' default TTL that every node granted at
/// `t0`, its value drawn from `seed`.
pub(crate) fn granted(settings: &Arc<Settings>, seed: u64, t0: Instant) -> Lock {
    let mut acquire = Acquisition::new(
        settings.clone(),
        b"job",
        settings.default_ttl(),
        Attempts::Once,
        t0,
        StdRng::seed_from_u64(seed),
    );
    for request in drain(&mut acquire) {
        acquire.handle_reply(Reply::to(&request, Ok(Response::Int(1))), t0);
    }
    expect_lock(&mut acquire)
}
