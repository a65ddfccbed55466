//! For every subset of N nodes pre-held by another value (N = 1, 3, 5), an
//! acquire succeeds exactly when the free nodes reach the quorum, and it never
//! touches the other holder's keys.

mod sim;

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
                    |r| r.command == Command::Release && r.value.as_bytes() != b"someone-else"
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
