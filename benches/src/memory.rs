//! (i) Memory per held lock: this library holds `locks` locks on one node
//! (a plain master, or every shard of a cluster node), and `INFO memory`'s
//! `used_memory` of the node's servers is read before, while they are held,
//! and after their release. With fencing, each lock also keeps its
//! resource's counter (`{resource}\0fencing`, no TTL), which stays after the
//! release.
//!
//! One node is enough: every Redlock node stores the same keys, so a node's
//! memory per lock does not depend on N. Resource names have a fixed length
//! ([`NAME_LEN`] bytes, `lockmem:` and 16 digits); values are this
//! library's default 20 random bytes as 40 hex characters; TTL 30 minutes,
//! longer than any run.

use std::future::IntoFuture;
use std::time::{Duration, Instant};

use redlock_tests::RedisNode;
use redlock_tokio::{Acquiring, LockGuard, Redlock, Wait};
use tokio::runtime::Runtime;

use crate::cluster::{Layout, dbsize, info_text, used_memory};

/// Length of every resource name: `lockmem:` and 16 digits.
pub(crate) const NAME_LEN: usize = 24;
/// Bytes of a lock value as stored (20 random bytes, hex).
pub(crate) const VALUE_LEN: usize = 40;
/// TTL of the held locks: longer than the run.
const TTL: Duration = Duration::from_secs(30 * 60);

/// One measurement: one layout, fencing on or off.
#[derive(Clone, Debug)]
pub(crate) struct MemoryRun {
    pub(crate) shards: usize,
    pub(crate) fencing: bool,
    /// Locks asked for, and held.
    pub(crate) locks: u64,
    pub(crate) held: u64,
    /// Per server of the node: `used_memory` before, while held, after
    /// release; keys while held and after.
    pub(crate) before: Vec<i64>,
    pub(crate) holding: Vec<i64>,
    pub(crate) after: Vec<i64>,
    pub(crate) keys_holding: Vec<i64>,
    pub(crate) keys_after: Vec<i64>,
    /// How long the acquires took.
    pub(crate) acquire_seconds: f64,
    /// `mem_allocator` of the first server.
    pub(crate) allocator: String,
}

impl MemoryRun {
    /// Bytes of `used_memory` per held lock, the node's servers together.
    pub(crate) fn bytes_per_lock(&self) -> f64 {
        let delta: i64 = self.holding.iter().sum::<i64>() - self.before.iter().sum::<i64>();
        delta as f64 / self.held.max(1) as f64
    }

    /// Bytes per held lock on each server (its memory growth over the locks
    /// it holds): the lowest and the highest.
    pub(crate) fn bytes_per_lock_range(&self) -> (f64, f64) {
        let total_keys: i64 = self.keys_holding.iter().sum();
        let mut low = f64::INFINITY;
        let mut high = f64::NEG_INFINITY;
        for i in 0..self.before.len() {
            let locks = self.keys_holding[i] as f64 * self.held as f64 / total_keys.max(1) as f64;
            if locks < 1.0 {
                continue;
            }
            let bytes = (self.holding[i] - self.before[i]) as f64 / locks;
            low = low.min(bytes);
            high = high.max(bytes);
        }
        (low, high)
    }

    /// Bytes per resource still used after every lock was released: the
    /// fencing counters (and the hash table slots they take).
    pub(crate) fn bytes_left_per_resource(&self) -> f64 {
        let delta: i64 = self.after.iter().sum::<i64>() - self.before.iter().sum::<i64>();
        delta as f64 / self.held.max(1) as f64
    }

    /// Keys per held lock (1, or 2 with fencing).
    pub(crate) fn keys_per_lock(&self) -> f64 {
        self.keys_holding.iter().sum::<i64>() as f64 / self.held.max(1) as f64
    }

    /// The share of the locks on the fullest server over the mean share.
    pub(crate) fn key_spread(&self) -> f64 {
        spread(&self.keys_holding)
    }
}

/// The largest of `counts` over their mean (1.0: perfectly even).
pub(crate) fn spread(counts: &[i64]) -> f64 {
    if counts.is_empty() {
        return f64::NAN;
    }
    let mean = counts.iter().sum::<i64>() as f64 / counts.len() as f64;
    let max = counts.iter().copied().max().unwrap_or(0) as f64;
    if mean <= 0.0 { f64::NAN } else { max / mean }
}

fn flush(servers: &[&RedisNode]) {
    for server in servers {
        server.command(["FLUSHALL"]);
    }
}

/// The fixed-length resource name of lock `i`.
fn name(i: u64) -> String {
    let name = format!("lockmem:{i:016}");
    debug_assert_eq!(name.len(), NAME_LEN);
    name
}

/// Holds `locks` locks on node 0 of `layout` with `tasks` concurrent tasks,
/// reading the memory around, each time `settle` after the last reply (the
/// server's cron then has had time to shrink emptied hash tables); the
/// node is flushed before and after.
pub(crate) fn measure(
    runtime: &Runtime,
    layout: &Layout,
    fencing: bool,
    locks: u64,
    tasks: usize,
    settle: Duration,
) -> Result<MemoryRun, String> {
    let node = layout.node_servers().swap_remove(0);
    let url = layout.urls().swap_remove(0);
    let redlock = runtime
        .block_on(Redlock::builder([url.as_str()]).ttl(TTL).build())
        .map_err(|err| format!("memory ({}): {err}", layout.label()))?;
    // Connections, scripts and the first allocations, then a clean slate.
    runtime.block_on(async {
        for i in 0..100 {
            if let Ok(guard) = try_lock(&redlock, fencing, name(u64::MAX / 2 + i)).await {
                let _ = guard.release().await;
            }
        }
    });
    flush(&node);
    std::thread::sleep(settle);
    let before: Vec<i64> = node.iter().map(|s| used_memory(s)).collect();
    let started = Instant::now();
    let guards = runtime.block_on(acquire_all(&redlock, fencing, locks, tasks));
    let acquire_seconds = started.elapsed().as_secs_f64();
    let held = guards.iter().map(Vec::len).sum::<usize>() as u64;
    std::thread::sleep(settle);
    let holding: Vec<i64> = node.iter().map(|s| used_memory(s)).collect();
    let keys_holding: Vec<i64> = node.iter().map(|s| dbsize(s)).collect();
    runtime.block_on(release_all(guards));
    std::thread::sleep(settle);
    let after: Vec<i64> = node.iter().map(|s| used_memory(s)).collect();
    let keys_after: Vec<i64> = node.iter().map(|s| dbsize(s)).collect();
    let allocator = info_text(node[0], "memory", "mem_allocator").unwrap_or_default();
    runtime.block_on(redlock.shutdown());
    flush(&node);
    Ok(MemoryRun {
        shards: layout.shards,
        fencing,
        locks,
        held,
        before,
        holding,
        after,
        keys_holding,
        keys_after,
        acquire_seconds,
        allocator,
    })
}

/// Upper bound on one acquire, besides the count.
const OP_TIMEOUT: Duration = Duration::from_secs(5);

/// One attempt at `name`, fenced or not: fencing is asked per lock.
fn try_lock(redlock: &Redlock, fencing: bool, name: String) -> Acquiring {
    let request = redlock.lock(name).wait(Wait::No);
    if fencing {
        request.fencing().into_future()
    } else {
        request.into_future()
    }
}

async fn acquire_all(
    redlock: &Redlock,
    fencing: bool,
    locks: u64,
    tasks: usize,
) -> Vec<Vec<LockGuard>> {
    let tasks = tasks.max(1) as u64;
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let redlock = redlock.clone();
            tokio::spawn(async move {
                let mut guards = Vec::new();
                let mut i = task;
                while i < locks {
                    if let Ok(Ok(guard)) =
                        tokio::time::timeout(OP_TIMEOUT, try_lock(&redlock, fencing, name(i))).await
                    {
                        guards.push(guard);
                    }
                    i += tasks;
                }
                guards
            })
        })
        .collect();
    let mut out = Vec::new();
    for handle in handles {
        out.push(handle.await.expect("a memory task panicked"));
    }
    out
}

async fn release_all(guards: Vec<Vec<LockGuard>>) {
    let handles: Vec<_> = guards
        .into_iter()
        .map(|guards| {
            tokio::spawn(async move {
                for guard in guards {
                    let _ = tokio::time::timeout(OP_TIMEOUT, guard.release()).await;
                }
            })
        })
        .collect();
    for handle in handles {
        let _ = handle.await;
    }
}

/// Measures every layout, fencing off then on.
pub(crate) fn measure_all(
    runtime: &Runtime,
    layouts: &[Layout],
    locks: u64,
    tasks: usize,
    settle: Duration,
) -> Result<Vec<MemoryRun>, String> {
    let mut out = Vec::new();
    for layout in layouts {
        for fencing in [false, true] {
            crate::progress(&format!(
                "(i) {}: holding {locks} locks{}",
                layout.label(),
                if fencing { ", fenced" } else { "" }
            ));
            out.push(measure(runtime, layout, fencing, locks, tasks, settle)?);
        }
    }
    Ok(out)
}
