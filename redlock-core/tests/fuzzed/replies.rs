//! Fuzzed node replies: whatever a node answers, the core's machines never
//! panic, and no vote says more than the answer did.
//!
//! One input (bytes, read with `arbitrary`) picks a lock kind, whether plain
//! commands may replace scripts and each node's server, then answers the
//! requests of an acquisition, an extension and a release in any order with
//! any reply tree (the documented answers, their neighbours, nested arrays,
//! statuses, errors, replies of other rounds and unknown nodes), and moves
//! time. Checked on every vote the machines report: a yes comes only from an
//! answer the command's contract calls a yes ([`scripts`](redlock_core::scripts),
//! [`Native`]), a "no" only from an answer the contract has, and an answer
//! outside it is a failed vote ([`NodeErrorKind::Protocol`]), never a yes.
//! [`InspectReply::parse`] of any reply is a value or a protocol error.
//!
//! Shared by the `replies` fuzz target (`fuzz/`, nightly) and the stable test
//! `tests/fuzzed_inputs.rs`, which `make test` runs.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arbitrary::{Result, Unstructured};
use rand::SeedableRng;
use rand::rngs::StdRng;
use redlock_core::native::{Call, Native, NodeFacts, Server, Version};
use redlock_core::{
    AcquireEvent, Acquisition, Attempts, Command, Config, InspectReply, LockSpec, Machine,
    NodeError, NodeErrorKind, NodeId, NodeVote, Notice, Reply, Request, Response, RoundId, Votes,
};

/// Runs one input; panics when a property fails.
pub(crate) fn check(data: &[u8]) {
    let mut u = Unstructured::new(data);
    // Running out of input ends a run early; that is not a failure.
    let _ = run(&mut u);
}

/// Every reply fed to a machine, by round and node, to judge its votes.
#[derive(Default)]
struct Log {
    replies: HashMap<(RoundId, NodeId), Vec<Fed>>,
}

struct Fed {
    command: Command,
    native: Option<Native>,
    result: std::result::Result<Response, NodeError>,
    ours: Vec<u8>,
}

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    let response = arbitrary_response(u, b"", 0)?;
    check_inspect(response);

    let nodes = u.int_in_range(1..=5)?;
    let config = Config::new((0..nodes).map(|i| format!("n{i}")))
        .allow_even_nodes(true)
        .native_commands(u.arbitrary()?)
        .release_notices(u.arbitrary()?);
    let settings = Arc::new(config.validate().expect("a valid configuration"));
    let facts = (0..nodes)
        .map(|_| arbitrary_facts(u))
        .collect::<Result<Vec<_>>>()?;
    let resources: [&[u8]; 2] = [b"a", b"b"];
    let spec = match u.int_in_range(0..=5)? {
        0 => LockSpec::Exclusive(b"r"),
        1 => LockSpec::Fenced(b"r"),
        2 => LockSpec::Read(b"r"),
        3 => LockSpec::Write(b"r"),
        4 => LockSpec::Reentrant {
            resource: b"r",
            owner: "owner",
        },
        _ => LockSpec::Multi(&resources),
    };
    let attempts = if u.arbitrary()? {
        Attempts::Once
    } else {
        Attempts::Retry
    };
    let start = Instant::now();
    let mut now = start;
    let rng = StdRng::seed_from_u64(u.arbitrary()?);
    let mut acquire = Acquisition::with_spec(
        settings.clone(),
        spec,
        settings.default_ttl(),
        attempts,
        start,
        rng,
    )
    .expect("a valid lock spec");
    let mut log = Log::default();
    let events = drive(&mut acquire, u, &facts, &mut log, &mut now)?;
    let mut lock = None;
    for event in events {
        match event {
            AcquireEvent::Acquired(acquired) => {
                let votes = acquired.votes();
                check_votes(votes, &log);
                let yes = votes.votes().iter().filter(|vote| is_yes(vote)).count();
                assert!(
                    yes >= settings.quorum(),
                    "acquired on {yes} yes votes of {nodes}: {votes:?}"
                );
                lock = Some(acquired);
            }
            AcquireEvent::AttemptFailed { error, .. } | AcquireEvent::Failed(error) => {
                if let Some(votes) = error.votes() {
                    check_votes(votes, &log);
                }
            }
        }
    }
    let Some(mut lock) = lock else {
        return Ok(());
    };
    if u.arbitrary()?
        && let Ok(mut extension) = lock.extend(lock.ttl(), now)
    {
        for event in drive(&mut extension, u, &facts, &mut log, &mut now)? {
            match event {
                Ok(extended) => {
                    check_votes(&extended.votes, &log);
                    lock.apply(&extended);
                }
                Err(error) => {
                    if let Some(votes) = error.votes() {
                        check_votes(votes, &log);
                    }
                }
            }
        }
    }
    let mut release = lock.release(now);
    for report in drive(&mut release, u, &facts, &mut log, &mut now)? {
        check_votes(report.votes(), &log);
    }
    Ok(())
}

/// Runs a machine with answers, losses, notices and time chosen by `u`,
/// for a bounded number of steps; returns its events.
fn drive<M: Machine>(
    machine: &mut M,
    u: &mut Unstructured<'_>,
    facts: &[NodeFacts],
    log: &mut Log,
    now: &mut Instant,
) -> Result<Vec<M::Event>> {
    let mut events = Vec::new();
    let mut in_flight: Vec<(Request, Call)> = Vec::new();
    for _ in 0..400 {
        while let Some(request) = machine.poll_request() {
            let call = request.call(&facts[request.node.0]);
            if let Call::Native(native) = call {
                // Builds the command's words: must not panic for any
                // request the core chose it for.
                let words = native.words(&request);
                assert!(!words.is_empty());
            }
            in_flight.push((request, call));
        }
        let _ = machine.poll_listen();
        events.extend(std::iter::from_fn(|| machine.poll_event()));
        if machine.is_done() {
            break;
        }
        match u.int_in_range(0..=7)? {
            0..=4 if !in_flight.is_empty() => {
                let (request, call) = in_flight.swap_remove(u.choose_index(in_flight.len())?);
                let result = if u.ratio(1, 8)? {
                    Err(NodeError::new(arbitrary_kind(u)?, "fuzzed"))
                } else {
                    Ok(arbitrary_response(u, request.value.as_bytes(), 0)?)
                };
                let mut reply = Reply::via(&request, call, result);
                if u.ratio(1, 16)? {
                    reply.round = RoundId(u.arbitrary()?);
                }
                if u.ratio(1, 16)? {
                    reply.node = NodeId(usize::from(u.arbitrary::<u8>()?));
                }
                log.replies
                    .entry((reply.round, reply.node))
                    .or_default()
                    .push(Fed {
                        command: request.command,
                        native: reply.native,
                        result: reply.result.clone(),
                        ours: request.value.as_bytes().to_vec(),
                    });
                if u.ratio(1, 8)? {
                    *now += Duration::from_millis(u.int_in_range(0..=30)?);
                }
                machine.handle_reply(reply, *now);
            }
            5 => {
                let notice = if u.arbitrary()? {
                    Notice::Released(NodeId(usize::from(u.arbitrary::<u8>()?)))
                } else {
                    Notice::Subscribed
                };
                machine.handle_notice(notice, *now);
            }
            6 => {
                *now += Duration::from_millis(u.int_in_range(0..=30)?);
                machine.handle_timeout(*now);
            }
            _ => {
                // Nothing more to answer, or input ran out: time moves to
                // the next timer, so every run ends.
                if let Some(at) = machine.poll_timeout() {
                    *now = (*now).max(at);
                }
                machine.handle_timeout(*now);
            }
        }
    }
    Ok(events)
}

/// Documented answers, their neighbours, and anything else.
fn arbitrary_response(u: &mut Unstructured<'_>, ours: &[u8], depth: u32) -> Result<Response> {
    Ok(match u.int_in_range(0..=10)? {
        0 => Response::Int(u.int_in_range(-2..=3)?),
        1 => Response::Int(u.arbitrary()?),
        2 => Response::Data(ours.to_vec()),
        3 => Response::Data(u.arbitrary()?),
        4 => Response::Data(u.arbitrary::<i64>()?.to_string().into_bytes()),
        5 => Response::Nil,
        6 if depth < 4 => {
            let len = u.int_in_range(0..=4)?;
            Response::Array(
                (0..len)
                    .map(|_| arbitrary_response(u, ours, depth + 1))
                    .collect::<Result<_>>()?,
            )
        }
        // The fenced acquire's shape, with any values.
        7 => Response::Array(vec![
            Response::Int(u.int_in_range(-1..=2)?),
            Response::Int(u.int_in_range(-2..=i64::MAX)?),
        ]),
        // The inspect script's shape, with any values.
        8 => Response::Array(vec![
            if u.arbitrary()? {
                Response::Nil
            } else {
                Response::Data(u.arbitrary()?)
            },
            Response::Int(u.int_in_range(-3..=100_000)?),
            arbitrary_response(u, ours, depth + 1)?,
        ]),
        9 => Response::Other(u.arbitrary()?),
        _ => Response::Int(1),
    })
}

fn arbitrary_kind(u: &mut Unstructured<'_>) -> Result<NodeErrorKind> {
    Ok(*u.choose(&[
        NodeErrorKind::Timeout,
        NodeErrorKind::Connection,
        NodeErrorKind::Auth,
        NodeErrorKind::WrongType,
        NodeErrorKind::Server,
        NodeErrorKind::Protocol,
        NodeErrorKind::Tls,
    ])?)
}

fn arbitrary_facts(u: &mut Unstructured<'_>) -> Result<NodeFacts> {
    let server = *u.choose(&[Server::Redis, Server::Valkey, Server::Unknown])?;
    if server == Server::Unknown {
        return Ok(NodeFacts::default());
    }
    let version = Version(
        u.int_in_range(5..=10)?,
        u.int_in_range(0..=4)?,
        u.arbitrary()?,
    );
    Ok(NodeFacts::new(server, version))
}

/// The inspect script's reply reader: a value, or a protocol error.
fn check_inspect(response: Response) {
    let shape_ok = matches!(&response, Response::Array(items) if items.len() == 3);
    match InspectReply::parse(response) {
        Ok(_) => assert!(shape_ok, "an inspect reply read from a non-triple"),
        Err(error) => assert_eq!(error.kind, NodeErrorKind::Protocol, "{error}"),
    }
}

fn is_yes(vote: &NodeVote) -> bool {
    matches!(vote, NodeVote::Granted | NodeVote::Restored)
}

/// Whether the contract of `command` (sent as its script, or as `native`)
/// calls this answer a yes.
fn yes_answer(fed: &Fed) -> bool {
    let Ok(response) = &fed.result else {
        return false;
    };
    use Command::*;
    match (fed.native, fed.command, response) {
        (None, Acquire { .. } | StoreToken { .. } | Extend { .. }, Response::Int(1)) => true,
        (None, Restore { .. }, Response::Int(1 | 2)) => true,
        (None, AcquireFenced { .. }, Response::Array(items)) => {
            matches!(items.as_slice(), [Response::Int(1), Response::Int(c)] if *c >= 0)
        }
        // 2: released, the notice refused.
        (None, Release | Withdraw, Response::Int(1 | 2)) => true,
        // 3: released, another client's waiter may be marked (a release).
        (None, Release, Response::Int(3)) => true,
        (Some(Native::SetNxGet), Acquire { .. }, Response::Nil) => true,
        (Some(Native::DelIfEq), Release | Withdraw, Response::Int(1)) => true,
        (Some(Native::SetIfEqGet), Extend { .. }, Response::Data(held)) => *held == fed.ours,
        _ => false,
    }
}

/// Whether the contract has this answer at all (a yes, or a no of some kind).
fn documented_answer(fed: &Fed) -> bool {
    let Ok(response) = &fed.result else {
        return false;
    };
    use Command::*;
    let no = matches!(
        (fed.native, fed.command, response),
        (
            None,
            Acquire { .. } | AcquireFenced { .. },
            Response::Data(_)
        ) | (
            None,
            StoreToken { .. } | Extend { .. },
            Response::Int(0 | -1)
        ) | (None, Restore { .. }, Response::Int(0))
            | (None, Release | Withdraw, Response::Int(0 | -1))
            | (Some(Native::SetNxGet), Acquire { .. }, Response::Data(_))
            | (Some(Native::DelIfEq), Release | Withdraw, Response::Int(0))
            | (
                Some(Native::SetIfEqGet),
                Extend { .. },
                Response::Data(_) | Response::Nil
            )
    );
    no || yes_answer(fed)
}

/// Every vote is explained by an answer that node gave in that round.
fn check_votes(votes: &Votes, log: &Log) {
    let round = votes.round();
    for (index, vote) in votes.votes().iter().enumerate() {
        let fed = log
            .replies
            .get(&(round, NodeId(index)))
            .map(Vec::as_slice)
            .unwrap_or_default();
        let explained = match vote {
            NodeVote::Pending => true,
            NodeVote::Granted => fed.iter().any(yes_answer),
            NodeVote::Restored => fed.iter().any(|fed| {
                matches!(fed.command, Command::Restore { .. })
                    && fed.native.is_none()
                    && fed.result == Ok(Response::Int(2))
            }),
            NodeVote::HeldByOther(_) | NodeVote::Missing | NodeVote::NotOurs => {
                fed.iter().any(|fed| documented_answer(fed) && !yes_answer(fed))
                    // A native extend's answer is ours or not by its value.
                    || fed.iter().any(documented_answer)
            }
            NodeVote::Failed(error) if error.kind == NodeErrorKind::Protocol => true,
            // A timeout needs no answer; another failure was fed as such.
            NodeVote::Failed(error) if error.kind == NodeErrorKind::Timeout => true,
            NodeVote::Failed(error) => fed
                .iter()
                .any(|fed| fed.result.as_ref().err() == Some(error)),
            _ => true,
        };
        assert!(
            explained,
            "node {index} of round {round:?}: vote {vote:?} not explained by the answers it gave: {:?}",
            fed.iter()
                .map(|fed| (fed.command, fed.native, &fed.result))
                .collect::<Vec<_>>()
        );
    }
}
