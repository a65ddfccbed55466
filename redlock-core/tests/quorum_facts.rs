//! The facts the core reads off a round or a read of every node, so that
//! no adapter or CLI compares counts with the quorum itself: whether a
//! release frees the lock, and who holds a key according to the inspect
//! script's replies.

use redlock_core::Machine;
use std::time::{Duration, Instant};

use redlock_core::{
    Config, Holding, InspectReply, Key, LockState, LockStatus, LockValue, NodeError, NodeErrorKind,
    Release, ReleaseReport, Reply, Response, RoundId,
};

/// A release on five nodes where node `i` answers `answers[i]`.
fn report(answers: [Option<i64>; 5]) -> ReleaseReport {
    let settings = Config::new(["a", "b", "c", "d", "e"]).validate().unwrap();
    let now = Instant::now();
    let value = LockValue::from_string("v");
    let mut release = Release::new(&settings, Key::from(&b"k"[..]), value, RoundId(1), now);
    while let Some(request) = release.poll_request() {
        let result = match answers[request.node.0] {
            Some(answer) => Ok(Response::Int(answer)),
            None => Err(NodeError::new(NodeErrorKind::Connection, "down")),
        };
        release.handle_reply(Reply::to(&request, result), now);
    }
    release.handle_timeout(now + Duration::from_secs(1));
    release.poll_event().expect("every node answered")
}

#[test]
fn the_lock_is_free_unless_a_quorum_failed() {
    let released = report([Some(1), Some(1), Some(1), None, None]);
    assert_eq!(released.quorum(), 3);
    assert!(released.frees_lock() && !released.held_nowhere());

    // Two failed nodes cannot hold the lock; nothing was deleted: the
    // value was held nowhere.
    let missing = report([Some(-1), Some(-1), Some(0), None, None]);
    assert!(missing.frees_lock() && missing.held_nowhere());

    // Three failed nodes may still hold it until its TTL.
    let stuck = report([Some(1), Some(-1), None, None, None]);
    assert!(!stuck.frees_lock() && !stuck.held_nowhere());
    let unknown = report([Some(-1), Some(-1), None, None, None]);
    assert!(!unknown.frees_lock() && !unknown.held_nowhere());
}

fn data(bytes: &[u8]) -> Response {
    Response::Data(bytes.to_vec())
}

#[test]
fn parses_the_script_answer() {
    let held = Response::Array(vec![data(b"abc"), Response::Int(1500), data(b"7")]);
    let reply = InspectReply::parse(held).unwrap();
    assert_eq!(
        reply.holding,
        Some(Holding::new("abc", Some(Duration::from_millis(1500))))
    );
    assert_eq!(reply.fencing_counter, Some(7));

    let free = Response::Array(vec![Response::Nil, Response::Int(-2), Response::Nil]);
    let reply = InspectReply::parse(free).unwrap();
    assert_eq!((reply.holding, reply.fencing_counter), (None, None));

    let forever = Response::Array(vec![data(b"x"), Response::Int(-1), data(b"not a number")]);
    let reply = InspectReply::parse(forever).unwrap();
    assert_eq!(reply.holding.unwrap().pttl, None);
    assert_eq!(reply.fencing_counter, None);

    for garbage in [
        Response::Array(vec![Response::Nil]),
        Response::Int(1),
        Response::Array(vec![Response::Int(1), Response::Int(5), Response::Nil]),
    ] {
        let error = InspectReply::parse(garbage).unwrap_err();
        assert_eq!(error.kind, NodeErrorKind::Protocol);
    }
}

#[test]
fn debug_hides_most_of_the_value() {
    let holding = Holding::new("0123456789abcdef", None);
    let text = format!("{holding:?}");
    assert!(text.contains("01234567"));
    assert!(!text.contains("89abcdef"));
    let status = LockStatus::from_reads([Ok::<_, ()>(Some(&holding))]);
    let text = format!("{status:?}");
    assert!(text.contains("01234567"));
    assert!(!text.contains("89abcdef"));
}

#[test]
fn a_quorum_holds_the_value_for_its_quorum_th_longest_pttl() {
    let ms = Duration::from_millis;
    let v = |pttl: Option<u64>| Holding::new("v", pttl.map(ms));
    let (a, b, c, d) = (v(Some(900)), v(Some(300)), v(None), v(Some(600)));
    let other = Holding::new("w", Some(ms(1)));
    let reads: [Result<_, ()>; 5] = [
        Ok(Some(&a)),
        Ok(Some(&b)),
        Ok(Some(&c)),
        Ok(Some(&d)),
        Ok(Some(&other)),
    ];
    let status = LockStatus::from_reads(reads);
    assert_eq!(status.state(), LockState::Held);
    assert_eq!(
        (
            status.nodes,
            status.quorum,
            status.answered,
            status.with_key
        ),
        (5, 3, 5, 5)
    );
    let holder = status.holder.unwrap();
    // Longest first: none, 900, 600, 300: the third is 600.
    assert_eq!(
        (holder.value.as_slice(), holder.nodes, holder.remaining),
        (&b"v"[..], 4, Some(ms(600)))
    );

    // No expiry on a quorum.
    let (e, f) = (v(None), v(None));
    let status = LockStatus::from_reads([Ok::<_, ()>(Some(&e)), Ok(Some(&f)), Ok(None)]);
    assert_eq!(status.holder.unwrap().remaining, None);
}

#[test]
fn too_few_answers_are_unknown_and_a_split_is_not_held() {
    let a = Holding::new("a", None);
    let b = Holding::new("b", None);
    let unknown = LockStatus::from_reads([Ok(Some(&a)), Err(()), Err(())]);
    assert_eq!(unknown.state(), LockState::Unknown);
    assert_eq!((unknown.answered, unknown.with_key), (1, 1));

    let split = LockStatus::from_reads([Ok::<_, ()>(Some(&a)), Ok(Some(&b)), Ok(None)]);
    assert_eq!(split.state(), LockState::NotHeld);
    assert_eq!(split.with_key, 2);

    let free = LockStatus::from_reads([Ok::<_, ()>(None), Ok(None), Err(())]);
    assert_eq!(free.state(), LockState::NotHeld);
    assert_eq!((free.answered, free.with_key), (2, 0));
}
