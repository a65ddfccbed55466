//! Redlock as pure logic: the distributed lock held on a majority of N
//! independent Redis masters, with no sockets, no clock and no OS randomness.
//!
//! This crate decides; the caller does the I/O. Every input carries the time
//! (`now: Instant`) and randomness comes from an RNG the caller hands in, so the
//! same inputs always give the same decisions: tests run thousands of schedules
//! in virtual time, and an adapter such as `redlock-tokio` stays thin.
//!
//! ```text
//!                 poll_output()                 send to node i
//!   ┌──────────────┐ ──▶ Transmit { request } ──────────▶ ┌──────────┐
//!   │   Client     │                                      │ adapter  │──▶ N Redis masters
//!   │ (operations: │ ◀── handle_reply(id, reply, now) ─── │ (I/O,    │◀──
//!   │  acquire,    │                                      │  clock)  │
//!   │  extend,     │ ◀── handle_timeout(now) at poll_timeout()       │
//!   │  release...) │ ◀── handle_connected / _notice / ... │          │
//!   └──────────────┘                                      └──────────┘
//!          │ poll_output(): Event { op, event, finished }
//!          ▼
//!   Lock (key, value, valid_until) or a typed error with every node's vote
//! ```
//!
//! # The algorithm
//!
//! 1. Take the start time (the caller's monotonic `now`).
//! 2. Ask all N nodes at once to set the key to a fresh random value with the
//!    TTL, if absent ([`scripts::ACQUIRE`], or the plain `SET NX PX GET` where
//!    the node's server has it: see [`native`]). Each node gets a timeout far below
//!    the TTL ([`Settings::node_timeout`]).
//! 3. The lock is ours once a quorum (N/2+1) said yes **and** validity is left:
//!    `validity = TTL - elapsed - drift`, with `drift = TTL * 0.01 + 2 ms`.
//!    The decision comes as soon as it is certain either way.
//! 4. Otherwise release on **every** node (a reply may be lost after the node set
//!    the key) and retry after a random delay, up to the retry count or deadline.
//!
//! Extending ([`Operation::extend`]) and releasing ([`Operation::release`])
//! run the same kind of round with their own scripts. An extension succeeds only when a
//! quorum of nodes confirm they still hold our value; only then is the key
//! set again on the nodes where it was missing (a master restarted empty). A
//! value gone from more nodes means the lock had ended ([`ExtendError::Gone`]),
//! and it is not re-created.
//!
//! # Driving it by hand
//!
//! ```
//! use std::sync::Arc;
//! use std::time::{Duration, Instant};
//! use rand::{SeedableRng, rngs::StdRng};
//! use redlock_core::*;
//!
//! let settings = Arc::new(Config::new(["n1", "n2", "n3", "n4", "n5"]).validate()?);
//! let t0 = Instant::now();
//! let rng = || StdRng::seed_from_u64(42); // a CSPRNG from the OS in production
//! let mut client = Client::new(settings.clone(), rng());
//! let acquire = Operation::acquire(
//!     settings.clone(), LockSpec::Exclusive(b"invoice-42"), settings.default_ttl(),
//!     Attempts::Retry, t0, rng(),
//! )?;
//! let op = client.start(acquire, t0);
//!
//! // Send these five requests concurrently; here the nodes answer in turn.
//! let mut sent = Vec::new();
//! while let Some(output) = client.poll_output() {
//!     if let Output::Transmit { id, request } = output {
//!         sent.push((id, request));
//!     }
//! }
//! assert!(sent.iter().all(|(_, r)| r.command == Command::Acquire { ttl: settings.default_ttl() }));
//! let t1 = t0 + Duration::from_millis(2);
//! for (id, request) in &sent[..2] {
//!     client.handle_reply(*id, Reply::to(request, Ok(Response::Int(1))), t1);
//! }
//! // Node 3 is held by someone else: still no decision, a quorum is possible.
//! let (id, request) = &sent[2];
//! client.handle_reply(*id, Reply::to(request, Ok(Response::Data(b"f00d".to_vec()))), t1);
//! assert!(client.poll_output().is_none());
//! // Node 4 says yes: three of five.
//! let (id, request) = &sent[3];
//! client.handle_reply(*id, Reply::to(request, Ok(Response::Int(1))), t1);
//! let Some(Output::Event { op: whose, event: OpEvent::Acquire(AcquireEvent::Acquired(mut lock)), .. }) =
//!     client.poll_output() else { panic!() };
//! assert_eq!(whose, op);
//! assert!(lock.validity(t1) > Duration::from_millis(9_800));
//!
//! // Node 5's late answer is ignored. Later, release everywhere:
//! let t2 = t1 + Duration::from_secs(1);
//! client.start(Operation::release(&mut lock, t2), t2);
//! let mut report = None;
//! while let Some(output) = client.poll_output() {
//!     match output {
//!         Output::Transmit { id, request } if request.node.0 < 3 => {
//!             let answer = if request.node.0 == 2 { 0 } else { 1 }; // 0: not our value there
//!             client.handle_reply(id, Reply::to(&request, Ok(Response::Int(answer))), t2);
//!         }
//!         Output::Event { event: OpEvent::Release(decided), .. } => report = Some(decided),
//!         _ => {}
//!     }
//! }
//! // Three nodes answered: at most two can still hold our value, fewer than
//! // a quorum, so the lock is free and the release is decided. The other
//! // two deletes were sent with the rest; the client lets them complete.
//! let report = report.expect("decided");
//! assert_eq!((report.released(), report.not_held(), report.pending()), (2, 1, 2));
//! assert!(report.frees_lock());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # What Redlock guarantees, and what it does not
//!
//! While its assumptions hold, at most one client holds a lock at any moment
//! (**safety**), a lock whose holder crashed frees itself after at most one TTL
//! (**deadlock freedom**), and clients can lock and unlock while a majority of
//! nodes is up (**fault tolerance**). The assumptions:
//!
//! - **Bounded clock drift.** Nodes and client measure time at nearly the same
//!   rate (within the drift factor). A node whose clock jumps forward expires
//!   keys early and can let two clients each see a majority.
//! - **Bounded pauses.** The validity is a promise about the client's own clock.
//!   A client paused (GC, swap, SIGSTOP) after the decision can wake up believing
//!   it still holds an expired lock. Check [`Lock::validity`] right before each
//!   step of work, and keep steps short compared to the TTL.
//! - **Nodes keep their data.** A node that restarts empty forgets our key; run
//!   Redis with AOF and `appendfsync always`, or keep a crashed node down for
//!   longer than the longest TTL before it rejoins.
//! - **No fencing by default.** A lock does not stop a paused holder's late
//!   writes by itself. The protected resource must check a fencing token for
//!   that; the lock value is unique per acquisition and can serve as a
//!   compare-and-set token where the resource supports it.
//!
//! An even number of nodes works but wastes one: 4 nodes tolerate one failure,
//! as 3 do.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

/// `planted!(Bug)`: whether that planted bug is on for this thread; a
/// constant `false` unless the `planted-bugs` feature is on (see `planted`).
#[cfg(feature = "planted-bugs")]
macro_rules! planted {
    ($bug:ident) => {
        $crate::planted::is_on($crate::planted::Bug::$bug)
    };
}
#[cfg(not(feature = "planted-bugs"))]
macro_rules! planted {
    ($bug:ident) => {
        false
    };
}

/// A method of a public type that belongs to the machinery under the
/// [`Client`] (see `machinery!` below): `pub` with the `simulation`
/// feature, `pub(crate)` without.
macro_rules! machinery_fn {
    ($(#[$meta:meta])* fn $name:ident $($rest:tt)*) => {
        #[cfg(feature = "simulation")]
        $(#[$meta])* pub fn $name $($rest)*
        #[cfg(not(feature = "simulation"))]
        $(#[$meta])* pub(crate) fn $name $($rest)*
    };
}

/// A public item (a type) of the machinery under the [`Client`], as
/// [`machinery_fn!`] makes a method.
macro_rules! machinery_item {
    ($(#[$meta:meta])* $kind:ident $name:ident $($rest:tt)*) => {
        #[cfg(feature = "simulation")]
        $(#[$meta])* pub $kind $name $($rest)*
        #[cfg(not(feature = "simulation"))]
        $(#[$meta])* pub(crate) $kind $name $($rest)*
    };
}

mod client;
mod config;
mod error;
mod limits;
#[path = "wire/native.rs"]
pub mod native;
/// The operations, by kind: each a machine of its own, run by the
/// [`Client`] or driven alone.
mod ops;
#[cfg(feature = "planted-bugs")]
pub mod planted;
mod quorum;
#[path = "wire/resp.rs"]
pub mod resp;
#[path = "wire/scripts.rs"]
pub mod scripts;
mod types;
mod vote;
#[path = "wire/waited.rs"]
pub mod waited;
/// What goes to a node and comes back: requests, commands, replies, the
/// scripts and the native commands.
mod wire;

pub use client::health::{HealthChange, SLOW_AFTER};
pub use client::{Client, OpEvent, OpId, Operation, Output, RequestId};
pub use config::{Config, Connected, RetryConfig, Settings, WeakPersistence};
pub use error::{AcquireError, ConfigError, ExtendError};
pub use limits::{FIXED_DRIFT, MAX_TTL_MS, MAX_VALUE_LEN, MIN_VALIDITY, MIN_VALUE_LEN};
pub use ops::acquire::AcquireEvent;
pub use ops::election::{ElectionTiming, LeadershipLoss, Term, TermEvent};
pub use ops::election_read::{Leader, LeaderReply, LeaderReport};
pub use ops::extend::Extended;
pub use ops::keep_alive::{KeepAlive, KeptLockEvent, LossReason};
pub use ops::lock::Lock;
pub use ops::machine::Notice;
pub use ops::release::ReleaseReport;
pub use ops::retry::{Attempts, retry_delay};
pub use ops::semaphore::MAX_PERMITS;
pub use ops::standing::Standing;
pub use ops::status::{Holder, Holding, InspectReply, InspectReport, LockState, LockStatus};
pub use quorum::{Votes, drift, quorum, remaining, valid_until};
pub use types::{Key, LockSpec, LockValue, NodeId, RoundId, Ttl};
pub use wire::{
    Argument, Command, Form, LockKind, NodeError, NodeErrorKind, NodeVote, Reply, Request,
    Response, waitaof,
};

/// The machinery under the [`Client`]: the machines each [`Operation`]
/// runs, the [`Machine`] trait they share, the sub-machines the client runs them with (the notice hub, wait
/// queues, node health, keep-alive schedules, backoffs). Public only with
/// the `simulation` feature, for the core's own simulation, tests and the
/// model checker (`verify`), which drive them one by one; not API.
macro_rules! machinery {
    ($($path:path),* $(,)?) => {
        $(
            #[cfg(feature = "simulation")]
            pub use $path;
            #[cfg(not(feature = "simulation"))]
            #[allow(unused_imports)]
            pub(crate) use $path;
        )*
    };
}
machinery!(
    client::OWED_PER_NODE,
    ops::acquire::Acquisition,
    ops::election::Proclaim,
    ops::election_read::LeaderRead,
    ops::election_read::LeaderWatch,
    ops::extend::Extension,
    ops::keep_alive::KeptLock,
    ops::read_all::NodeRead,
    ops::read_all::ReadAll,
    ops::release::Release,
    ops::status::Inspection,
    client::health::NodeHealth,
    client::hub::Delivery,
    client::hub::Hub,
    client::queue::WaitQueue,
    client::queue::WaiterId,
    client::queue::Wake,
    ops::acquire::FAIR_PATIENCE,
    ops::keep_alive::KeepAliveEvent,
    ops::keep_alive::KeepAliveSchedule,
    ops::machine::HandOver,
    ops::machine::Machine,
    ops::retry::Backoff,
);

/// This crate's README example, compiled by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExample;
