//! One lock's commands take effect on each node in the order they were
//! issued: an acquire refused with NOSCRIPT is not sent again behind a
//! later release, and a failed attempt's withdraw reaches every node before the
//! next attempt.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redlock_core::scripts;
use redlock_tests::{RedisCluster, RedisNode};
use redlock_tokio::Wait;
use support::{QUICK, builder, eventually, subscribers};

/// Long enough that a paused node's requests are still wanted when it
/// resumes, whatever the machine's load.
const NODE_TIMEOUT: Duration = Duration::from_secs(3);

/// An acquire that node 0 holds unanswered is followed there by the
/// release of the lock it won on nodes 1 and 2; node 0 then answers the
/// acquire `NOSCRIPT` (its script cache was flushed). Sent again now, the
/// acquire would run after the release and set the key again, held by
/// nobody for a whole TTL; it is not. (An extend sent again that way would
/// do nothing: it only extends our value where it still is.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_refused_with_noscript_is_not_sent_again_behind_its_release() {
    let cluster = RedisCluster::start(3);
    let redlock = builder(&cluster)
        .node_timeout(NODE_TIMEOUT)
        .ttl(Duration::from_secs(30))
        .build()
        .await
        .unwrap();
    // Node 0 forgets every script but the releases' and stops answering:
    // the fenced acquire (always a script) and the release queue up there
    // in that order.
    let node = cluster.node(0);
    node.command(["SCRIPT", "FLUSH"]);
    node.command(["SCRIPT", "LOAD", scripts::RELEASE]);
    node.command(["SCRIPT", "LOAD", scripts::RELEASE_IF_WAITED]);
    node.pause();
    let guard = redlock.lock("ordered").fencing().await.unwrap();
    let release = tokio::spawn(std::future::IntoFuture::into_future(
        guard.release().every_node(),
    ));
    eventually("nodes 1 and 2 released", QUICK, || {
        cluster.nodes()[1..]
            .iter()
            .all(|node| !node.exists("ordered"))
    })
    .await;
    // Node 0 now refuses the acquire (NOSCRIPT) and runs the release.
    node.resume();
    let report = release.await.unwrap();
    assert!(report.is_complete(), "{report}");
    // Every request of the client has ended.
    redlock.shutdown().await;

    assert!(
        !node.exists("ordered"),
        "the acquire was sent again after the release: the key is back for {} ms",
        node.pttl("ordered")
    );
}

#[test]
fn a_withdraw_reaches_each_node_before_the_next_round() {
    let cluster = Arc::new(RedisCluster::start(3));
    // Another client holds the lock on node 0 only; node 2 does not answer:
    // every attempt gets node 1 alone and fails after the node timeout.
    cluster
        .node(0)
        .command(["SET", "contended", "someone else", "PX", "60000"]);
    let monitor = Monitor::start(cluster.node(1));
    // An attempt is a plain SET where the server has `SET NX PX GET`, but a
    // waiter's (from its second attempt on) is the script where the server
    // has `DELIFEQ` too: it marks the holder it finds
    // (`redlock_core::waited`). With notices on, a withdraw is the script.
    let script = |source: &str| redis::Script::new(source).get_hash().to_owned();
    let attempt_calls = vec![script(scripts::ACQUIRE), "SET".to_owned()];
    let withdraw = script(scripts::RELEASE);

    // The waiting client runs on a current-thread runtime, where a task
    // spawned to send the withdraw runs only after the next attempt went
    // out.
    let waiter = {
        let cluster = Arc::clone(&cluster);
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let redlock = builder(&cluster)
                    .node_timeout(Duration::from_secs(1))
                    .wait(Wait::Retries(20))
                    .retry_delay(Duration::from_millis(300))
                    .retry_jitter(Duration::ZERO)
                    .build()
                    .await
                    .unwrap();
                cluster.node(2).pause();
                let guard = redlock.lock("contended").await;
                drop(guard);
                redlock.shutdown().await;
            });
        })
    };

    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        // Once the waiter listens for releases, the attempt in flight after
        // that hears one: when it fails, the next attempt starts at once.
        eventually("the waiter listens for releases", QUICK * 4, || {
            cluster.nodes()[..2]
                .iter()
                .all(|node| subscribers(node, "contended") == 1)
        })
        .await;
        let seen = monitor.acquires(&attempt_calls);
        eventually("the next attempt is in flight", QUICK * 4, || {
            monitor.acquires(&attempt_calls) > seen
        })
        .await;
        for node in &cluster.nodes()[..2] {
            node.command([&b"PUBLISH"[..], b"contended\0released", b"1"]);
        }
        let in_flight = monitor.acquires(&attempt_calls);
        eventually("the attempt after the notice", QUICK * 4, || {
            monitor.acquires(&attempt_calls) > in_flight
        })
        .await;
    });
    cluster.node(2).resume();
    waiter.join().unwrap();

    let calls = monitor.script_calls();
    let acquires: Vec<usize> = calls
        .iter()
        .enumerate()
        .filter(|(_, call)| attempt_calls.contains(call))
        .map(|(at, _)| at)
        .collect();
    assert!(acquires.len() >= 3, "{calls:?}");
    // Each attempt took node 1 (nobody else holds it there), so each
    // failed one withdraws there before the next (a waiter's mark may be
    // sent between them too, which is no withdraw).
    for pair in acquires.windows(2) {
        assert!(
            calls[pair[0] + 1..pair[1]].contains(&withdraw),
            "an attempt reached node 1 before the previous attempt's withdraw: {calls:?}"
        );
    }
}

/// The calls of clients a node runs, in its order (`MONITOR`): a script's
/// SHA1, or the name of a plain command; the commands scripts run are
/// left out.
struct Monitor {
    calls: Arc<Mutex<Vec<String>>>,
    stream: TcpStream,
}

impl Monitor {
    fn start(node: &RedisNode) -> Self {
        let mut stream = TcpStream::connect(("127.0.0.1", node.port())).unwrap();
        stream.write_all(b"MONITOR\r\n").unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        assert_eq!(line.trim_end(), "+OK");
        let calls = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&calls);
        std::thread::spawn(move || {
            for line in reader.lines() {
                let Ok(line) = line else { return };
                // +<time> [<db> <client>] "EVALSHA" "<sha>" ...; a
                // script's own commands come from the client `lua`.
                if line.contains(" lua] ") {
                    continue;
                }
                let mut words = line.split('"').skip(1).step_by(2);
                match words.next() {
                    Some("EVALSHA") => {
                        if let Some(sha) = words.next() {
                            sink.lock().unwrap().push(sha.to_owned());
                        }
                    }
                    Some(command @ ("SET" | "DELIFEQ")) => {
                        sink.lock().unwrap().push(command.to_owned());
                    }
                    _ => {}
                }
            }
        });
        Self { calls, stream }
    }

    fn script_calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }

    /// How many calls so far are one of `calls`.
    fn acquires(&self, calls: &[String]) -> usize {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|call| calls.contains(call))
            .count()
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}
