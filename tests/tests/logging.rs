//! Logs are quiet by default: the operations of a healthy lock log at DEBUG
//! only, a lost lock is one INFO event an operator can act on, and a server
//! down at build one WARN.

mod support;

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redlock_tests::RedisCluster;
use redlock_tokio::{KeepAlive, Redlock, Wait, WeakPersistence};
use support::NODE_TIMEOUT;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// One captured event: level and message.
type Captured = Arc<Mutex<Vec<(Level, String)>>>;

/// A layer that keeps the level and message of every redlock event.
struct Capture(Captured);

impl<S: Subscriber> Layer<S> for Capture {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        if !event.metadata().target().starts_with("redlock") {
            return;
        }
        let mut message = Message(String::new());
        event.record(&mut message);
        self.0
            .lock()
            .unwrap()
            .push((*event.metadata().level(), message.0));
    }
}

struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

/// Captures the events of this thread while `work` runs on a
/// current-thread runtime (so every task of the client runs here too).
fn capture(work: impl AsyncFnOnce()) -> Vec<(Level, String)> {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::registry().with(Capture(Arc::clone(&captured)));
    let _default = tracing::subscriber::set_default(subscriber);
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(work());
    captured.lock().unwrap().clone()
}

/// Events at INFO, WARN or ERROR.
fn loud(events: &[(Level, String)]) -> Vec<&(Level, String)> {
    events
        .iter()
        .filter(|(level, _)| *level <= Level::INFO)
        .collect()
}

/// The test servers run without AOF: the build says so once per server,
/// at WARN (`Builder::weak_persistence`, default `Warn`); then locking,
/// extending, contention and releasing say nothing at INFO or above.
#[test]
fn lock_extend_and_release_log_nothing_at_info() {
    let cluster = RedisCluster::start(3);
    let events = capture(async || {
        let redlock = Redlock::builder(cluster.urls())
            .node_timeout(NODE_TIMEOUT)
            .build()
            .await
            .unwrap();
        let mut guard = redlock.lock("quiet").await.unwrap();
        guard.extend(Duration::from_secs(10)).await.unwrap();
        // Contention is business as usual too.
        let busy = redlock.lock("quiet").wait(Wait::No).await.unwrap_err();
        assert!(busy.is_held_by_other(), "{busy}");
        let report = guard.release().every_node().await;
        assert_eq!(report.released(), 3, "{report}");
        let total = redlock.lock("quiet").run(async |_| Ok(42)).await.unwrap();
        assert_eq!(total, 42);
    });
    assert!(
        events.iter().any(|(level, _)| *level == Level::DEBUG),
        "the capture works: {events:?}"
    );
    let loud = loud(&events);
    let weak = |event: &(Level, String)| {
        event.0 == Level::WARN && event.1.contains("may lose locks when it restarts")
    };
    let warned = loud.iter().filter(|event| weak(event)).count();
    assert_eq!(warned, 3, "one per server: {loud:?}");
    let rest: Vec<_> = loud.into_iter().filter(|event| !weak(event)).collect();
    assert_eq!(rest, Vec::<&(Level, String)>::new(), "{events:?}");
}

#[test]
fn a_lost_lock_is_one_info_event() {
    let cluster = RedisCluster::start(3);
    let events = capture(async || {
        let redlock = Redlock::builder(cluster.urls())
            .node_timeout(NODE_TIMEOUT)
            // The test servers run without AOF: said at build, not here.
            .weak_persistence(WeakPersistence::Accept)
            .build()
            .await
            .unwrap();
        let kept = redlock
            .lock("lost")
            .ttl(Duration::from_secs(1))
            .keep_alive(KeepAlive::default())
            .await
            .unwrap();
        // Another owner takes the key everywhere: the next extension finds
        // it held by someone else.
        for node in cluster.nodes() {
            node.set("lost", "another-owner");
        }
        let reason = tokio::time::timeout(Duration::from_secs(5), kept.lost())
            .await
            .expect("the loss is signalled");
        assert!(reason.to_string().contains("another owner"), "{reason}");
        let _ = kept.release().every_node().await;
    });
    let loud = loud(&events);
    assert_eq!(loud.len(), 1, "{events:?}");
    assert_eq!(*loud[0], (Level::INFO, "lock lost".to_owned()));
}

/// A user whose key patterns miss the waiters' marks meets `NOPERM` on
/// every release that names them (which is then sent again without them):
/// one WARN per node says so, not one per release. Each release here was
/// waited for by another client (`support::mark_waiting`), so that it
/// names the marks on every server: the release script does, and on
/// Valkey >= 9 the script that follows a `DELIFEQ` that found our value
/// marked (a quiet release there is that `DELIFEQ` alone, naming no mark).
#[test]
fn a_refused_key_is_one_warn_per_node() {
    let cluster = RedisCluster::start(3);
    let urls = support::user_without_marks(&cluster);
    let events = capture(async || {
        let redlock = Redlock::builder(&urls)
            .node_timeout(NODE_TIMEOUT)
            .build()
            .await
            .unwrap();
        for _ in 0..5 {
            let guard = redlock.lock("lock:x").await.unwrap();
            for node in cluster.nodes() {
                support::mark_waiting(node, "lock:x", "another client");
            }
            let report = guard.release().every_node().await;
            assert_eq!((report.released(), report.failed()), (3, 0), "{report}");
            for node in cluster.nodes() {
                assert!(!node.exists("lock:x"), "{node}: the marked lock left");
            }
        }
    });
    let refusals: Vec<_> = events
        .iter()
        .filter(|(level, message)| *level == Level::WARN && message.contains("ACL user"))
        .collect();
    assert_eq!(refusals.len(), 3, "{events:?}");
}

/// A server down when the client is built is one WARN, its node a field (the
/// client then runs one failure closer to losing its quorum).
#[test]
fn a_server_down_at_build_is_one_warn() {
    let cluster = RedisCluster::start(3);
    cluster.node(1).kill();
    let events = capture(async || {
        let redlock = Redlock::builder(cluster.urls())
            .node_timeout(NODE_TIMEOUT)
            .build()
            .await
            .expect("two of three are enough by default");
        assert_eq!(redlock.connected_nodes(), 2);
    });
    let warned: Vec<_> = events
        .iter()
        .filter(|(level, message)| {
            *level == Level::WARN && message.contains("server unreachable at build")
        })
        .collect();
    assert_eq!(warned.len(), 1, "{events:?}");
}
