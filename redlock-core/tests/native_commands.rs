//! The core's choice between a plain command and a script, per node, and
//! how it reads the plain commands' answers (their shapes as Redis 7.0.15
//! and Valkey 9.1.2 give them, checked by hand with redis-cli).

mod support;

use std::sync::Arc;
use std::time::Instant;

use rand::SeedableRng;
use rand::rngs::StdRng;
use redlock_core::native::{Call, Native, NodeFacts, Server, Version};
use redlock_core::{
    AcquireEvent, Acquisition, Argument, Attempts, Command, Config, Form, HandOver, Key, LockSpec,
    LockValue, Machine, NodeError, NodeErrorKind, NodeVote, Release, Reply, Request, Response,
    RoundId, Settings, scripts,
};
use support::{MS, drain};

fn settings(notices: bool) -> Arc<Settings> {
    Arc::new(
        Config::new(["a", "b", "c"])
            .release_notices(notices)
            .validate()
            .unwrap(),
    )
}

fn redis7() -> NodeFacts {
    NodeFacts::new(Server::Redis, Version(7, 0, 15))
}

fn redis62() -> NodeFacts {
    NodeFacts::new(Server::Redis, Version(6, 2, 14))
}

fn valkey9() -> NodeFacts {
    NodeFacts::new(Server::Valkey, Version(9, 1, 2))
}

fn valkey8() -> NodeFacts {
    NodeFacts::new(Server::Valkey, Version(8, 1, 0))
}

fn acquisition(spec: LockSpec<'_>, t0: Instant) -> Acquisition<StdRng> {
    let settings = settings(true);
    Acquisition::with_spec(
        Arc::clone(&settings),
        spec,
        settings.default_ttl(),
        Attempts::Once,
        t0,
        StdRng::seed_from_u64(7),
    )
    .unwrap()
}

/// A release of our value `v` at `key`, in round `round`.
fn release_of(settings: &Settings, key: Key, round: u64, t0: Instant) -> Release {
    Release::new(
        settings,
        key,
        LockValue::from_string("v"),
        RoundId(round),
        t0,
    )
    .every_node()
}

#[test]
fn facts_are_read_from_info_server() {
    let valkey = NodeFacts::from_info(
        "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:9.1.2\r\n",
    );
    assert_eq!(valkey, valkey9());
    assert_eq!(valkey.to_string(), "Valkey 9.1.2");
    assert_eq!(NodeFacts::from_info("redis_version:7.0.15\r\n"), redis7());
    assert_eq!(
        NodeFacts::from_info("redis_version:8.4\r\n").version(),
        Some(Version(8, 4, 0))
    );
    for unknown in [
        "",
        "# Server\r\n",
        "redis_version:seven\r\n",
        "server_name:valkey\r\n",
    ] {
        assert_eq!(
            NodeFacts::from_info(unknown),
            NodeFacts::default(),
            "{unknown:?}"
        );
    }
}

#[test]
fn exclusive_acquires_go_native_where_set_nx_get_exists() {
    let t0 = Instant::now();
    let request = drain(&mut acquisition(LockSpec::Exclusive(b"k"), t0)).remove(0);
    for facts in [redis7(), valkey8(), valkey9()] {
        assert_eq!(
            request.call(&facts),
            Call::Native(Native::SetNxGet),
            "{facts}"
        );
    }
    for facts in [redis62(), NodeFacts::default()] {
        assert_eq!(
            request.call(&facts),
            Call::Script(scripts::ACQUIRE),
            "{facts}"
        );
    }
    let words: Vec<Argument<'_>> = Native::SetNxGet.words(&request).to_vec();
    assert_eq!(words[0], Argument::Bytes(b"SET"));
    assert_eq!(words[1], Argument::Bytes(b"k"));
    assert_eq!(words[2], Argument::Bytes(request.value.as_bytes()));
    assert_eq!(
        words[3..],
        [
            Argument::Bytes(b"NX"),
            Argument::Bytes(b"PX"),
            Argument::Int(10_000),
            Argument::Bytes(b"GET")
        ]
    );
}

/// What goes on the wire is the request's form: `EVALSHA` of its script's
/// digest with its keys and arguments, `EVAL` of the source in the
/// digest's place, or the plain command's words.
#[test]
fn each_form_writes_its_own_command() {
    let t0 = Instant::now();
    let request = drain(&mut acquisition(LockSpec::Exclusive(b"k"), t0)).remove(0);
    let in_form = |form| Request {
        form,
        ..request.clone()
    };
    let arguments: Vec<Argument<'_>> = request.arguments().collect();
    let digest = scripts::digest(scripts::ACQUIRE).expect("a script of ALL");
    assert!(digest.len() == 40 && digest.bytes().all(|b| b.is_ascii_hexdigit()));
    // One digest per script, none for any other text.
    let digests: std::collections::HashSet<Option<&str>> = scripts::ALL
        .iter()
        .map(|script| scripts::digest(script))
        .collect();
    assert_eq!(digests.len(), scripts::ALL.len());
    assert!(!digests.contains(&None));
    assert_eq!(scripts::digest("return 1"), None);
    for (form, verb, script) in [
        (Form::Digest, &b"EVALSHA"[..], digest.as_bytes()),
        (Form::InFull, &b"EVAL"[..], scripts::ACQUIRE.as_bytes()),
    ] {
        let sent = in_form(form);
        let words = sent.words();
        assert_eq!(
            words[..4],
            [
                Argument::Bytes(verb),
                Argument::Bytes(script),
                Argument::Int(1),
                Argument::Bytes(b"k")
            ],
            "{form:?}"
        );
        assert_eq!(words[4..], arguments[..], "{form:?}");
    }
    let plain = in_form(Form::Native(Native::SetNxGet));
    assert_eq!(plain.words(), Native::SetNxGet.words(&plain).to_vec());
}

#[test]
fn other_kinds_and_fenced_locks_stay_scripted() {
    let t0 = Instant::now();
    for spec in [
        LockSpec::Read(b"doc"),
        LockSpec::Write(b"doc"),
        LockSpec::Reentrant {
            resource: b"job",
            owner: "w",
        },
        LockSpec::Multi(&[b"a", b"b"]),
    ] {
        let request = drain(&mut acquisition(spec, t0)).remove(0);
        assert!(
            matches!(request.call(&valkey9()), Call::Script(_)),
            "{request:?}"
        );
    }
    let mut fenced = acquisition(LockSpec::Fenced(b"k"), t0);
    let request = drain(&mut fenced).remove(0);
    assert_eq!(
        request.call(&valkey9()),
        Call::Script(scripts::ACQUIRE_FENCED)
    );
}

#[test]
fn releases_and_withdraws_use_delifeq_on_valkey_9() {
    let t0 = Instant::now();
    // With notices as without, one `DELIFEQ`; elsewhere the release that
    // publishes only for a waiter's mark, or the quiet one.
    for (notices, script) in [
        (true, scripts::RELEASE_IF_WAITED),
        (false, scripts::RELEASE),
    ] {
        let settings = settings(notices);
        let mut release = release_of(&settings, Key::from(&b"k"[..]), 1, t0);
        let request = drain(&mut release).remove(0);
        assert_eq!(request.call(&valkey9()), Call::Native(Native::DelIfEq));
        assert_eq!(request.call(&valkey8()), Call::Script(script));
        assert_eq!(request.call(&redis7()), Call::Script(script));
    }
    // A release whose marks cannot share its key's slot (a cluster key
    // with a `}` and no hash tag) sends the lock key alone: plain too.
    let mut release = release_of(&settings(true), Key::from(&b"a}b"[..]), 1, t0);
    let request = drain(&mut release).remove(0);
    assert_eq!(request.keys.len(), 1);
    assert_eq!(request.call(&valkey9()), Call::Native(Native::DelIfEq));
}

/// A plain release deletes our value only where no waiter marked it
/// (`redlock_core::waited`): nobody waited there. Where it deletes nothing,
/// the release sends its script to that node, once, and reads the
/// script's answer as the node's: released (publishing, or not for our own
/// client's waiters), held by another value, or gone.
#[test]
fn a_plain_release_that_deletes_nothing_sends_the_script_after_it() {
    let t0 = Instant::now();
    let me = LockValue::from_string("me");
    let settings = Arc::new(settings(true).as_ref().clone().with_client_tag(me.clone()));
    let release = || release_of(&settings, settings.key(b"k"), 1, t0);
    let native = |request: &Request, response| {
        Reply::via(request, Call::Native(Native::DelIfEq), Ok(response))
    };
    let channels = vec![settings.release_channel(&settings.key(b"k"))];

    // Nobody waited anywhere: one command per node, nothing after it.
    let mut quiet = release();
    let sent = drain(&mut quiet);
    let words: Vec<Vec<u8>> = Native::DelIfEq
        .words(&sent[0])
        .iter()
        .map(|word| match word {
            Argument::Bytes(bytes) => bytes.to_vec(),
            Argument::Int(n) => n.to_string().into_bytes(),
        })
        .collect();
    assert_eq!(words, [&b"DELIFEQ"[..], sent[0].key().as_bytes(), b"v"]);
    for request in &sent {
        quiet.handle_reply(native(request, Response::Int(1)), t0 + MS);
        assert_eq!(quiet.poll_request(), None);
    }
    assert_eq!(
        quiet.poll_hand_over(),
        Some(HandOver::Queued {
            channels: channels.clone()
        })
    );
    assert_eq!(
        quiet.poll_hand_over(),
        Some(HandOver::Answered {
            channels: channels.clone(),
            others_waiting: false,
            unheard: true,
        })
    );
    let report = quiet.poll_event().unwrap();
    assert_eq!((report.released(), report.notices_refused()), (3, 0));

    // Marked (or gone, or another's): the script follows on each node
    // (`Request::follow_up`), and its answer is the node's; the machine
    // never counts the `DELIFEQ`'s `0`.
    let mut marked = release();
    let sent = drain(&mut marked);
    for (request, answer) in sent.iter().zip([3, 1, -1]) {
        let again = request
            .follow_up(&native(request, Response::Int(0)))
            .expect("the script after it");
        assert_eq!(
            (again.node, again.command),
            (request.node, Command::Release)
        );
        assert_eq!(again.client.as_ref(), Some(&me), "it names its client");
        assert_eq!(
            again.call(&valkey9()),
            Call::Script(scripts::RELEASE_IF_WAITED)
        );
        assert_eq!(
            again.follow_up(&Reply::to(&again, Ok(Response::Int(0)))),
            None
        );
        // Released for another client's waiter (published); released, only
        // our client's waiters marked it (nothing published); gone.
        marked.handle_reply(Reply::to(&again, Ok(Response::Int(answer))), t0 + MS);
        assert_eq!(marked.poll_request(), None);
    }
    marked.poll_hand_over();
    assert_eq!(
        marked.poll_hand_over(),
        Some(HandOver::Answered {
            channels: channels.clone(),
            others_waiting: true,
            unheard: true,
        })
    );
    let report = marked.poll_event().unwrap();
    assert_eq!((report.released(), report.not_held()), (2, 1));
    assert_eq!(report.votes().votes()[2], NodeVote::Missing);

    // A deleting `DELIFEQ`, and any other answer, is followed by nothing.
    assert_eq!(sent[0].follow_up(&native(&sent[0], Response::Int(1))), None);
    let failed = Reply::to(&sent[0], Err(NodeError::new(NodeErrorKind::Timeout, "t")));
    assert_eq!(sent[0].follow_up(&failed), None);
}

/// A release on three nodes: node 0 answers as a script, the others as
/// `DELIFEQ`.
#[test]
fn delifeq_answers_count_as_released_or_not_ours() {
    let t0 = Instant::now();
    let settings = settings(false);
    let mut release = release_of(&settings, Key::from(&b"k"[..]), 1, t0);
    let requests = drain(&mut release);
    let native = |request: &Request, response| {
        Reply::via(request, Call::Native(Native::DelIfEq), Ok(response))
    };
    release.handle_reply(Reply::to(&requests[0], Ok(Response::Int(1))), t0 + MS);
    release.handle_reply(native(&requests[1], Response::Int(1)), t0 + MS);
    // Nothing deleted: the script that follows tells why (gone here).
    let again = requests[2]
        .follow_up(&native(&requests[2], Response::Int(0)))
        .expect("the script after it");
    release.handle_reply(Reply::to(&again, Ok(Response::Int(-1))), t0 + MS);
    let report = release.poll_event().expect("every node answered");
    assert_eq!(
        (report.released(), report.not_held(), report.failed()),
        (2, 1, 0)
    );
    assert_eq!(report.votes().votes()[2], NodeVote::Missing);
    assert_eq!(report.notices_refused(), 0);

    // 2 is the release script's "released, notice refused"; DELIFEQ never
    // says it, nor -1.
    let mut release = release_of(&settings, Key::from(&b"k"[..]), 2, t0);
    let requests = drain(&mut release);
    release.handle_reply(native(&requests[0], Response::Int(2)), t0 + MS);
    release.handle_reply(native(&requests[1], Response::Int(-1)), t0 + MS);
    release.handle_reply(native(&requests[2], Response::Nil), t0 + MS);
    let report = release.poll_event().unwrap();
    assert_eq!(report.failed(), 3);
    assert_eq!(report.notices_refused(), 0);
    for vote in report.votes().votes() {
        assert!(
            matches!(
                vote,
                NodeVote::Failed(NodeError {
                    kind: NodeErrorKind::Protocol,
                    ..
                })
            ),
            "{vote:?}"
        );
    }
}

#[test]
fn set_nx_get_answers_are_votes_and_a_script_answer_is_not() {
    let t0 = Instant::now();
    let mut acquire = acquisition(LockSpec::Exclusive(b"k"), t0);
    let requests = drain(&mut acquire);
    let native =
        |request: &Request, result| Reply::via(request, Call::Native(Native::SetNxGet), result);
    // Node 0: nil, granted. Node 1: the script's yes is garbage from SET.
    // Node 2: a long foreign value, held by another (cut to 64 bytes).
    acquire.handle_reply(native(&requests[0], Ok(Response::Nil)), t0 + MS);
    acquire.handle_reply(native(&requests[1], Ok(Response::Int(1))), t0 + MS);
    acquire.handle_reply(
        native(&requests[2], Ok(Response::Data(vec![b'x'; 500]))),
        t0 + MS,
    );
    let Some(AcquireEvent::Failed(error)) = acquire.poll_event() else {
        panic!("one yes of three is no quorum");
    };
    let votes = error.votes().expect("the votes of the attempt");
    assert_eq!(votes.votes()[0], NodeVote::Granted);
    assert!(matches!(
        &votes.votes()[1],
        NodeVote::Failed(NodeError {
            kind: NodeErrorKind::Protocol,
            ..
        })
    ));
    assert_eq!(
        votes.votes()[2],
        NodeVote::HeldByOther(Some(vec![b'x'; 64]))
    );

    // A nil from a script is no yes either.
    let mut acquire = acquisition(LockSpec::Exclusive(b"k"), t0);
    let requests = drain(&mut acquire);
    for request in &requests {
        acquire.handle_reply(Reply::to(request, Ok(Response::Nil)), t0 + MS);
    }
    assert!(matches!(
        acquire.poll_event(),
        Some(AcquireEvent::Failed(_))
    ));
}

#[test]
fn wrongtype_from_set_is_a_wrong_type_vote() {
    let t0 = Instant::now();
    let mut acquire = acquisition(LockSpec::Exclusive(b"k"), t0);
    let wrong = NodeError::new(
        NodeErrorKind::from_error_code("WRONGTYPE"),
        "WRONGTYPE Operation against a key holding the wrong kind of value",
    );
    for request in drain(&mut acquire) {
        acquire.handle_reply(
            Reply::via(&request, Call::Native(Native::SetNxGet), Err(wrong.clone())),
            t0 + MS,
        );
    }
    let Some(AcquireEvent::Failed(error)) = acquire.poll_event() else {
        panic!("a key of another type everywhere fails the acquire");
    };
    assert!(error.to_string().contains("type"), "{error}");
}

#[test]
fn switched_off_every_request_is_a_script() {
    let settings = Arc::new(
        Config::new(["a", "b", "c"])
            .native_commands(false)
            .release_notices(false)
            .validate()
            .unwrap(),
    );
    let t0 = Instant::now();
    let mut acquire = Acquisition::new(
        Arc::clone(&settings),
        b"k",
        settings.default_ttl(),
        Attempts::Once,
        t0,
        StdRng::seed_from_u64(3),
    );
    let request = drain(&mut acquire).remove(0);
    assert!(!request.native);
    assert_eq!(request.call(&valkey9()), Call::Script(scripts::ACQUIRE));
    let mut release = release_of(&settings, Key::from(&b"k"[..]), 1, t0);
    let request = drain(&mut release).remove(0);
    assert_eq!(request.call(&valkey9()), Call::Script(scripts::RELEASE));
}

#[test]
fn an_exclusive_extend_is_set_ifeq_get_on_valkey_9_and_reads_the_value_found() {
    let t0 = Instant::now();
    let mut acquire = acquisition(LockSpec::Exclusive(b"k"), t0);
    for request in drain(&mut acquire) {
        acquire.handle_reply(Reply::to(&request, Ok(Response::Int(1))), t0);
    }
    let Some(AcquireEvent::Acquired(mut lock)) = acquire.poll_event() else {
        panic!("acquired");
    };
    let ours = lock.value().as_bytes().to_vec();
    let ttl = lock.ttl();
    let mut ext = lock.extend(ttl, t0 + MS).unwrap();
    let requests: Vec<Request> = std::iter::from_fn(|| ext.poll_request()).collect();
    let call = requests[0].call(&valkey9());
    assert_eq!(call, Call::Native(Native::SetIfEqGet));
    assert_eq!(requests[0].call(&redis7()), Call::Script(scripts::EXTEND));
    let words: Vec<Argument<'_>> = Native::SetIfEqGet.words(&requests[0]).to_vec();
    assert_eq!(words[0], Argument::Bytes(b"SET"));
    assert_eq!(words[3], Argument::Bytes(b"IFEQ"));
    assert_eq!(words[4], Argument::Bytes(&ours));
    assert_eq!(words[7], Argument::Bytes(b"GET"));
    // Ours found (extended), another owner's found, nothing found.
    let answers = [
        Response::Data(ours.clone()),
        Response::Data(b"someone else".to_vec()),
        Response::Nil,
    ];
    for (request, answer) in requests.iter().zip(answers) {
        ext.handle_reply(Reply::via(request, call, Ok(answer)), t0 + 2 * MS);
    }
    let Some(Err(error)) = ext.poll_event() else {
        panic!("one confirmation of three is no extension");
    };
    let votes = error.votes().expect("votes");
    assert_eq!(votes.get(requests[0].node), Some(&NodeVote::Granted));
    assert!(matches!(
        votes.get(requests[1].node),
        Some(NodeVote::HeldByOther(_))
    ));
    assert_eq!(votes.get(requests[2].node), Some(&NodeVote::Missing));

    // Ours marked as waited for (`redlock_core::waited`): nothing was set;
    // the extend script goes to that node, once, and its answer counts.
    let mut ext = lock.extend(ttl, t0 + 3 * MS).unwrap();
    let requests: Vec<Request> = std::iter::from_fn(|| ext.poll_request()).collect();
    let marked = [&ours[..], b"\0them"].concat();
    ext.handle_reply(
        Reply::via(&requests[0], call, Ok(Response::Data(marked))),
        t0 + 4 * MS,
    );
    let again = ext.poll_request().expect("the script after it");
    assert_eq!(again.node, requests[0].node);
    assert_eq!(again.call(&valkey9()), Call::Script(scripts::EXTEND));
    ext.handle_reply(Reply::to(&again, Ok(Response::Int(1))), t0 + 4 * MS);
    ext.handle_reply(
        Reply::via(&requests[1], call, Ok(Response::Data(ours.clone()))),
        t0 + 4 * MS,
    );
    assert_eq!(ext.poll_request(), None);
    let Some(Ok(extended)) = ext.poll_event() else {
        panic!("two confirmations of three extend");
    };
    assert_eq!(extended.votes.granted(), 2);
}

/// A waiter's attempt names its client: on Valkey 9, where the holder's
/// release is a plain `DELIFEQ`, it is the acquire script, which marks the
/// holder it finds as waited for; elsewhere it may go plain.
#[test]
fn a_waiters_attempt_is_the_marking_script_where_releases_go_plain() {
    let t0 = Instant::now();
    let mut request = drain(&mut acquisition(LockSpec::Exclusive(b"k"), t0)).remove(0);
    request.client = Some(LockValue::from_string("me"));
    assert_eq!(request.call(&valkey9()), Call::Script(scripts::ACQUIRE));
    for facts in [redis7(), valkey8()] {
        assert_eq!(request.call(&facts), Call::Native(Native::SetNxGet));
    }
    let arguments: Vec<Argument<'_>> = request.arguments().collect();
    assert_eq!(arguments.last(), Some(&Argument::Bytes(b"me")));
}

/// An ACL user may have rights on the lock key but not on the waiters'
/// marks next to it (`~lock:*` against `{lock:x}\0waiters`): the server
/// refuses a release that names them (`NOPERM`, before it runs), and the
/// release goes to that node again without them, once; the script then
/// publishes whenever it deletes our value.
#[test]
fn a_release_refused_for_its_marks_is_sent_again_without_them() {
    let t0 = Instant::now();
    let noperm = || {
        Err(NodeError::new(
            NodeErrorKind::NoPermission,
            "NOPERM this user has no permissions to access one of the keys used as arguments",
        ))
    };
    let mut release = release_of(&settings(true), Key::from(&b"k"[..]), 1, t0);
    let requests = drain(&mut release);
    assert_eq!(requests[0].keys.len(), 3);
    release.handle_reply(Reply::to(&requests[0], noperm()), t0 + MS);
    let again = release.poll_request().expect("sent again");
    assert_eq!(again.node, requests[0].node);
    assert_eq!(again.command, Command::Release);
    assert_eq!(again.keys.len(), 1, "without the marks");
    assert_eq!(
        again.call(&valkey9()),
        Call::Script(scripts::RELEASE_IF_WAITED)
    );
    // Refused again (no rights on the lock key either): the node's answer.
    release.handle_reply(Reply::to(&again, noperm()), t0 + MS);
    assert_eq!(release.poll_request(), None, "once");
    release.handle_reply(Reply::to(&requests[1], Ok(Response::Int(1))), t0 + MS);
    // Another node refuses too: sent again there, to that node.
    release.handle_reply(Reply::to(&requests[2], noperm()), t0 + MS);
    let again = release.poll_request().expect("sent again");
    assert_eq!((again.node, again.keys.len()), (requests[2].node, 1));
    release.handle_reply(Reply::to(&again, Ok(Response::Int(3))), t0 + MS);
    assert_eq!(release.poll_request(), None);
    let report = release.poll_event().expect("every node answered");
    assert_eq!((report.released(), report.failed()), (2, 1), "{report}");
    assert!(
        matches!(&report.votes().votes()[0], NodeVote::Failed(error) if error.kind == NodeErrorKind::NoPermission)
    );

    // Any other request refused is that node's answer: a withdraw names
    // no marks.
    let mut quiet = release_of(&settings(false), Key::from(&b"k"[..]), 1, t0);
    let requests = drain(&mut quiet);
    quiet.handle_reply(Reply::to(&requests[0], noperm()), t0 + MS);
    assert_eq!(quiet.poll_request(), None);
}

/// A failed attempt's withdraws: the script where waiters listen (they may
/// have marked our value, and a plain `DELIFEQ` that deleted nothing would
/// need the script after it: on the nodes where the attempt found another
/// holder, that is every time); `DELIFEQ` where nobody listens.
#[test]
fn withdraws_are_plain_only_where_nobody_listens() {
    let t0 = Instant::now();
    for notices in [true, false] {
        let settings = settings(notices);
        let mut attempt = Acquisition::with_spec(
            Arc::clone(&settings),
            LockSpec::Exclusive(b"k"),
            settings.default_ttl(),
            Attempts::Once,
            t0,
            StdRng::seed_from_u64(7),
        )
        .unwrap();
        let sent = drain(&mut attempt);
        let holder = Response::Data(b"theirs".to_vec());
        attempt.handle_reply(Reply::to(&sent[0], Ok(Response::Int(1))), t0 + MS);
        attempt.handle_reply(Reply::to(&sent[1], Ok(holder.clone())), t0 + MS);
        attempt.handle_reply(Reply::to(&sent[2], Ok(holder)), t0 + MS);
        let withdraws = drain(&mut attempt);
        assert!(!withdraws.is_empty(), "the attempt failed and withdraws");
        for withdraw in &withdraws {
            assert_eq!(withdraw.command, Command::Withdraw);
            let expected = if notices {
                Call::Script(withdraw.script())
            } else {
                Call::Native(Native::DelIfEq)
            };
            assert_eq!(withdraw.call(&valkey9()), expected, "notices {notices}");
        }
    }
}

/// A `DELIFEQ` that deleted nothing, given to the release as the node's
/// answer (by an adapter that does not send the script after it), reads
/// as "not ours there", never as a protocol error.
#[test]
fn a_delifeq_that_deleted_nothing_reads_as_not_ours() {
    let t0 = Instant::now();
    let mut release = release_of(&settings(false), Key::from(&b"k"[..]), 1, t0);
    for request in drain(&mut release) {
        let reply = Reply::via(
            &request,
            Call::Native(Native::DelIfEq),
            Ok(Response::Int(0)),
        );
        release.handle_reply(reply, t0 + MS);
    }
    let report = release.poll_event().expect("decided");
    assert!(
        report
            .votes()
            .votes()
            .iter()
            .all(|vote| matches!(vote, NodeVote::NotOurs | NodeVote::Pending)),
        "{report}"
    );
    assert!(
        report.votes().votes().contains(&NodeVote::NotOurs),
        "{report}"
    );
}
