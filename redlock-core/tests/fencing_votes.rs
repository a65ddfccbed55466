//! A fencing token is the largest counter among the nodes that granted the
//! lock, plus one: a counter in a reply the core cannot count as a grant (a
//! node that answered garbage) never raises it. (Written for `make mutants`:
//! a mutant that takes every node as granted there passed every test.)

mod support;

use redlock_core::Machine;
use std::sync::Arc;
use std::time::Instant;

use rand::SeedableRng;
use rand::rngs::StdRng;
use redlock_core::native::{Call, Native};
use redlock_core::{Acquisition, Attempts, Command, Config, Reply, Request, Response};
use support::{MS, drain, expect_lock};

fn fenced_grant(counter: i64) -> Response {
    Response::Array(vec![Response::Int(1), Response::Int(counter)])
}

#[test]
fn a_counter_from_a_reply_that_is_no_grant_does_not_raise_the_token() {
    let settings = Arc::new(Config::new(["a", "b", "c"]).validate().unwrap());
    let t0 = Instant::now();
    let mut acquire = Acquisition::fenced(
        Arc::clone(&settings),
        b"ledger",
        settings.default_ttl(),
        Attempts::Once,
        t0,
        StdRng::seed_from_u64(4),
    );
    let lock_round: Vec<Request> = drain(&mut acquire);
    assert!(
        lock_round
            .iter()
            .all(|r| matches!(r.command, Command::AcquireFenced { .. }))
    );
    // Node c's answer has the script's shape but comes marked as the answer
    // to a plain `SET`, which never returns an array: a protocol failure,
    // whatever counter it carries.
    acquire.handle_reply(
        Reply::via(
            &lock_round[2],
            Call::Native(Native::SetNxGet),
            Ok(fenced_grant(99)),
        ),
        t0 + MS,
    );
    acquire.handle_reply(Reply::to(&lock_round[0], Ok(fenced_grant(5))), t0 + MS);
    acquire.handle_reply(Reply::to(&lock_round[1], Ok(fenced_grant(7))), t0 + MS);

    let fence_round: Vec<Request> = drain(&mut acquire);
    assert_eq!(fence_round.len(), 3);
    for request in &fence_round {
        assert_eq!(request.command, Command::StoreToken { token: 8 });
    }
    for request in &fence_round[..2] {
        acquire.handle_reply(Reply::to(request, Ok(Response::Int(1))), t0 + 2 * MS);
    }
    assert_eq!(expect_lock(&mut acquire).fencing_token(), Some(8));
}
