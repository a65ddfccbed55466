//! `Inspection`, the read behind `redlock status`, as a machine: one
//! request per node, the core's own timeout, stray and repeated replies
//! ignored. Time is passed in; no clock is read.

mod support;

use std::time::{Duration, Instant};

use redlock_core::{
    Command, Config, Inspection, LockState, Machine, NodeErrorKind, NodeId, Reply, Response,
    RoundId, Settings,
};
use support::drain;

fn settings(nodes: usize) -> Settings {
    Config::new((0..nodes).map(|n| format!("n{n}")))
        .validate()
        .unwrap()
}

fn held(value: &str, pttl: i64, counter: Option<&str>) -> Response {
    Response::Array(vec![
        Response::Data(value.as_bytes().to_vec()),
        Response::Int(pttl),
        counter.map_or(Response::Nil, |c| Response::Data(c.as_bytes().to_vec())),
    ])
}

fn absent() -> Response {
    Response::Array(vec![Response::Nil, Response::Int(-2), Response::Nil])
}

#[test]
fn one_inspect_request_per_node_on_the_key_and_its_counter() {
    let settings = settings(5);
    let t0 = Instant::now();
    let mut inspection = Inspection::new(&settings, b"report", RoundId(3), t0);
    let sent = drain(&mut inspection);
    assert_eq!(sent.len(), 5);
    for (index, request) in sent.iter().enumerate() {
        assert_eq!(request.node, NodeId(index));
        assert_eq!(request.round, RoundId(3));
        assert_eq!(request.command, Command::Inspect);
        assert!(!request.command.must_arrive(), "a read may be dropped");
        assert_eq!(request.script(), redlock_core::scripts::INSPECT);
        let key = settings.key(b"report");
        assert_eq!(
            &request.keys[..],
            &[key.clone(), settings.fencing_key(&key)]
        );
        assert_eq!(request.deadline, t0 + settings.node_timeout());
    }
    assert_eq!(
        inspection.poll_timeout(),
        Some(t0 + settings.node_timeout())
    );
}

#[test]
fn the_report_comes_once_every_node_answered() {
    let settings = settings(3);
    let t0 = Instant::now();
    let mut inspection = Inspection::new(&settings, b"r", RoundId(0), t0);
    let sent = drain(&mut inspection);
    let now = t0 + Duration::from_millis(1);
    inspection.handle_reply(Reply::to(&sent[0], Ok(held("v", 900, Some("7")))), now);
    inspection.handle_reply(Reply::to(&sent[1], Ok(held("v", 800, None))), now);
    assert!(!inspection.is_done());
    assert_eq!(inspection.poll_event(), None);
    inspection.handle_reply(Reply::to(&sent[2], Ok(absent())), now);
    assert!(inspection.is_done());
    assert_eq!(inspection.poll_timeout(), None);
    let report = inspection.poll_event().expect("the report");
    assert_eq!(report.reads[0].as_ref().unwrap().fencing_counter, Some(7));
    assert!(report.reads[2].as_ref().unwrap().holding.is_none());
    let status = report.status();
    assert_eq!(status.state(), LockState::Held);
    assert_eq!(
        status.holder.unwrap().remaining,
        Some(Duration::from_millis(800))
    );
    assert_eq!(report.votes().failed(), 0);
    assert_eq!(inspection.poll_event(), None, "one report");
}

#[test]
fn nodes_silent_at_the_core_timeout_are_reported_timed_out() {
    let settings = settings(3);
    let t0 = Instant::now();
    let mut inspection = Inspection::new(&settings, b"r", RoundId(0), t0);
    let sent = drain(&mut inspection);
    inspection.handle_reply(Reply::to(&sent[1], Ok(absent())), t0);
    // Early: nothing happens.
    let deadline = inspection.poll_timeout().unwrap();
    inspection.handle_timeout(deadline - Duration::from_millis(1));
    assert!(!inspection.is_done());
    inspection.handle_timeout(deadline);
    let report = inspection.poll_event().expect("the report at the deadline");
    for node in [0, 2] {
        let error = report.reads[node].as_ref().unwrap_err();
        assert_eq!(error.kind, NodeErrorKind::Timeout);
    }
    assert_eq!(report.votes().failed(), 2);
    assert_eq!(report.status().state(), LockState::Unknown);
    // A reply after the report changes nothing.
    inspection.handle_reply(Reply::to(&sent[0], Ok(absent())), deadline);
    assert_eq!(inspection.poll_event(), None);
}

#[test]
fn stray_repeated_and_garbled_replies() {
    let settings = settings(3);
    let t0 = Instant::now();
    let mut inspection = Inspection::new(&settings, b"r", RoundId(5), t0);
    let sent = drain(&mut inspection);
    // Another round's reply is ignored.
    let mut stray = Reply::to(&sent[0], Ok(held("x", 5, None)));
    stray.round = RoundId(4);
    inspection.handle_reply(stray, t0);
    // A garbled answer is that node's protocol error, not a read.
    inspection.handle_reply(Reply::to(&sent[0], Ok(Response::Int(1))), t0);
    // The first answer of a node counts; a repeat does not.
    inspection.handle_reply(Reply::to(&sent[1], Ok(absent())), t0);
    inspection.handle_reply(Reply::to(&sent[1], Ok(held("y", 5, None))), t0);
    assert!(!inspection.is_done());
    inspection.handle_reply(Reply::to(&sent[2], Ok(absent())), t0);
    let report = inspection.poll_event().unwrap();
    assert_eq!(
        report.reads[0].as_ref().unwrap_err().kind,
        NodeErrorKind::Protocol
    );
    assert!(report.reads[1].as_ref().unwrap().holding.is_none());
    assert_eq!(report.status().state(), LockState::NotHeld);
}
