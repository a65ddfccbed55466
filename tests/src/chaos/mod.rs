//! The chaos suite's building blocks: real faults on real servers, and a
//! checker that tells whether any two holders of a lock overlapped.
//!
//! The suite (`make chaos`, or `cargo run -p redlock-tests --bin chaos`)
//! starts several `chaos-worker` **processes** that contend for a few keys
//! through the public `redlock-tokio` API while a seeded fault schedule
//! kills, pauses, partitions and slows down the Redis masters, pauses worker
//! processes, restarts masters empty and jumps their clocks.
//!
//! ```text
//!  chaos (orchestrator)                      chaos-worker × N (processes)
//!  ├─ fault schedule (seeded) ──SIGSTOP────▶ lock / try_lock / extend / keep-alive
//!  ├─ proxies, one per master ◀────────────  │  write(token) to the protected resource
//!  │    (latency, loss, blackhole)           │  records every attempt, hold, write
//!  ├─ masters: redis-server processes        ▼
//!  │    or docker compose containers      worker-N.jsonl (JSON lines)
//!  ├─ the protected resource (a redis-server, never faulted)
//!  └─ checker ◀──────────── merges every worker's file with the fault log
//! ```
//!
//! - [`clock`]: the host's `CLOCK_MONOTONIC`, which every process on one
//!   machine shares, so holds recorded by different processes compare.
//! - [`record`]: what a worker writes, one JSON object per line.
//! - [`resource`]: the protected resource, which keeps the highest token it
//!   saw and rejects lower ones (fencing).
//! - [`checker`]: overlapping holds, stale and fenced writes, liveness and
//!   no-quorum timing per fault window.
//! - [`permits`]: the semaphore checker: holders of one semaphore at once.
//! - [`leaders`]: the election checker: terms rising in grant order, and
//!   failover times (two leaders at once are the checker's overlaps).
//! - [`proxy`]: a fault-injecting TCP proxy (latency, loss-like stalls,
//!   blackhole partitions, connection resets).
//! - [`docker`]: `docker compose` / `docker-compose` and faults inside a
//!   container's network namespace (`nsenter`, `iptables`, `tc`).
//! - [`clock_shift`]: an `LD_PRELOAD` library that moves a server's wall
//!   clock, for the out-of-model clock-jump scenario.

pub mod checker;
pub mod clock;
pub mod clock_shift;
pub mod docker;
pub mod leaders;
pub mod masters;
pub mod permits;
pub mod proxy;
pub mod record;
pub mod resource;
pub mod suite;
pub mod worker;
