//! An acquisition names the attempt in flight (the round its requests carry,
//! which a driver logs and matches replies against), and none between
//! attempts or once decided. (Written for `make mutants`: no test called
//! `Acquisition::current_attempt`, so none could catch its mutants.)

mod support;

use redlock_core::Machine;
use std::sync::Arc;
use std::time::Instant;

use rand::SeedableRng;
use rand::rngs::StdRng;
use redlock_core::{
    AcquireEvent, Acquisition, Attempts, Command, Reply, Request, Response, Settings,
};
use support::{MS, three_nodes};

fn settings() -> Arc<Settings> {
    Arc::new(three_nodes(2, 100 * MS).validate().unwrap())
}

/// The requests of the attempt just started (not the releases of the last).
fn attempt(acquire: &mut Acquisition<StdRng>) -> Vec<Request> {
    std::iter::from_fn(|| acquire.poll_request())
        .filter(|r| r.command != Command::Withdraw)
        // A waiter's marks go on their own round (no votes).
        .filter(|r| !matches!(r.command, Command::MarkWaiting { .. }))
        .collect()
}

#[test]
fn the_attempt_in_flight_is_the_round_of_its_requests() {
    let settings = settings();
    let t0 = Instant::now();
    let mut acquire = Acquisition::new(
        Arc::clone(&settings),
        b"in-flight",
        settings.default_ttl(),
        Attempts::Retry,
        t0,
        StdRng::seed_from_u64(2),
    );
    let first = attempt(&mut acquire);
    assert_eq!(acquire.current_attempt(), Some(first[0].round));

    // Held elsewhere on two of three nodes: the attempt fails, a retry waits.
    for request in &first[..2] {
        acquire.handle_reply(
            Reply::to(request, Ok(Response::Data(b"other".to_vec()))),
            t0 + MS,
        );
    }
    let Some(AcquireEvent::AttemptFailed { retry_at, .. }) = acquire.poll_event() else {
        panic!("expected a retry");
    };
    assert_eq!(acquire.current_attempt(), None, "no attempt while waiting");

    acquire.handle_timeout(retry_at);
    let second = attempt(&mut acquire);
    assert_eq!(acquire.current_attempt(), Some(second[0].round));
    assert_ne!(second[0].round, first[0].round);

    for request in &second[..2] {
        acquire.handle_reply(Reply::to(request, Ok(Response::Int(1))), retry_at + MS);
    }
    assert!(matches!(
        acquire.poll_event(),
        Some(AcquireEvent::Acquired(_))
    ));
    assert_eq!(acquire.current_attempt(), None, "none once decided");
}
