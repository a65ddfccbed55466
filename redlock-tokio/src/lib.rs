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
//! # Connections
//!
//! - One long-lived multiplexed connection per node, shared by every lock
//!   and every clone of the [`Redlock`] handle. For each key, a node runs
//!   the commands in the order the core emitted them (an acquire before the
//!   release that undoes it, an extend before the release), under any load:
//!   see "Dropping and cancelling" below.
//! - Each connection reads its server's facts (`INFO server`: Redis or
//!   Valkey, and the version), again after every reconnect, and the core
//!   picks each request's command by them
//!   ([`Request::call`](redlock_core::Request::call)): an exclusive
//!   acquire is a plain `SET key value NX PX ttl GET` on Redis >= 7.0 and
//!   Valkey, a release a `DELIFEQ` on Valkey >= 9.0 (followed by the
//!   release script only where a waiter marked the lock,
//!   [`redlock_core::waited`]).
//! - The Lua scripts are loaded (`SCRIPT LOAD`) on every connection,
//!   so every other operation is one `EVALSHA` per node. A node that answers
//!   `NOSCRIPT` (its script cache was flushed) gets the script loaded
//!   again and the call sent once more, unless a later call for the same
//!   lock was sent to it meanwhile: one lock's calls take effect on a node
//!   in the order they were issued.
//! - The per-node timeout comes from the core's settings; redis' own
//!   response timeout is switched off.
//! - [`Builder::build`] connects to all nodes in parallel. A node that
//!   cannot be reached does **not** fail the build (Redlock works with a
//!   majority): it is reconnected in the background with backoff (50 ms
//!   doubling to 2 s), and until then requests to it fail at once, counting
//!   as that node's failure. A node that **rejects the credentials** does
//!   fail the build with [`Error::Auth`], and one whose **TLS handshake is
//!   refused** (an untrusted server certificate, a missing client
//!   certificate) with [`Error::Tls`]: those are configuration errors.
//! - Connections and background tasks live on the Tokio runtime that made
//!   them. A client used on another runtime after its first one shut down
//!   finds its connections closed: the first request to each node fails,
//!   and the node is reconnected on the current runtime.
//! - URLs: `redis://[user:password@]host[:port][/db]`, `rediss://` for TLS
//!   (see below). Nodes are named by `host:port/db` in errors and logs;
//!   passwords never appear in errors, `Debug` output or logs.
//!
//! # Cluster nodes
//!
//! A node may be a whole Redis Cluster (or Valkey cluster), given as
//! `redis+cluster://[user:password@]host:port,host:port,...` (or
//! `valkey+cluster://`), the listed masters being seeds. It is still **one
//! vote**; its shards are the adapter's business, the core does not know
//! them.
//!
//! - Its connection is the `redis` crate's async cluster client, which
//!   routes every command to the shard of its first key, follows `MOVED`
//!   and `ASK` and reconnects to shards by itself; a shard down fails that
//!   node's votes for its keys only.
//! - Every script's keys share one hash slot: the lock key is unchanged
//!   (the standard Redlock key) and its derived keys take it as hash tag
//!   ([`Key::derived`](redlock_core::Key::derived)). A lock whose keys would
//!   span slots (a multi-resource lock over resources without a common hash
//!   tag) is refused before anything is sent with
//!   [`ConfigError::CrossSlot`],
//!   never held on part of the node.
//! - The scripts are loaded on every node of the cluster at connect (a
//!   shard down then loads them on its first `NOSCRIPT`); the node's facts
//!   are the lowest of its masters' ([`NodeFacts::lowest`](redlock_core::NodeFacts::lowest)).
//! - Release notices are the scripts' classic `PUBLISH`, which a cluster
//!   forwards to all its nodes; waiters subscribe on the first seed.
//! - The cluster client routes each command on its own and retries it up to
//!   3 times (`MOVED`, `ASK`, `TRYAGAIN`, a reconnect), so it keeps no order
//!   by itself: a command for a key is sent to a cluster node only once the
//!   one before it for that key has been answered or given up. One case is
//!   left: a command given up at its deadline while written to a shard that
//!   then moves the slot may run after the next one; the core allows for it
//!   as for a lost reply (an acquire's key then expires at its TTL).
//! - A failover inside a cluster node can promote a replica that lacks our
//!   key (replication is asynchronous): the same as a master restarting
//!   empty. Run cluster nodes without replicas, or fail over only after the
//!   longest TTL (see the guide, `docs/guarantees.md`).
//!
//! # TLS
//!
//! `rediss://` URLs connect with rustls (feature `tls`, on by default). By
//! default server certificates are checked against the public webpki roots
//! compiled into the crate (the system store and `SSL_CERT_FILE` are not
//! read). For servers with certificates from a private CA, and for servers
//! that require a client certificate (`tls-auth-clients yes`):
//!
//! ```no_run
//! # async fn demo() -> Result<(), redlock_tokio::Error> {
//! use redlock_tokio::Redlock;
//!
//! let redlock = Redlock::builder(["rediss://10.0.0.1:6380", "rediss://10.0.0.2:6380", "rediss://10.0.0.3:6380"])
//!     .tls_ca_file("/etc/redlock/ca.pem")                           // trust only this CA
//!     .tls_client_cert("/etc/redlock/client.pem", "/etc/redlock/client.key") // mutual TLS
//!     .build()
//!     .await?;
//! # let _ = redlock; Ok(()) }
//! ```
//!
//! - The files are PEM, read and checked at build: an unreadable file, a
//!   file without a certificate, a key that is not the certificate's, or a
//!   `redis://` server among the URLs is an [`Error::Config`].
//! - A handshake that either side refuses (the server's certificate is not
//!   signed by a trusted CA or not for the host in the URL, or the server
//!   wants a client certificate) fails the build with [`Error::Tls`] at once,
//!   rather than counting as an unreachable node. A server that does not
//!   speak TLS at all counts as unreachable.
//! - A `#insecure` fragment (`rediss://host:6380/#insecure`) accepts any
//!   server certificate, for any host: for tests only, as it lets anyone on
//!   the path read and forge the traffic. It needs the `insecure-tls`
//!   feature (off by default); without it such a URL is an
//!   [`Error::Config`], so no URL can turn the check off in a production build.
//!
//! # Waiting for a lock
//!
//! [`Redlock::lock`] (every request that may wait) waits between
//! attempts for its retry delay **or** for a release notice, whichever
//! comes first. Every release that frees a lock publishes an empty message
//! on the channel `<key>\0released` on each node
//! ([`core::Settings::release_channel`]); an acquire that has to wait listens
//! there and tries again within about one round trip of the release, so
//! a long retry delay no longer means a long wait, and waiters need not
//! hammer the nodes with short delays.
//!
//! - Nothing happens on the uncontended path: only an acquire with an
//!   attempt that found the lock held by someone else registers for
//!   notices (not one that failed because nodes are down).
//! - The client opens **one pub/sub connection per node**, lazily, the first
//!   time an acquire waits, and shares it among all waiting acquires (of
//!   every clone). A channel is subscribed while at least one acquire waits
//!   for it and unsubscribed when the last one leaves.
//! - Notices only bring an attempt forward: the attempt still runs the
//!   whole quorum round, and one started by a notice counts as a retry only
//!   if it ends after the retry it jumped ahead of.
//! - **First come, first served inside a client.** A release wakes one of
//!   the client's waiters for that lock, the one that has waited longest
//!   (the core's [`Hub`](redlock_core::Hub) decides; if it
//!   leaves without the lock, the next is told what it missed), and a new
//!   `lock` on a lock the client's acquires already wait for queues behind
//!   them instead of attempting, so a holder that releases and asks again
//!   comes last. A request that does not wait ([`Wait::No`]) never queues. Between clients the fastest
//!   attempt to a quorum still wins, and every waiter keeps its timed
//!   retries as the backstop, which can also win a race.
//! - **First come, first served across clients, as an option**:
//!   [`LockRequest::fair`] keeps a queue of waiters on every node, and a
//!   master grants a free key only to the head of its queue, so while a
//!   quorum is up the waiter the quorum saw first is served first (see
//!   [`core::LockSpec::Fair`] for the bounds: a dead
//!   waiter, masters that disagree, nothing left behind).
//! - A release counts once it is heard from more nodes than a failed
//!   attempt can free while someone else holds a quorum: N - quorum + 1
//!   (2 of 3, 3 of 5). Failed attempts clean up with the same release
//!   scripts, so their notices alone must not wake anyone: each would wake
//!   every waiter, whose failing attempts would clean up in turn, a storm of
//!   attempts for as long as the lock is held.
//! - A pub/sub connection that is down, slow or paused never fails or slows
//!   an acquire: that node just sends no notices, and the timer still runs.
//!   It is reconnected in the background (with backoff) while someone
//!   waits. A release missed that way (or heard from too few nodes, when
//!   the holder held a bare quorum and one of those nodes is silent) costs
//!   at most one retry delay.
//! - Switch it off with [`Builder::release_notices`]`(false)`, for example
//!   where pub/sub is disabled by ACL: the client then neither subscribes
//!   nor publishes. A server that refuses the notice of a release (an ACL
//!   user without channel rights) still releases the lock
//!   ([`ReleaseReport::notices_refused`](redlock_core::ReleaseReport::notices_refused)).
//!
//! # Logs
//!
//! Events go to [`tracing`](https://docs.rs/tracing), quiet at INFO:
//! - DEBUG: every acquire, extend and release, and each node's answer, in
//!   `redlock.acquire`, `redlock.extend`, `redlock.release` and
//!   `redlock.keep_alive` spans that name the resource;
//! - INFO: what an operator acts on: a lock lost under a keep-alive, a node
//!   unreachable at build or its connection lost, a node connected again;
//! - WARN: anomalies: a node that refuses a request (error reply, key of
//!   another type, credentials) or answers something no script returns.
//!
//! # Metrics
//!
//! With the `metrics` feature, the client reports through the
//! [`metrics`](https://docs.rs/metrics) facade to whatever recorder the
//! program installs (a Prometheus, OpenTelemetry or StatsD exporter, ...).
//! Every figure is an outcome the core already decided; each metric's help
//! text and unit are described whenever a client is built. Without the
//! feature there is no metrics code at all.
//!
//! | metric | type | labels | what |
//! |---|---|---|---|
//! | `redlock_acquires_total` | counter | `kind`, `outcome` | acquire calls by outcome: `granted`, `held_by_other`, `no_quorum`, `validity_exhausted`, `wrong_type`, `deadline` (the wait limit, `Wait::AtMost`, passed), `cancelled` (the call's future was dropped), `config` (refused before anything was sent: a bad TTL, a zero wait limit, keys across cluster slots, ...) |
//! | `redlock_acquire_wait_seconds` | histogram (seconds) | `kind`, `outcome` | from the start of the call to the lock granted or given up, retries included |
//! | `redlock_acquire_attempts` | histogram (count) | `kind`, `outcome` | quorum rounds one call started (not for `cancelled` and `config`) |
//! | `redlock_lock_held_seconds` | histogram (seconds) | `kind`, `end` | from the winning round (`LockGuard::acquired_at`) to the release (`end="released"`: `release()` done, or the guard dropped) or to the keep-alive declaring the lock lost (`end="lost"`); a forgotten guard records nothing |
//! | `redlock_extensions_total` | counter | `outcome` | extensions, by hand or by a keep-alive: `extended`, `expired`, `lost`, `gone`, `no_quorum` |
//! | `redlock_locks_lost_total` | counter | `reason` | locks a keep-alive declared lost (what `lost()` reports): `expired`, `lost`, `gone`, `no_quorum` (the extension that failed), `extension_limit` |
//! | `redlock_releases_total` | counter | `outcome` | releases (guards, keep-alives, `release_value`): `released` (the lock is free), `not_held` (our value was on no master), `incomplete` (so many masters failed that the value may hold the lock until its TTL) |
//! | `redlock_node_errors_total` | counter | `node`, `error` | failed votes, one per master per round (acquire attempt, extension, release): `error` is `timeout`, `connection`, `auth`, `wrong_type`, `server`, `protocol`, `tls` or `slow` (not asked: the node is known slow) |
//! | `redlock_release_notices_total` | counter | `node` | release notices received on each master's pub/sub connection |
//! | `redlock_node_slow` | gauge | `node` | 1 while the node is known slow (it left three requests in a row unanswered past their timeout; new acquires skip it, one probe at intervals), 0 once it answers again; each change is also logged once at INFO |
//! | `redlock_release_node_misses_total` | counter | | masters where the release of a still valid lock found no value of ours although the lock held that master: a master restarted empty, or a broken per-node order; 0 when all is well |
//!
//! Labels never hold a lock's name or value (private, and one series per
//! lock): `kind` is `exclusive` (fenced ones too), `read`, `write`,
//! `reentrant` or `multi`; `node` is the master's canonical address
//! (`host:port/db`, as in errors and logs, never credentials), so two
//! clients with different masters stay apart. Recording allocates nothing
//! in the client: label sets are built once.
//!
//! # Cargo features
//!
//! - `tls` (default): `rediss://` URLs, with rustls (see "TLS" above).
//! - `insecure-tls` (off): the `#insecure` URL fragment, which accepts any
//!   server certificate; for tests against self-signed servers only.
//! - `metrics`: the metrics above, through the `metrics` facade.
//!
//! # Dropping and cancelling
//!
//! - Every future here is cancel-safe. A dropped [`Redlock::lock`] (or any
//!   other acquire) releases, in a background task, whatever its attempt in
//!   flight may have set on the nodes.
//! - A [`LockGuard`] dropped without `release`
//!   releases the lock in a background task on the current Tokio runtime.
//! - **Exit.** A guard alive or dropped when `main` returns (plainly,
//!   through `?`, or by a panic), on either runtime flavour, is released
//!   without any call: a release that its runtime drops unsent (a runtime
//!   drops its tasks as it shuts down) goes out on a blocking connection
//!   instead, each node waited for at most one connect timeout plus one
//!   per-node timeout. A guard dropped outside any runtime is released
//!   before `drop` returns: on the client's multi-thread runtime while it
//!   still runs (after the lock's requests still in flight there, on the
//!   same connections), else on blocking connections.
//!   [`Redlock::shutdown`] is the explicit form (it waits until the
//!   background releases are answered); call it before
//!   [`std::process::exit`], which runs no destructor, so nothing can be
//!   sent there. A process killed (`SIGKILL`, `abort`) leaves its locks to
//!   expire at their TTL.
//! - **Order.** Every request is in its node's connection queue the moment
//!   the core emits it, so a release always runs after the acquire it
//!   undoes, also under heavy load and when the acquire completes in the
//!   background. A release or withdraw is never dropped unsent: past its
//!   deadline it stays queued until its node answers (a paused master gets
//!   it when it resumes), the connection fails, or one default TTL has
//!   passed; one that meets a broken connection is sent again on the next
//!   (a master that restarts with its data gets it). What a master that stops reading can make the client hold is
//!   bounded: 65,536 queued requests per node and one TTL of releases; a
//!   master stalled past that under heavy load may keep some keys until
//!   their TTL.
//! - Nobody waits for slow nodes: an acquire or extend returns as soon as
//!   the core decides, and the requests still in flight then complete in the
//!   background (so the slow nodes get the lock or the new TTL too).
//!   Releases of failed attempts and of lost locks, and the restores an
//!   extension sends to masters that lost the value, also go out in the
//!   background, in order (above).
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
