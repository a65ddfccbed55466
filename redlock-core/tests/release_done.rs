//! When a release is over, and what its report says then: it is done as
//! soon as the outcome is certain (fewer than a quorum of nodes can still
//! hold our value, or a quorum failed), or, asked for every node's story
//! (`every_node`), once every node answered or its per-node timeout
//! passed; from that moment it asks for no timer any more, and its report
//! is complete only when every node answered and none failed. (Written for
//! `make mutants`: drivers stop on `is_done`, and no test read it, nor a
//! complete report, back.)

use redlock_core::Machine;
use std::time::{Duration, Instant};

use redlock_core::{Config, Key, LockValue, Release, Reply, Request, Response, RoundId, Settings};

const MS: Duration = Duration::from_millis(1);

fn settings() -> Settings {
    Config::new(["a", "b", "c"])
        .validate()
        .expect("valid settings")
}

/// A release that waits for every node's story.
fn release(settings: &Settings, t0: Instant) -> (Release, Vec<Request>) {
    let (release, requests) = certain(settings, t0);
    (release.every_node(), requests)
}

#[test]
fn a_release_is_done_once_every_node_answered_and_its_report_is_complete() {
    let settings = settings();
    let t0 = Instant::now();
    let (mut release, requests) = release(&settings, t0);
    assert_eq!(requests.len(), 3);
    assert!(!release.is_done(), "nothing answered yet");

    release.handle_reply(Reply::to(&requests[0], Ok(Response::Int(1))), t0 + MS);
    release.handle_reply(Reply::to(&requests[1], Ok(Response::Int(0))), t0 + MS);
    assert!(!release.is_done(), "one node has not answered");
    assert!(release.poll_event().is_none());
    assert_eq!(
        release.poll_timeout(),
        Some(t0 + settings.release_timeout())
    );

    release.handle_reply(Reply::to(&requests[2], Ok(Response::Int(1))), t0 + 2 * MS);
    assert!(release.is_done(), "every node answered");
    assert_eq!(release.poll_timeout(), None, "no timer once done");
    let report = release.poll_event().expect("the report");
    assert!(report.is_complete(), "no node failed: {report}");
    assert_eq!(
        (report.released(), report.not_held(), report.failed()),
        (2, 1, 0)
    );
    assert!(report.frees_lock() && !report.held_nowhere());
    assert_eq!(report.notices_refused(), 0);
    // In a release's words: nodes "released", never "granted".
    let shown = report.to_string();
    assert!(
        shown.starts_with("released on 2 of 3 nodes, not held on 1 in "),
        "{shown}"
    );
    assert!(shown.contains("a: released; b: not held"), "{shown}");
    assert!(!shown.contains("granted"), "{shown}");
    assert!(release.poll_event().is_none(), "one report");
}

#[test]
fn a_release_with_a_silent_node_is_done_at_its_timeout_and_incomplete() {
    let settings = settings();
    let t0 = Instant::now();
    let (mut release, requests) = release(&settings, t0);
    release.handle_reply(Reply::to(&requests[0], Ok(Response::Int(1))), t0 + MS);
    release.handle_reply(Reply::to(&requests[1], Ok(Response::Int(1))), t0 + MS);

    let deadline = t0 + settings.release_timeout();
    release.handle_timeout(deadline - MS);
    assert!(
        !release.is_done(),
        "a timer before the deadline ends nothing"
    );
    release.handle_timeout(deadline);
    assert!(release.is_done(), "the deadline ends the release");
    assert_eq!(release.poll_timeout(), None);
    let report = release.poll_event().expect("the report");
    assert!(!report.is_complete(), "{report}");
    assert_eq!(
        (report.released(), report.not_held(), report.failed()),
        (2, 0, 1)
    );

    // A late answer changes nothing any more.
    release.handle_reply(Reply::to(&requests[2], Ok(Response::Int(1))), deadline + MS);
    assert!(release.is_done());
    assert!(release.poll_event().is_none());
}

/// Without `every_node`: a release decided by the nodes that answered.
fn certain(settings: &Settings, t0: Instant) -> (Release, Vec<Request>) {
    let mut release = Release::new(
        settings,
        Key::from(&b"done"[..]),
        LockValue::from_string("0123456789abcdef0123"),
        RoundId(1),
        t0,
    );
    let requests = std::iter::from_fn(|| release.poll_request()).collect();
    (release, requests)
}

#[test]
fn a_release_is_done_once_fewer_than_a_quorum_can_still_hold_it() {
    let settings = settings();
    let t0 = Instant::now();
    let (mut release, requests) = certain(&settings, t0);
    release.handle_reply(Reply::to(&requests[0], Ok(Response::Int(1))), t0 + MS);
    assert!(!release.is_done(), "two nodes may still hold it, a quorum");
    release.handle_reply(Reply::to(&requests[1], Ok(Response::Int(0))), t0 + MS);
    assert!(release.is_done(), "only node c may hold it now");
    assert_eq!(release.poll_timeout(), None, "no timer once done");
    let report = release.poll_event().expect("the report");
    assert_eq!(
        (
            report.released(),
            report.not_held(),
            report.failed(),
            report.pending()
        ),
        (1, 1, 0, 1)
    );
    assert!(report.frees_lock(), "{report}");
    assert!(!report.is_complete(), "node c was not waited for: {report}");
    let shown = report.to_string();
    assert!(shown.contains("1 finishing in the background"), "{shown}");
    assert!(shown.contains("c: finishing in the background"), "{shown}");
    assert!(
        !shown.contains("not waited for"),
        "reads as a failure: {shown}"
    );
}

#[test]
fn a_failed_node_counts_against_the_lock_until_the_others_answer() {
    let settings = settings();
    let t0 = Instant::now();
    let (mut release, requests) = certain(&settings, t0);
    release.handle_reply(Reply::to(&requests[0], Ok(Response::Int(1))), t0 + MS);
    let refused = redlock_core::NodeError::new(redlock_core::NodeErrorKind::Server, "LOADING");
    release.handle_reply(Reply::to(&requests[1], Err(refused)), t0 + MS);
    assert!(
        !release.is_done(),
        "b failed and c is silent: together a quorum may still hold it"
    );
    release.handle_reply(Reply::to(&requests[2], Ok(Response::Int(1))), t0 + 2 * MS);
    let report = release.poll_event().expect("the report");
    assert!(report.frees_lock() && !report.is_complete(), "{report}");
}

#[test]
fn a_quorum_of_failures_decides_that_the_lock_stays() {
    let settings = settings();
    let t0 = Instant::now();
    let (mut release, requests) = certain(&settings, t0);
    for request in &requests[..2] {
        let error =
            redlock_core::NodeError::new(redlock_core::NodeErrorKind::Connection, "refused");
        release.handle_reply(Reply::to(request, Err(error)), t0 + MS);
    }
    assert!(release.is_done(), "no answer still to come can free it");
    let report = release.poll_event().expect("the report");
    assert!(!report.frees_lock(), "{report}");
    assert_eq!((report.failed(), report.pending()), (2, 1));
}
