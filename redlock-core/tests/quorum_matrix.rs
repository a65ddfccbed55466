//! For every subset of N nodes pre-held by another value (N = 1, 3, 5), an
//! acquire succeeds exactly when the free nodes reach the quorum, and it never
//! touches the other holder's keys.

mod sim;

use redlock_core::Machine;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::StdRng;
use redlock_core::{
    AcquireError, AcquireEvent, Acquisition, Attempts, Command, NodeVote, Reply, Request, Response,
    quorum,
};

#[test]
fn every_subset_of_held_nodes() {
    for n in [1usize, 3, 5] {
        let settings = sim::settings(n, Duration::from_secs(1), Duration::from_millis(20));
        for held_mask in 0u32..(1 << n) {
            let held = |node: usize| held_mask & (1 << node) != 0;
            let free = (0..n).filter(|&i| !held(i)).count();
            let t0 = Instant::now();
            let mut acquire = Acquisition::new(
                Arc::clone(&settings),
                b"matrix",
                settings.default_ttl(),
                Attempts::Once,
                t0,
                StdRng::seed_from_u64(u64::from(held_mask)),
            );
            let requests: Vec<Request> = std::iter::from_fn(|| acquire.poll_request()).collect();
            assert_eq!(requests.len(), n);
            let now = t0 + Duration::from_millis(3);
            for request in &requests {
                let answer = if held(request.node.0) {
                    Response::Data(b"someone-else".to_vec())
                } else {
                    Response::Int(1)
                };
                acquire.handle_reply(Reply::to(request, Ok(answer)), now);
            }
            let event = acquire.poll_event().expect("all nodes answered: decided");
            let releases: Vec<Request> = std::iter::from_fn(|| acquire.poll_request()).collect();
            if free >= quorum(n) {
                let AcquireEvent::Acquired(lock) = event else {
                    panic!("n={n} held={held_mask:b}: expected the lock, got {event:?}");
                };
                assert!(lock.votes().granted() >= quorum(n));
                assert!(releases.is_empty(), "a won lock releases nothing");
            } else {
                let AcquireEvent::Failed(error) = event else {
                    panic!("n={n} held={held_mask:b}: expected a failure, got {event:?}");
                };
                assert!(
                    matches!(error, AcquireError::Held { .. }),
                    "n={n} held={held_mask:b}: {error}"
                );
                assert!(error.is_held_by_other());
                let holders: Vec<_> = error.votes().unwrap().holders().map(String::from).collect();
                let expected: Vec<_> = (0..n)
                    .filter(|&i| held(i))
                    .map(|i| format!("sim-{i}"))
                    .collect();
                // Decided as soon as a quorum was impossible: the holders named
                // are held nodes, enough of them to rule out a quorum.
                assert!(holders.iter().all(|h| expected.contains(h)), "{holders:?}");
                assert_eq!(holders.len(), n - quorum(n) + 1);
                // Release goes to every node, but with our value: the release
                // script compares values, so the other holder's keys survive.
                assert_eq!(releases.len(), n);
                assert!(releases.iter().all(
                    |r| r.command == Command::Withdraw && r.value.as_bytes() != b"someone-else"
                ));
            }
        }
    }
}

#[test]
fn decision_comes_as_soon_as_it_is_certain() {
    // 5 nodes: after 3 yes votes the lock is ours without waiting for the rest;
    // after 3 no votes it is lost without waiting either.
    let settings = sim::settings(5, Duration::from_secs(1), Duration::from_millis(20));
    for (answers, won) in [([1, 1, 1], true), ([0, 0, 0], false)] {
        let t0 = Instant::now();
        let mut acquire = Acquisition::new(
            settings.clone(),
            b"early",
            settings.default_ttl(),
            Attempts::Once,
            t0,
            StdRng::seed_from_u64(9),
        );
        let requests: Vec<Request> = std::iter::from_fn(|| acquire.poll_request()).collect();
        for (i, answer) in answers.iter().enumerate() {
            assert!(acquire.poll_event().is_none(), "decided too early");
            let response = if *answer == 1 {
                Response::Int(1)
            } else {
                Response::Data(b"other".to_vec())
            };
            acquire.handle_reply(Reply::to(&requests[i], Ok(response)), t0);
        }
        let event = acquire.poll_event().expect("three votes decide among five");
        assert_eq!(matches!(event, AcquireEvent::Acquired(_)), won);
        if let AcquireEvent::Failed(error) = event {
            let votes = error.votes().unwrap();
            assert_eq!(votes.votes()[3], NodeVote::Pending);
        }
    }
}

mod decision_properties {
    use super::*;
    use proptest::prelude::*;
    use redlock_core::{NodeError, NodeErrorKind};

    fn answer(kind: u8) -> Result<Response, NodeError> {
        match kind {
            0 => Ok(Response::Int(1)),
            1 => Ok(Response::Data(b"other".to_vec())),
            2 => Err(NodeError::new(NodeErrorKind::Connection, "refused")),
            _ => Ok(Response::Other("garbage".into())),
        }
    }

    proptest! {
        /// Whatever the answers and their order: the lock is granted exactly
        /// when a quorum said yes before the timeout, and a failure always
        /// queues a release for every node.
        #[test]
        fn granted_iff_quorum_of_yes(
            n in prop::sample::select(vec![1usize, 3, 5, 7]),
            kinds in prop::collection::vec(0u8..4, 7),
            order in Just(()).prop_perturb(|_, mut rng| {
                let mut idx: Vec<usize> = (0..7).collect();
                for i in (1..idx.len()).rev() {
                    idx.swap(i, (rng.next_u32() as usize) % (i + 1));
                }
                idx
            }),
            answered in 0usize..=7,
        ) {
            let settings = sim::settings(n, Duration::from_secs(1), Duration::from_millis(20));
            let t0 = Instant::now();
            let mut acquire = Acquisition::new(
                settings.clone(), b"prop", settings.default_ttl(), Attempts::Once, t0, StdRng::seed_from_u64(3),
            );
            let requests: Vec<Request> = std::iter::from_fn(|| acquire.poll_request()).collect();
            let order: Vec<usize> = order.into_iter().filter(|&i| i < n).collect();
            let mut yes = 0;
            let mut event = None;
            for &i in order.iter().take(answered) {
                if kinds[i] == 0 {
                    yes += 1;
                }
                acquire.handle_reply(Reply::to(&requests[i], answer(kinds[i])), t0 + Duration::from_millis(1));
                event = acquire.poll_event();
                if event.is_some() {
                    break;
                }
            }
            if event.is_none() {
                // Nodes that did not answer time out.
                acquire.handle_timeout(t0 + Duration::from_millis(20));
                event = acquire.poll_event();
            }
            let releases: Vec<Request> = std::iter::from_fn(|| acquire.poll_request()).collect();
            match event {
                Some(AcquireEvent::Acquired(lock)) => {
                    prop_assert!(yes >= quorum(n));
                    prop_assert!(lock.votes().granted() >= quorum(n));
                    prop_assert!(releases.is_empty());
                }
                Some(AcquireEvent::Failed(_)) => {
                    prop_assert!(yes < quorum(n));
                    prop_assert_eq!(releases.len(), n);
                    prop_assert!(releases.iter().all(|r| r.command == Command::Withdraw));
                }
                other => prop_assert!(false, "no decision: {:?}", other),
            }
            prop_assert!(acquire.is_done());
        }
    }
}
