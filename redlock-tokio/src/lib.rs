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
//! work fails with any error ([`BoxError`]: no type to name), and the result
//! is a [`RunError`], the lock's or the work's, so one `?` reads it:
//!
//! ```no_run
//! use redlock_tokio::Redlock;
//!
//! async fn export(fencing_token: Option<u64>) -> std::io::Result<u64> {
//!     # let _ = fencing_token;
//!     Ok(42)
//! }
//!
//! async fn nightly(redlock: &Redlock) -> Result<u64, Box<dyn std::error::Error>> {
//!     let rows = redlock
//!         .lock("nightly-export")
//!         .fencing()
//!         .run(async |lock| Ok(export(lock.fencing_token()).await?))
//!         .await?;
//!     Ok(rows)
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
//! every guard is the ordinary [`LockGuard`]: exclusive (the default), with
//! a fencing token ([`LockRequest::fencing`]), read-write
//! ([`LockRequest::read`], [`LockRequest::write`]), reentrant
//! ([`LockRequest::reentrant`]), fair across processes
//! ([`LockRequest::fair`]) and multi-resource ([`Redlock::lock_all`]). The
//! guide's `docs/lock-kinds.md` shows each.
//!
//! # When things fail
//!
//! A node down, paused or slow costs at most the per-node timeout
//! ([`core::Settings::node_timeout`]), never the TTL. A lock not granted is
//! an [`Error::Acquire`] carrying every node's vote ([`Votes`]);
//! configuration mistakes fail before anything is sent ([`Error::Config`],
//! [`Error::Auth`], [`Error::Tls`]); a lock lost fires the guard's loss
//! signal, and [`LockRequest::run`] then cancels the work and returns
//! [`Error::LockLost`]. [`Error`]'s predicates tell the classes apart; the
//! guide's `docs/errors.md` gives each.
//!
//! # Connections, waiting, exit
//!
//! One multiplexed connection per node, shared by every lock and clone of
//! [`Redlock`]; a node down at [`Builder::build`] is reconnected in the
//! background, while rejected credentials ([`Error::Auth`]) or TLS
//! ([`Error::Tls`]) fail the build; `redis+cluster://` makes a whole
//! Redis Cluster one node. For each key a node runs the commands
//! in the order the core emitted them, and every future is cancel-safe: a
//! dropped acquire or [`LockGuard`], or a guard alive when `main` returns,
//! is released in the background ([`Redlock::shutdown`] releases what is
//! still held, waits for that, and ends every task of the client). A
//! waiting acquire tries again at its retry delay or at a release notice
//! (pub/sub), first come, first served inside a client. Logs go to
//! [`tracing`](https://docs.rs/tracing), quiet at INFO; features: `tls`
//! (default), `insecure-tls`, `metrics`, `blocking`. The guide in the
//! repository (`docs/README.md`) says each in full: `docs/connecting.md`
//! (order, exit, TLS, Redis and Valkey, features), `docs/cluster.md`,
//! `docs/waiting.md`, `docs/metrics-and-logs.md`, `docs/blocking.md`.
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
//!   from a CSPRNG (rand's thread-local generator, ChaCha12 seeded from the
//!   OS); only the holder of that value can extend or release.
//! - **Independent masters.** The URLs must point at N independent
//!   masters, not at replicas of one another.
//!
//! Redlock does **not** promise safety when those assumptions break: a
//! client paused past its validity, a master's clock that jumps forward, a
//! master (or a cluster node's promoted replica) that comes back without its
//! keys, can each let two clients hold one lock. The guide's
//! `docs/guarantees.md` gives each case and what to do about it.
#![forbid(unsafe_code)]

/// Whether the core's planted bug `$bug` is on for this thread (feature
/// `planted-bugs`; a constant `false` without it): the adapter's hooks.
macro_rules! planted {
    ($bug:ident) => {{
        #[cfg(feature = "planted-bugs")]
        {
            redlock_core::planted::active() == Some(redlock_core::planted::Bug::$bug)
        }
        #[cfg(not(feature = "planted-bugs"))]
        {
            false
        }
    }};
}

#[cfg(feature = "blocking")]
pub mod blocking;
mod builder;
mod driver;
mod error;
mod handles;
mod metrics;
mod node;
#[cfg(feature = "simulation")]
pub mod sim;
#[cfg(not(feature = "simulation"))]
#[allow(unreachable_pub, dead_code)]
mod sim;

pub use builder::Builder;
pub use error::{BoxError, Error, RunError};
pub use handles::client::Redlock;
pub use handles::election::{Election, Leadership};
pub use handles::guard::{LockGuard, LossSignal, Releasing};
pub use handles::inspect::NodeInspection;
pub use handles::report::{Persistence, ServerReport};
pub use handles::request::{Acquiring, LockRequest, Wait, kind};
/// What a user names in a `match` or a signature: the errors and their
/// votes, keys and values, reports and reasons. The rest of the core is
/// [`core`].
pub use redlock_core::{
    AcquireError, ConfigError, ExtendError, Holding, KeepAlive, Key, Leader, LeaderReport,
    LeadershipLoss, LockValue, LossReason, NodeError, NodeErrorKind, NodeVote, ReleaseReport,
    Votes, WeakPersistence,
};

/// The core crate: the algorithm, its settings, votes, keys and values.
pub use redlock_core as core;

/// Markdown whose Rust examples `cargo test --doc` compiles, so that they
/// cannot drift from the API: the READMEs (`no_run`: they name masters that
/// do not exist here) and the guide's pages.
macro_rules! doctested {
    ($($(#[$cfg:meta])* $name:ident = $path:literal;)*) => {
        $($(#[$cfg])* #[cfg(doctest)] #[doc = include_str!($path)] struct $name;)*
    };
}

doctested! {
    ReadmeExamples = "../../README.md";
    CrateReadmeExample = "../README.md";
    GuideGuarantees = "../../docs/guarantees.md";
    GuideDurability = "../../docs/durability.md";
    GuideLockKinds = "../../docs/lock-kinds.md";
    GuideElection = "../../docs/election.md";
    GuideSemaphore = "../../docs/semaphore.md";
    GuideWaiting = "../../docs/waiting.md";
    GuideErrors = "../../docs/errors.md";
    GuideConnecting = "../../docs/connecting.md";
    GuideCluster = "../../docs/cluster.md";
    GuideMetricsAndLogs = "../../docs/metrics-and-logs.md";
    #[cfg(feature = "blocking")]
    GuideBlocking = "../../docs/blocking.md";
}
