//! Test harness for real server processes: `redis-server` or `valkey-server`.
//!
//! Redlock's promises are about independent Redis masters that crash, stall
//! and come back, so the integration tests run against real servers and break
//! them on purpose. This crate starts those servers and a few fake ones:
//!
//! - [`RedisNode`]: one server on a free `127.0.0.1` port, with no
//!   persistence and its own data dir. It can be [killed](RedisNode::kill)
//!   (`SIGKILL`), [paused](RedisNode::pause) (`SIGSTOP`) and
//!   [resumed](RedisNode::resume), and [restarted](RedisNode::restart) on the
//!   same port with no data, as a crashed master without persistence would.
//!   It carries a small synchronous client for assertions
//!   ([`get`](RedisNode::get), [`pttl`](RedisNode::pttl),
//!   [`commandstats`](RedisNode::commandstats), ...).
//! - [`RedisCluster`]: N independent nodes started in parallel.
//! - [`ShardedNode`]: one Redlock node that is a whole Redis Cluster of
//!   several masters (no replicas), formed with `CLUSTER ADDSLOTSRANGE` and
//!   `CLUSTER MEET`, for Redis and Valkey alike.
//! - [`GarbageServer`]: answers with bytes that are not RESP.
//! - [`SilentServer`]: accepts connections and never answers.
//! - [`TestCerts`]: a throwaway CA with server and client certificates, for
//!   nodes that also listen for TLS ([`NodeOptions::tls`]).
//!
//! ```
//! use redlock_tests::RedisCluster;
//!
//! let cluster = RedisCluster::start(3);
//! cluster.node(0).set("resource", "value");
//! assert_eq!(cluster.node(0).get("resource").as_deref(), Some(&b"value"[..]));
//!
//! // A crashed master without persistence comes back empty, on the same port.
//! let port = cluster.node(0).port();
//! cluster.node(0).restart();
//! assert_eq!(cluster.node(0).port(), port);
//! assert!(!cluster.node(0).exists("resource"));
//! ```
//!
//! # The chaos suite
//!
//! [`chaos`] runs worker **processes** against masters that are killed,
//! paused, partitioned, slowed down, restarted empty and clock-jumped, and
//! checks every hold they recorded for overlaps (`make chaos`; `make test`
//! runs a shorter schedule). The `chaos` and `chaos-worker` binaries of this
//! crate are its entry points; `scripts/chaos.sh` adds the compose part.
//!
//! # The marketplace
//!
//! [`market`] is the workload of `make bench-market` and of the marketplace
//! example and test: the data layout of "Redis in Action"'s game market on
//! one server, and the audit a run must pass (money conserved, no item sold
//! twice, every item in one place, no lock key left).
//!
//! # The heartbeat
//!
//! [`heartbeat::Heartbeat`] records how late a 10 ms timer on a runtime
//! ran, and the longest one of its workers stayed in one stretch of polls:
//! a blocking call on a worker shows whole in the second, and in the first
//! where it froze the whole runtime (`make demo`, bench (k)).
//!
//! # Requirements
//!
//! `redis-server` on `PATH`, or the server named by `$REDLOCK_SERVER_BIN`
//! ([`SERVER_BIN_ENV`]; the older `$REDIS_SERVER_BIN` still works), and
//! `openssl` for [`TestCerts`]. Every node of a test process runs that one
//! binary, Redis or Valkey; [`server()`] tells which, and whether it was
//! built with TLS (tests that need TLS say why they do not run without it).
//! `make test` runs `scripts/ensure-deps.sh`, which installs Redis on Debian
//! when missing, and `scripts/ensure-valkey.sh`, which installs Valkey, then
//! runs the real-server tests on both.
//!
//! # Cleanup
//!
//! Servers are killed and their data dirs removed when their handle is
//! dropped, including while a test panics. A test process that is itself
//! killed (for example by nextest's timeout) cannot run its `Drop`s, so:
//!
//! - every data dir, `<harness_root>/<test pid>-<n>/`, holds a `redis.pid`
//!   file and is the server's working directory;
//! - the first server started by a later test process kills the servers of
//!   data dirs whose test process is gone;
//! - `make test` finishes with `scripts/kill-harness-redis.sh`, which kills
//!   any `redis-server` or `valkey-server` whose working directory is under
//!   the harness root.
//!
//! Only processes named `redis-server` or `valkey-server` (or as the
//! configured binary) whose working directory is a harness data dir are ever
//! signalled; other servers on the machine are left alone. See [`harness_root`] for where the root is.

pub mod chaos;
mod harness;
pub mod heartbeat;
pub mod market;
// The client sim needs redlock-tokio's `planted-bugs` (and `simulation`) and
// Tokio's `test-util`.
#[cfg(feature = "test-only")]
pub mod sim;

pub use harness::{
    CLIENT_TIMEOUT, CLUSTER_READY_TIMEOUT, GARBAGE_REPLY, GarbageServer, HARNESS_DIR_ENV,
    NodeOptions, REDIS_SERVER_ENV, RedisCluster, RedisNode, SERVER_BIN_ENV, STARTUP_TIMEOUT,
    Server, ServerKind, ShardedNode, SilentServer, TestCerts, TlsOptions, harness_root, server,
};
