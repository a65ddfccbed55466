//! When an extension decides and what it schedules: silent nodes time out
//! exactly at the per-node deadline (not before), the machine says it is done
//! only once it has an outcome, and the releases it queues after losing the
//! lock get a full release timeout from the moment of the decision.
//! (Each test here kills a mutant that `make mutants` found surviving.)

mod support;

use redlock_core::Machine;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::StdRng;
use redlock_core::{Acquisition, Attempts, Config, ExtendError, Lock, Reply, Response, Settings};
use support::{MS, drain, expect_lock, yes};

const NODE_TIMEOUT: Duration = Duration::from_millis(20);

fn settings() -> Arc<Settings> {
    Arc::new(
        Config::new(["a", "b", "c"])
            .ttl(Duration::from_secs(1))
            .node_timeout(NODE_TIMEOUT)
            .validate()
            .unwrap(),
    )
}

fn acquired(settings: &Arc<Settings>, t0: Instant) -> Lock {
    let mut acquire = Acquisition::new(
        Arc::clone(settings),
        b"timing",
        settings.default_ttl(),
        Attempts::Once,
        t0,
        StdRng::seed_from_u64(3),
    );
    for request in drain(&mut acquire) {
        acquire.handle_reply(yes(&request), t0 + MS);
    }
    expect_lock(&mut acquire)
}

#[test]
fn silent_nodes_time_out_at_the_deadline_and_not_before() {
    let settings = settings();
    let t0 = Instant::now();
    let mut lock = acquired(&settings, t0);
    let now = t0 + 100 * MS;
    let mut ext = lock.extend(lock.ttl(), now).unwrap();
    let requests = drain(&mut ext);
    // One yes, two silent: no quorum yet, none ruled out.
    ext.handle_reply(Reply::to(&requests[0], Ok(Response::Int(1))), now + MS);
    assert!(!ext.is_done(), "undecided with two nodes pending");
    assert_eq!(ext.poll_timeout(), Some(now + NODE_TIMEOUT));

    // A timer that fires early (a coarse runtime timer) times out nobody.
    ext.handle_timeout(now + NODE_TIMEOUT - MS);
    assert!(ext.poll_event().is_none(), "decided before the deadline");
    assert!(!ext.is_done());

    // At the deadline the silent nodes have failed: no quorum.
    ext.handle_timeout(now + NODE_TIMEOUT);
    assert!(ext.is_done(), "the deadline decides");
    match ext.poll_event() {
        Some(Err(ExtendError::NoQuorum { votes })) => assert_eq!(votes.failed(), 2),
        other => panic!("expected NoQuorum at the deadline, got {other:?}"),
    }
    assert_eq!(ext.poll_timeout(), None, "no timer once done");
}

#[test]
fn releases_after_a_lost_lock_get_a_full_release_timeout() {
    let settings = settings();
    let t0 = Instant::now();
    let mut lock = acquired(&settings, t0);
    let now = t0 + 100 * MS;
    let mut ext = lock.extend(lock.ttl(), now).unwrap();
    let requests = drain(&mut ext);
    assert!(
        requests
            .iter()
            .all(|r| r.deadline == now + settings.node_timeout_for(lock.ttl()))
    );
    // Our value is gone from two of three nodes (another owner holds them):
    // the lock is lost, and our value is released everywhere.
    let decided = now + 5 * MS;
    for request in &requests[..2] {
        ext.handle_reply(Reply::to(request, Ok(Response::Int(0))), decided);
    }
    assert!(ext.is_done());
    assert!(matches!(
        ext.poll_event(),
        Some(Err(ExtendError::Lost { .. }))
    ));
    let releases = drain(&mut ext);
    assert_eq!(releases.len(), 3);
    for release in &releases {
        assert_eq!(release.command, settings.release_command(&release.kind));
        assert_eq!(release.deadline, decided + settings.release_timeout());
    }
}
