//! Live resharding under contention: three Redlock nodes that are each a
//! Redis Cluster of three shards; four clients with two tasks each contend
//! for three resources with `lock`, one-attempt locks, fenced locks,
//! kept-alive locks and `run`, while the slots of those resources keep moving
//! between the shards of two of the clusters, sometimes of both at once,
//! as `redis-cli --cluster reshard` moves them (`SETSLOT IMPORTING` and
//! `MIGRATING`, `MIGRATE`, `SETSLOT NODE`), with a pause after each step so
//! that the clients meet every state of a move: `ASK` for keys already
//! gone, `TRYAGAIN` for scripts whose keys are split, `MOVED` from the old
//! owner, stale slot maps on the other shards.
//!
//! Every hold is recorded from the grant to the earlier of its release and
//! the end of the validity its client was last promised, and the chaos
//! checker looks for two holds of one resource that overlap in time. What
//! fails the test:
//!
//! - an overlap;
//! - an acquire that ends in any error but "held by another owner" (every
//!   node is up, so the quorum is: redirections must be followed, not
//!   reported), or a `run` whose lock is lost;
//! - a lock lost without its loss signal: a holder that still believed the
//!   lock valid, with time to spare, whose release found its value on fewer
//!   than a quorum of nodes.
//!
//! Redis or Valkey (`REDLOCK_SERVER_BIN`), real processes on loopback.

mod support;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use redlock_tests::ShardedNode;
use redlock_tests::chaos::checker;
use redlock_tests::chaos::clock::{instant_ns, mono_ns};
use redlock_tests::chaos::record::Hold;
use redlock_tokio::{Error, KeepAlive, Redlock, ReleaseReport, RunError, Wait};
use support::{NODE_TIMEOUT, init_tracing};

/// The lock TTL: short, so that kept-alive locks extend several times
/// during a move.
const TTL: Duration = Duration::from_millis(800);

/// The resources contended for; every move is of one of their slots.
const RESOURCES: [&str; 3] = ["reshard-a", "reshard-b", "reshard-c"];

const CLIENTS: usize = 4;
const TASKS_PER_CLIENT: usize = 2;

/// Slot moves per moving cluster. With the pauses, about 0.5 s each.
const MOVES: usize = 12;

/// The pause after each step of a move.
const STEP_PAUSE: Duration = Duration::from_millis(40);

/// A holder that believes its lock valid for at least this long when it
/// releases must find its value on a quorum: less left, and the keys may
/// expire on the way.
const MARGIN: Duration = Duration::from_millis(150);

/// What the tasks saw.
#[derive(Default)]
struct Log {
    holds: Vec<Hold>,
    /// Acquire errors other than "held by another owner", and lost locks.
    errors: Vec<String>,
    /// Holders that believed the lock valid, yet found it on too few nodes.
    silent_losses: Vec<String>,
    /// Acquire calls that ended held by another owner.
    held: usize,
    /// Holds whose release was judged (validity to spare, no node failed).
    releases_judged: usize,
    /// Keep-alive extensions.
    extensions: u64,
}

type Shared = Arc<Mutex<Log>>;

fn log(shared: &Shared) -> std::sync::MutexGuard<'_, Log> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One hold's record for the checker.
fn hold(client: usize, number: u64, key: &str, granted: u64, until: u64, released: u64) -> Hold {
    Hold {
        worker: client as u32,
        hold: number,
        key: key.to_owned(),
        granted_ns: granted,
        valid_until_ns: until,
        round_started_ns: granted,
        end_ns: released.min(until),
        released_ns: released,
        fencing_token: None,
        keep_alive: false,
        extensions: 0,
        longest_stall_ms: 0.0,
        paused_past_validity: false,
        noticed_loss: None,
        loss: None,
        open: false,
    }
}

/// Judges a release made while the holder believed the lock valid with
/// `left` to spare: the value must have been found (and deleted) on a
/// quorum of nodes. A release with a failed node says nothing.
fn judge_release(shared: &Shared, what: &str, left: Duration, report: &ReleaseReport) {
    if left < MARGIN || report.failed() > 0 {
        return;
    }
    let mut log = log(shared);
    log.releases_judged += 1;
    if report.released() < report.quorum() {
        log.silent_losses.push(format!(
            "{what}: believed valid for {left:?} more, but released on {} node(s): {report}",
            report.released()
        ));
    }
}

/// The ways a task takes a lock.
#[derive(Clone, Copy, Debug)]
enum Way {
    /// `lock` (retries), a short hold, sometimes one `extend`.
    Lock,
    /// `lock(..).wait(Wait::No)` (one attempt).
    TryLock,
    /// `lock(..).fencing()`: a script over the lock key and the fencing
    /// counter, two keys of one slot.
    Fenced,
    /// A kept-alive lock held for 1.25 TTL.
    KeepAlive,
    /// `lock(..).run(..)`, work of 1.25 TTL.
    Run,
}

/// Short holds more often than long ones.
const WAYS: [Way; 9] = [
    Way::Lock,
    Way::Lock,
    Way::Lock,
    Way::TryLock,
    Way::TryLock,
    Way::Fenced,
    Way::Fenced,
    Way::KeepAlive,
    Way::Run,
];

/// The instant the tasks stop taking locks; moved up once the moves are
/// done.
type Stop = Arc<Mutex<Instant>>;

fn running(stop: &Stop) -> bool {
    Instant::now() < *stop.lock().unwrap_or_else(PoisonError::into_inner)
}

async fn contend(client: usize, task: usize, redlock: Redlock, shared: Shared, stop: Stop) {
    let mut rng = StdRng::seed_from_u64((client * TASKS_PER_CLIENT + task) as u64 + 1);
    let mut number = (task as u64) << 32;
    while running(&stop) {
        let key = RESOURCES[rng.random_range(0..RESOURCES.len())];
        let way = WAYS[rng.random_range(0..WAYS.len())];
        number += 1;
        let what = format!("client {client} task {task} {way:?} {key}");
        match way {
            Way::Lock | Way::TryLock | Way::Fenced => {
                let request = redlock.lock(key).ttl(TTL);
                let result = match way {
                    Way::TryLock => request.wait(Wait::No).await,
                    Way::Fenced => request.fencing().await,
                    _ => request.await,
                };
                let granted = mono_ns();
                let Some(mut guard) = granted_or_log(&shared, &what, result) else {
                    continue;
                };
                let work = Duration::from_millis(rng.random_range(5..=60));
                tokio::time::sleep(work / 2).await;
                if rng.random_bool(0.3) {
                    // A failed extension leaves the validity as it was, or
                    // marks the lock lost (no validity left to release in).
                    let _ = guard.extend(TTL).await;
                }
                tokio::time::sleep(work / 2).await;
                let until = instant_ns(guard.valid_until());
                let left = guard.validity();
                let token = guard.fencing_token();
                let released = mono_ns();
                let report = guard.release().every_node().await;
                judge_release(&shared, &what, left, &report);
                let mut hold = hold(client, number, key, granted, until, released);
                hold.fencing_token = token;
                log(&shared).holds.push(hold);
            }
            Way::KeepAlive => {
                let result = redlock
                    .lock(key)
                    .ttl(TTL)
                    .keep_alive(KeepAlive::default())
                    .await;
                let granted = mono_ns();
                let Some(kept) = granted_or_log(&shared, &what, result) else {
                    continue;
                };
                // A lost lock's window is not counted: it ended at the loss.
                let mut until = if kept.is_lost() {
                    granted
                } else {
                    instant_ns(kept.valid_until())
                };
                let end = Instant::now() + TTL * 5 / 4;
                while Instant::now() < end {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    if kept.is_lost() {
                        break;
                    }
                    until = until.max(instant_ns(kept.valid_until()));
                }
                let left = kept.validity();
                let released = mono_ns();
                if let Some(reason) = kept.loss() {
                    log(&shared)
                        .errors
                        .push(format!("{what}: keep-alive lost the lock: {reason}"));
                }
                log(&shared).extensions += kept.extensions();
                let report = kept.release().every_node().await;
                judge_release(&shared, &what, left, &report);
                log(&shared)
                    .holds
                    .push(hold(client, number, key, granted, until, released));
            }
            Way::Run => {
                // (grant, end of the validity last seen, end of the work):
                // kept outside the work, which is dropped if the lock is
                // lost. The work's end is the hold's: `run` releases
                // before it returns.
                let window = Arc::new(Mutex::new(None::<(u64, u64, Option<u64>)>));
                let seen = Arc::clone(&window);
                let result = redlock
                    .lock(key)
                    .run(async move |lock| {
                        let granted = mono_ns();
                        let note = |until: u64, done: Option<u64>| {
                            let mut seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
                            let until = seen.map_or(until, |(_, last, _)| until.max(last));
                            *seen = Some((granted, until, done));
                        };
                        note(granted + nanos(lock.validity()), None);
                        let end = Instant::now() + TTL * 5 / 4;
                        while Instant::now() < end {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            note(mono_ns() + nanos(lock.validity()), None);
                        }
                        let done = mono_ns();
                        note(done, Some(done));
                        Ok(())
                    })
                    .await;
                let returned = mono_ns();
                let window = *window.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some((granted, until, done)) = window {
                    let released = done.unwrap_or(returned);
                    log(&shared)
                        .holds
                        .push(hold(client, number, key, granted, until, released));
                }
                // The work never fails: every error is the lock's.
                let result = result.map_err(|error| match error {
                    RunError::Lock(error) => error,
                    RunError::Work(error) => unreachable!("{error}"),
                });
                granted_or_log(&shared, &what, result);
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..=5))).await;
    }
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// The guard of a granted call; an error is logged (as contention when
/// another owner holds the lock).
fn granted_or_log<T>(shared: &Shared, what: &str, result: Result<T, Error>) -> Option<T> {
    match result {
        Ok(value) => Some(value),
        Err(err) if err.is_held_by_other() => {
            log(shared).held += 1;
            None
        }
        Err(err) => {
            log(shared).errors.push(format!("{what}: {err}"));
            None
        }
    }
}

/// Moves the slots of the resources round the shards of `node`, `MOVES`
/// times, each to the next shard.
fn reshard(node: &ShardedNode, offset: usize) {
    for i in 0..MOVES {
        let key = RESOURCES[(i + offset) % RESOURCES.len()];
        let to = (node.shard_index(key) + 1) % node.shards().len();
        node.move_slot_paced(key, to, STEP_PAUSE);
        std::thread::sleep(STEP_PAUSE);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_stay_exclusive_while_their_slots_move_between_shards() {
    init_tracing();
    let nodes = Arc::new(ShardedNode::start_many(3, 3));
    let urls: Vec<String> = nodes.iter().map(ShardedNode::url).collect();
    let shared: Shared = Arc::default();
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let redlock = Redlock::builder(urls.clone())
            .ttl(TTL)
            .node_timeout(NODE_TIMEOUT)
            // A cluster connection reads the slot map and loads the
            // scripts on every shard: generous on a loaded machine.
            .connect_timeout(Duration::from_secs(10))
            // `lock` waits out a holder of two TTLs: contention must not
            // read as an error.
            .wait(Wait::Retries(400))
            .retry_delay(Duration::from_millis(5))
            .retry_jitter(Duration::from_millis(20))
            .build()
            .await
            .expect("client builds");
        assert_eq!(redlock.connected_nodes(), 3);
        clients.push(redlock);
    }
    let errors_before: Vec<_> = nodes.iter().map(ShardedNode::error_counts).collect();

    // The moves: cluster 0 alone, then clusters 0 and 1 at once, each
    // moving the same resource's slot at the same time (two of the three
    // nodes migrating it together), then cluster 1 alone.
    let started = Instant::now();
    let movers = {
        let nodes = Arc::clone(&nodes);
        tokio::task::spawn_blocking(move || {
            std::thread::sleep(Duration::from_millis(500));
            reshard(&nodes[0], 0);
            std::thread::scope(|scope| {
                scope.spawn(|| reshard(&nodes[0], 1));
                scope.spawn(|| reshard(&nodes[1], 1));
            });
            reshard(&nodes[1], 0);
            std::thread::sleep(Duration::from_millis(500));
        })
    };
    // The contention lasts as long as the moves, however slow the machine;
    // the bound only stops a hung move from hanging the test.
    let stop: Stop = Arc::new(Mutex::new(Instant::now() + Duration::from_secs(90)));
    let mut tasks = Vec::new();
    for (client, redlock) in clients.iter().enumerate() {
        for task in 0..TASKS_PER_CLIENT {
            tasks.push(tokio::spawn(contend(
                client,
                task,
                redlock.clone(),
                Arc::clone(&shared),
                Arc::clone(&stop),
            )));
        }
    }
    movers.await.expect("the moves are done");
    let moving = started.elapsed();
    *stop.lock().unwrap_or_else(PoisonError::into_inner) = Instant::now();
    for task in tasks {
        task.await.expect("a task ends");
    }
    for redlock in &clients {
        redlock.shutdown().await;
    }

    let log = log(&shared);
    let overlaps = checker::overlaps(&log.holds);
    let mut redirections = Vec::new();
    for (i, (node, before)) in nodes.iter().zip(&errors_before).enumerate() {
        let after = node.error_counts();
        let delta: Vec<String> = after
            .iter()
            .map(|(code, n)| (code, n - before.get(code).copied().unwrap_or(0)))
            .filter(|(_, n)| *n > 0)
            .map(|(code, n)| format!("{code}={n}"))
            .collect();
        redirections.push(format!("node {i}: {}", delta.join(" ")));
    }
    println!(
        "resharding: {} slot moves in {:.1} s; {} holds, {} acquires held by another, \
         {} releases judged, {} keep-alive extensions; errors answered by the shards: {}",
        MOVES * 4,
        moving.as_secs_f64(),
        log.holds.len(),
        log.held,
        log.releases_judged,
        log.extensions,
        redirections.join("; ")
    );
    assert!(overlaps.is_empty(), "overlapping holds: {overlaps:#?}");
    // The fencing counters moved with their slots: tokens only go up.
    for key in RESOURCES {
        let mut fenced: Vec<&Hold> = log
            .holds
            .iter()
            .filter(|h| h.key == key && h.fencing_token.is_some())
            .collect();
        fenced.sort_by_key(|h| h.granted_ns);
        for pair in fenced.windows(2) {
            assert!(
                pair[0].fencing_token < pair[1].fencing_token,
                "{key}: token {:?} granted before token {:?}",
                pair[0].fencing_token,
                pair[1].fencing_token
            );
        }
    }
    assert!(log.errors.is_empty(), "errors: {:#?}", log.errors);
    assert!(
        log.silent_losses.is_empty(),
        "locks lost without a signal: {:#?}",
        log.silent_losses
    );
    // The run did what it is for: locks were granted on every resource,
    // and the moving clusters redirected the clients.
    for key in RESOURCES {
        assert!(log.holds.iter().any(|h| h.key == key), "no hold of {key}");
    }
    for node in &nodes[..2] {
        let moved = node.error_counts().get("MOVED").copied().unwrap_or(0);
        assert!(moved > 0, "no MOVED answered by a moving cluster");
    }
}
