//! The per-node order (rule 1 of [`send`]) without a real server: our own
//! connection over an in-memory stream to a node of the test kit that is
//! paused (it stops reading), so what is queued on it piles up.
//! Requests are emitted as a client does (each acquire, then the release
//! that undoes it) and then polled by their owners in the worst order; the
//! node must still read every acquire before its release. Deterministic:
//! one thread.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::future::join_all;
use redlock_core::{Command, Config, Key, LockValue, Machine, Release, Request, RoundId};
use redlock_testkit::{Quorum, Tap};

use super::send;
use crate::node::{Node, Plain};

/// Every command the node ran, by its words, in order.
#[derive(Default)]
struct Commands(Mutex<Vec<Vec<Vec<u8>>>>);

impl Tap for Commands {
    fn command(&self, _: usize, _: f64, _: bool, words: &[Vec<u8>], _: &[u8]) {
        self.0.lock().unwrap().push(words.to_vec());
    }

    fn note(&self, _: String) {}

    fn notice(&self) {}
}

/// How many keys the server saw released before they were acquired, when
/// the connection lets `room` batches wait at most (none: no bound, as a
/// client's own connection) and the driver sends
/// `batch` resources' requests in one flight (a pipeline when more than
/// one), or, `tagged`, straight onto the connection
/// ([`Node::send_tagged`]), whose wire then hands out every answer.
async fn reordered(room: Option<usize>, batch: usize, tagged: bool) -> usize {
    let commands = Arc::new(Commands::default());
    let quorum = Quorum::builder()
        .nodes(1)
        .buffers(vec![64])
        .tap(Arc::clone(&commands) as Arc<dyn Tap>)
        .build();
    let node = quorum.node(0);
    let client_end = node.connect().expect("the node accepts");
    let (connection, mut wire) = Plain::new(client_end, room);
    // The answers to tagged requests, counted as the wire hands them out.
    let landed = tokio::spawn(async move {
        let mut landed = 0;
        while futures::StreamExt::next(&mut wire).await.is_some() {
            landed += 1;
            if landed == 128 {
                break;
            }
        }
    });
    let nodes = [Node::over(connection)];
    let mut ids = (0..).map(redlock_core::RequestId);

    let settings = Config::new(["test"]).validate().expect("valid settings");
    let request = |resource: usize, command: Command| -> Request {
        let key = settings.key(format!("k{resource}").as_bytes());
        let value = LockValue::from_string(format!("v{resource}"));
        let mut release = Release::new(
            &settings,
            Key::clone(&key),
            value,
            RoundId(0),
            Instant::now(),
        );
        let mut request = release.poll_request().expect("a release request");
        request.command = command;
        request
    };

    node.pause();
    let mut acquires = Vec::new();
    let mut releases = Vec::new();
    for first in (0..64).step_by(batch) {
        let ttl = settings.default_ttl();
        let resources = first..first + batch;
        let each = |command: Command| -> Vec<Request> {
            resources
                .clone()
                .map(|resource| request(resource, command))
                .collect()
        };
        if tagged {
            for requests in [each(Command::Acquire { ttl }), each(Command::Release)] {
                let names: Vec<_> = ids.by_ref().take(requests.len()).collect();
                assert!(nodes[0].send_tagged(0, 1, &names, &requests));
            }
            continue;
        }
        acquires.push(send(&nodes, each(Command::Acquire { ttl })));
        releases.push(send(&nodes, each(Command::Release)));
    }
    // The releases' owner is polled first, as a task that releases at once
    // can be while the acquires complete in the background.
    let releases = tokio::spawn(join_all(releases));
    let acquires = tokio::spawn(join_all(acquires));
    tokio::task::yield_now().await;
    node.resume();
    releases.await.expect("releases answered");
    acquires.await.expect("acquires answered");
    if tagged {
        landed.await.expect("every tagged request answered");
    }

    let acquire = redis::Script::new(redlock_core::scripts::ACQUIRE);
    let commands = commands.0.lock().unwrap();
    let mut acquired = std::collections::HashSet::new();
    let mut reordered = 0;
    for words in commands.iter().filter(|words| words[0] == b"EVALSHA") {
        let key = words[3].clone();
        if words[1] == acquire.get_hash().as_bytes() {
            acquired.insert(key);
        } else if !acquired.contains(&key) {
            reordered += 1;
        }
    }
    reordered
}

#[tokio::test(flavor = "current_thread")]
async fn order_under_backpressure() {
    assert_eq!(reordered(None, 1, false).await, 0);
}

#[tokio::test(flavor = "current_thread")]
async fn order_under_backpressure_in_pipelines() {
    assert_eq!(reordered(None, 4, false).await, 0);
}

#[tokio::test(flavor = "current_thread")]
async fn order_under_backpressure_sent_straight_onto_the_connection() {
    assert_eq!(reordered(None, 1, true).await, 0);
    assert_eq!(reordered(None, 4, true).await, 0);
}

/// The tests above can see the bug they guard against: with a connection
/// that makes senders wait for room (as the `redis` crate's does, past 50
/// by default), a release is queued when its owner is polled, ahead of its
/// acquire.
#[tokio::test(flavor = "current_thread")]
async fn order_under_backpressure_breaks_with_a_bounded_queue() {
    assert!(reordered(Some(4), 1, false).await > 0);
    assert!(reordered(Some(4), 4, false).await > 0);
}

/// A waker that counts its wakes.
struct Wakes(std::sync::atomic::AtomicUsize);

impl std::task::Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// `next_quietly` polls fresh futures without `FuturesUnordered`'s wake of
/// its owner, and still hears a future that is woken afterwards.
#[test]
fn a_set_polled_quietly_wakes_its_owner_only_for_a_woken_future() {
    use futures::StreamExt;
    use futures::stream::FuturesUnordered;
    use std::task::{Context, Poll, Waker};

    let wakes = Arc::new(Wakes(Default::default()));
    let waker = Waker::from(Arc::clone(&wakes));
    let mut cx = Context::from_waker(&waker);
    let count = || wakes.0.load(std::sync::atomic::Ordering::SeqCst);

    // What it avoids: polled plainly, a set of fresh futures wakes its owner.
    let mut plain: FuturesUnordered<_> = (0..2).map(|_| std::future::pending::<()>()).collect();
    assert!(plain.poll_next_unpin(&mut cx).is_pending());
    assert_eq!(count(), 1);

    let (answer, answered) = tokio::sync::oneshot::channel::<u8>();
    let mut set: FuturesUnordered<_> = [
        futures::future::Either::Left(std::future::pending()),
        futures::future::Either::Right(async { answered.await.unwrap_or(0) }),
    ]
    .into_iter()
    .collect();
    assert!(super::next_quietly(&mut set, &mut cx).is_pending());
    assert_eq!(count(), 1, "no wake for nothing");
    answer.send(7).expect("the future waits");
    assert_eq!(count(), 2, "woken by the future that can go on");
    assert_eq!(super::next_quietly(&mut set, &mut cx), Poll::Ready(Some(7)));
}
