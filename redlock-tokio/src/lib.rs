//! Redlock for Tokio: a distributed lock held on a majority of N independent
//! Redis (or Valkey) nodes.
//!
//! For services on several machines that must not do the same work twice:
//! the lock lives on a majority of N nodes, so one dead or paused node
//! does not stop anyone, and every acquire asks all nodes at once and
//! decides as soon as the outcome is certain. The algorithm itself is
//! [`redlock_core`]'s; this crate owns the connections.
//!
//! ```no_run
//! use std::time::Duration;
//! use redlock_tokio::{Redlock, Wait};
//!
//! # async fn demo() -> Result<(), redlock_tokio::Error> {
//! let redlock = Redlock::connect([
//!     "redis://127.0.0.1:7001",
//!     "redis://127.0.0.1:7002",
//!     "redis://127.0.0.1:7003",
//! ])
//! .await?;
//!
//! // Lock, work while validity is left, release.
//! let mut guard = redlock.lock("invoice-42").await?;
//! assert!(guard.validity() > Duration::from_secs(9)); // 10 s TTL by default
//! guard.extend(Duration::from_secs(10)).await?;
//! println!("{}", guard.release().await);
//!
//! // Every option of one lock is a modifier of the same request.
//! let guard = redlock
//!     .lock("ledger")
//!     .ttl(Duration::from_secs(30))
//!     .fencing()
//!     .wait(Wait::AtMost(Duration::from_secs(2)))
//!     .await?;
//! # drop(guard);
//! # Ok(())
//! # }
//! ```
//!
//! # One entry point
//!
//! [`Redlock::lock`] (and [`Redlock::lock_all`] for several resources)
//! returns a [`LockRequest`]: await it for a [`LockGuard`], or
//! [`run`](LockRequest::run) work under it, which keeps the lock alive,
//! cancels the work if the lock is lost and releases it at the end. The
//! work's error type takes this crate's errors (`E: From<Error>`), so one
//! `?` reads the result:
//!
//! ```no_run
//! use redlock_tokio::Redlock;
//!
//! async fn export(fencing_token: Option<u64>) -> std::io::Result<u64> {
//!     # let _ = fencing_token;
//!     Ok(42)
//! }
//!
//! async fn nightly(redlock: &Redlock) -> Result<u64, Box<dyn std::error::Error + Send + Sync>> {
//!     redlock
//!         .lock("nightly-export")
//!         .fencing()
//!         .run(async |lock| Ok(export(lock.fencing_token()).await?))
//!         .await
//! }
//! ```
//!
//! Why this shape: one way to say each thing. The client-wide defaults
//! (TTL, how long to wait, retry delays) live on the [`Builder`]; what one
//! lock may change is a modifier of its request; a lock's kind is chosen
//! once ([`kind`]), so a combination that cannot work (a fenced read lock,
//! a fair multi-resource lock) does not compile. There is one guard type,
//! whether kept alive or not, with one loss signal ([`LockGuard::lost`]).
//! Synchronous programs use the same vocabulary through the
//! `blocking` module (feature `blocking`).
//!
//! # Lock kinds
//!
//! Every kind goes through the same quorum machinery (acquire on a majority,
//! validity, release everywhere after a failure, extend, keep-alive), and
//! every guard is the ordinary [`LockGuard`].
//!
//! ```no_run
//! use std::time::Duration;
//! use redlock_tokio::{Redlock, Wait};
//!
//! # async fn kinds(redlock: Redlock, worker_id: &str) -> Result<(), redlock_tokio::Error> {
//! // Exclusive, with a fencing token: larger than every earlier holder's while
//! // nodes keep their data; the protected resource refuses lower ones.
//! let fenced = redlock.lock("ledger").fencing().await?;
//! let token: u64 = fenced.fencing_token().expect("asked for one");
//! # let _ = token;
//! fenced.release().await;
//!
//! // Read-write: many readers, or one writer; a waiting writer holds off new readers.
//! let reading = redlock.lock("catalog").read().await?;
//! reading.release().await;
//! let writing = redlock.lock("catalog").write().wait(Wait::No).ttl(Duration::from_secs(5)).await?;
//! writing.release().await;
//!
//! // Reentrant: the same owner id enters again; each guard releases its own entry.
//! let outer = redlock.lock("job-42").reentrant(worker_id).await?;
//! let inner = redlock.lock("job-42").reentrant(worker_id).await?;
//! inner.release().await;
//! outer.release().await;
//!
//! // Fair: first come, first served across processes.
//! let fair = redlock.lock("printer").fair().await?;
//! fair.release().await;
//!
//! // Multi-resource: all keys on a node, or none of them.
//! let both = redlock.lock_all(["account:1", "account:2"]).await?;
//! both.release().await;
//! # Ok(()) }
//! ```
//!
//! # When things fail
//!
//! - A node that is down, paused or slow costs at most the per-node
//!   timeout ([`core::Settings::node_timeout`], by default 1% of the TTL,
//!   between 10 and 50 ms), never the TTL; with a majority up, locks go on.
//! - A lock that is not granted is an [`Error::Acquire`] with the core's
//!   [`AcquireError`]: `Held` (another owner), `NoQuorum` (too many nodes
//!   failed), `ValidityExhausted` (a quorum came too late), `WrongType` (the
//!   key is not a lock: not retried), `DeadlineExceeded`. Each carries every
//!   node's vote ([`core::Votes`]), so the message says which node did what.
//!   Whatever the attempt may have set is released on every node first.
//! - Configuration mistakes fail before anything is sent and are never
//!   retried: when the client is built ([`Error::Config`] for no nodes,
//!   even or duplicate nodes, unparsable URLs, a host name that does not
//!   resolve, a zero or huge TTL; [`Error::Auth`]; [`Error::Tls`]), or when
//!   a call starts (a per-call TTL out of bounds, a cross-slot lock on a
//!   cluster node).
//! - A lock lost (its validity ran out; kept alive: another owner, a
//!   release by value, too many nodes silent until validity ran out) fires
//!   the guard's loss signal, and [`LockRequest::run`] cancels the work and
//!   returns [`Error::LockLost`].
//!
//! # Connections, waiting, exit
//!
//! - One multiplexed connection per node, shared by every lock and clone
//!   of [`Redlock`]; scripts are loaded at connect, and the core picks plain
//!   commands where the node's server has them (`INFO server`, read again on
//!   every reconnect). A node that cannot be reached does not fail
//!   [`Builder::build`] (it is reconnected in the background); rejected
//!   credentials ([`Error::Auth`]) and a refused TLS handshake
//!   ([`Error::Tls`]) do. `rediss://` URLs use rustls (feature `tls`);
//!   `redis+cluster://` makes a whole Redis Cluster one node (one vote).
//! - For each key, a node runs the commands in the order the core emitted
//!   them, under any load; a release is never dropped unsent. Every future
//!   is cancel-safe: a dropped acquire releases what its attempt may have
//!   set, a dropped [`LockGuard`] releases in the background, and a guard
//!   alive when `main` returns is released too ([`Redlock::shutdown`] is the
//!   explicit form).
//! - A waiting acquire retries on its timer **or** at a release notice
//!   (pub/sub, one connection per node, opened only when someone waits),
//!   first come, first served inside a client, across clients with
//!   [`LockRequest::fair`]; [`Builder::release_notices`]`(false)` turns it off.
//! - Logs go to [`tracing`](https://docs.rs/tracing), quiet at INFO; the
//!   `metrics` feature reports through the [`metrics`](https://docs.rs/metrics)
//!   facade. Features: `tls` (default), `insecure-tls`, `metrics`, `blocking`.
//!
//! The guide in the repository says each of these in full, one page per
//! topic (`docs/README.md` indexes them): `docs/connecting.md` (nodes, order,
//! cancellation and exit, TLS, Redis and Valkey, features),
//! `docs/cluster.md`, `docs/waiting.md`, `docs/errors.md`,
//! `docs/metrics-and-logs.md` (every metric and its labels),
//! `docs/blocking.md` and `docs/guarantees.md`.
//!
//! # Guarantees and limits
//!
//! While a majority of nodes is up, at most one client holds a lock at any
//! moment, as long as Redlock's assumptions hold (see [`redlock_core`]):
//!
//! - **Bounded clock drift and pauses.** The validity is measured on this
//!   client's monotonic clock; a client paused (GC, swap, SIGSTOP) past its
//!   validity may resume believing it still holds the lock. Check
//!   [`LockGuard::validity`] before each step, keep steps short compared to
//!   the TTL, or use [`LockRequest::run`], which cancels the work the
//!   moment the lock is lost.
//! - **Nodes keep their data.** A node that restarts empty forgets the key;
//!   run Redis with AOF and `appendfsync always`, or keep a crashed node down
//!   for longer than the longest TTL.
//! - **Fencing is the resource's job.** A lock alone cannot stop a holder
//!   that lost it (paused, partitioned) from writing late. Ask for a fencing
//!   token ([`LockRequest::fencing`], [`LockGuard::fencing_token`]: larger
//!   than every earlier holder's while masters keep their data) and have the
//!   protected resource refuse tokens below the highest it has seen; where it
//!   can only compare values, use the lock value ([`LockGuard::value`]).
//! - **Unguessable values.** Each acquisition writes 20 random bytes (hex)
//!   from a CSPRNG (rand's `StdRng`, seeded from its OS-seeded thread-local
//!   generator); only the holder of that value can extend or release.
//! - **Independent masters.** The URLs must point at N independent
//!   masters, not at replicas of one another.
//!
//! Redlock does **not** promise safety when those assumptions break: a
//! client paused past its validity, a master's clock that jumps forward, a
//! master (or a cluster node's promoted replica) that comes back without its
//! keys, can each let two clients hold one lock. The guide's
//! `docs/guarantees.md` gives each case and what to do about it.
#![forbid(unsafe_code)]

mod background;
#[cfg(feature = "blocking")]
pub mod blocking;
mod builder;
mod client;
mod drain;
mod driver;
mod error;
mod guard;
mod inspect;
mod metrics;
mod node;
mod notices;
mod order;
#[cfg(feature = "planted-bugs")]
mod planted;
mod request;
mod server;
#[cfg(feature = "simulation")]
pub mod sim;
#[cfg(not(feature = "simulation"))]
#[allow(unreachable_pub, dead_code)]
mod sim;
#[cfg(feature = "tls")]
mod tls;

pub use builder::Builder;
pub use client::Redlock;
pub use error::Error;
pub use guard::{LockGuard, LossSignal, Releasing};
pub use inspect::NodeInspection;
pub use redlock_core::{
    AcquireError, ConfigError, ExtendError, KeepAlive, LossReason, ReleaseReport,
};
pub use request::{Acquiring, LockRequest, Wait, kind};

/// The core crate: the algorithm, its settings, votes, keys and values.
pub use redlock_core as core;

/// The README's Rust examples, compiled by `cargo test --doc` so that they
/// cannot drift from the API (they are `no_run`: they name masters that do not
/// exist here).
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeExamples;

/// This crate's README example, compiled by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct CrateReadmeExample;

/// The guide's `docs/guarantees.md` examples, compiled by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../../docs/guarantees.md")]
struct GuideGuarantees;

/// The guide's `docs/lock-kinds.md` examples, compiled by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../../docs/lock-kinds.md")]
struct GuideLockKinds;

/// The guide's `docs/semaphore.md` examples, compiled by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../../docs/semaphore.md")]
struct GuideSemaphore;

/// The guide's `docs/waiting.md` examples, compiled by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../../docs/waiting.md")]
struct GuideWaiting;

/// The guide's `docs/errors.md` examples, compiled by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../../docs/errors.md")]
struct GuideErrors;

/// The guide's `docs/connecting.md` examples, compiled by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../../docs/connecting.md")]
struct GuideConnecting;

/// The guide's `docs/cluster.md` examples, compiled by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../../docs/cluster.md")]
struct GuideCluster;

/// The guide's `docs/metrics-and-logs.md` examples, compiled by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../../docs/metrics-and-logs.md")]
struct GuideMetricsAndLogs;

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync_clone<T: Send + Sync + Clone>() {}
    fn assert_send<T: Send>(_: &T) {}

    #[test]
    fn handles_are_send_and_sync() {
        assert_send_sync_clone::<Redlock>();
        assert_send_sync_clone::<Error>();
        assert_send_sync_clone::<LossSignal>();
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<LockGuard>();
    }

    #[allow(dead_code, clippy::diverging_sub_expression, unreachable_code)]
    fn futures_are_send(redlock: Redlock, guard: LockGuard) {
        use std::future::IntoFuture;
        assert_send(&redlock.lock("r").into_future());
        assert_send(
            &redlock
                .lock("r")
                .ttl(std::time::Duration::from_secs(1))
                .wait(Wait::No)
                .into_future(),
        );
        assert_send(&redlock.release_value("r", &core::LockValue::from_string("v")));
        assert_send(&redlock.lock("r").run(async |lock| {
            tokio::task::yield_now().await;
            Ok::<_, Error>(lock.validity())
        }));
        assert_send(&redlock.inspect("r"));
        assert_send(&guard.lost());
        assert_send(&guard.release());
    }

    /// Work under `run` can be spawned: the future is `Send + 'static`.
    #[allow(dead_code)]
    fn run_can_be_spawned(redlock: Redlock) {
        tokio::spawn(async move {
            redlock
                .lock("r")
                .run(async |lock| {
                    tokio::task::yield_now().await;
                    Ok::<_, Error>(lock.fencing_token())
                })
                .await
        });
    }
}

/// The guide's `docs/blocking.md` examples, compiled by `cargo test --doc`
/// (with the `blocking` feature, which they use).
#[cfg(all(doctest, feature = "blocking"))]
#[doc = include_str!("../../docs/blocking.md")]
struct GuideBlocking;
