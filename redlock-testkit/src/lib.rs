//! A Redlock quorum in memory, for testing the code that uses
//! [`redlock_tokio`]: N simulated Redis masters in Tokio's paused time,
//! faults on cue, and a record of every grant and release they saw.
//!
//! The client is the real one ([`Quorum::client`] is a
//! [`redlock_tokio::Builder`]); only its connections are in-memory streams
//! and its randomness is seeded. Each node speaks RESP and answers from a
//! model of every script the client runs (the project checks that model
//! against the real Lua on Redis and Valkey), with keys expiring on the
//! node's own clock. No server, no port, no real sleep: a test of minutes
//! of virtual time runs in milliseconds.
//!
//! ```
//! use std::time::Duration;
//! use redlock_testkit::Quorum;
//!
//! #[tokio::main(flavor = "current_thread", start_paused = true)]
//! async fn main() -> Result<(), redlock_tokio::Error> {
//!     let quorum = Quorum::new(3);
//!     let redlock = quorum.client().ttl(Duration::from_secs(10)).build().await?;
//!
//!     let guard = redlock.lock("nightly-export").await?;
//!     // A minority paused changes nothing...
//!     quorum.node(0).pause();
//!     tokio::time::sleep(Duration::from_secs(5)).await;
//!     assert!(redlock.lock("nightly-export").wait(redlock_tokio::Wait::No).await.is_err());
//!     // ...and what each node holds is there to see.
//!     assert_eq!(quorum.node(1).keys().len(), 1);
//!     guard.release().await;
//!     quorum.node(0).resume();
//!     assert!(quorum.history().overlaps().is_empty());
//!     Ok(())
//! }
//! ```
//!
//! # Virtual time
//!
//! Run every test on a current-thread runtime with paused time,
//! `#[tokio::test(start_paused = true)]` (Tokio's `test-util` feature,
//! which this crate turns on): Tokio's clock then jumps ahead whenever
//! every task waits on a timer, so TTLs, retries and keep-alives cost no
//! real time, and a seed ([`Quorum::builder`]) replays a test exactly.
//! Make the quorum inside the test: its nodes read that clock.
//!
//! # Faults on cue
//!
//! [`Quorum::node`] is a handle on one node: [`pause`](Node::pause) and
//! [`resume`](Node::resume) it (as `SIGSTOP`/`SIGCONT`),
//! [`kill`](Node::kill) it, [`restart`](Node::restart) it with its data
//! or [`restart_empty`](Node::restart_empty), slow it
//! ([`latency`](Node::latency)), lose what it is sent or what it answers
//! ([`drop_requests`](Node::drop_requests),
//! [`drop_replies`](Node::drop_replies)), move its clock ahead
//! ([`step_clock`](Node::step_clock)), make it answer garbage
//! ([`answer_garbage`](Node::answer_garbage)) or refuse every command
//! unauthenticated ([`refuse_auth`](Node::refuse_auth)), or hold another
//! program's data at a lock's name ([`put_hash`](Node::put_hash)). Each is one call,
//! and [`Quorum::at`] runs any of them at a virtual instant.
//!
//! # Observation
//!
//! [`Node::keys`] lists what a node holds now (values, time left, fencing
//! counters); [`Quorum::history`] every grant, extension and release the
//! nodes saw, with its virtual instant, and [`History::overlaps`] checks
//! that no two holders held one key at once. [`overlaps`] and
//! [`stale_writes`] run the same checks on holds and fenced writes a test
//! records itself.
//!
//! # Limits
//!
//! - The blocking client (`redlock_tokio::blocking`, from
//!   `quorum.client().build_blocking()` in a plain `#[test]`) runs over the
//!   nodes in **real time**: it drives its own runtime on a thread of its
//!   own, whose clock is not a test's paused clock. Give it short TTLs; the
//!   faults are the same calls, made from the test's thread ([`Quorum::at`]
//!   needs a runtime).
//! - One model of Redis: the scripts, `SET NX PX GET`, Valkey's `DELIFEQ`
//!   and `SET IFEQ` ([`QuorumBuilder::valkey`]), pub/sub for release
//!   notices; no other command, no Redis Cluster, no TLS, no ACL users.
#![forbid(unsafe_code)]

mod history;
#[cfg(feature = "quorum")]
#[allow(dead_code, unreachable_pub, missing_docs)]
mod model;
#[cfg(feature = "planted-divergence")]
mod planted;
#[cfg(feature = "quorum")]
mod quorum;
#[cfg(feature = "quorum")]
mod resp;
#[cfg(feature = "quorum")]
mod server;

pub use history::{Event, EventKind, FencedWrite, History, Hold, Overlap, overlaps, stale_writes};
#[cfg(feature = "planted-divergence")]
#[doc(hidden)]
pub use planted::plant_release_ignoring_value;
#[cfg(feature = "quorum")]
pub use quorum::{Node, NodeKey, Quorum, QuorumBuilder};
#[cfg(feature = "quorum")]
#[doc(hidden)]
pub use server::Tap;
