//! Watches a Tokio runtime for stalls, two ways at once (issue 51: a
//! blocking call on a worker thread froze a client's runtime for 2 s):
//!
//! - a heartbeat: one task woken by a 10 ms [`tokio::time::interval`] that
//!   keeps how late a tick ran at worst ([`Stalls::runtime`]). A runtime
//!   whose workers are all blocked polls no task and fires no timer: the
//!   tick after it comes late by the whole stall;
//! - a watcher thread that reads the runtime's metrics every
//!   [`WATCH_EVERY`] and keeps the longest time one worker stayed busy
//!   without getting back to its scheduler ([`Stalls::worker`]). A worker
//!   blocked inside one poll shows whole here even where the other workers
//!   keep the runtime, and the heartbeat, going. A worker reports its
//!   metrics each time it parks and every few dozen polls
//!   (`event_interval`), so on a healthy runtime this is a few ms.
//!
//! A busy machine adds a few milliseconds to both. `make demo` and bench
//! (k) print them for each phase beside their throughput: figures, never a
//! pass/fail.
//!
//! ```
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() {
//! use std::time::Duration;
//! use redlock_tests::heartbeat::Heartbeat;
//!
//! let heartbeat = Heartbeat::start(Heartbeat::EVERY);
//! tokio::time::sleep(Duration::from_millis(50)).await;
//! let stalls = heartbeat.take();
//! println!("ticks up to {:?} late, a worker held up to {:?}", stalls.runtime, stalls.worker);
//! # }
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use tokio::runtime::RuntimeMetrics;
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;

/// How often the watcher thread reads the runtime's metrics.
pub const WATCH_EVERY: Duration = Duration::from_millis(2);

/// The worst a runtime was held up over some time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stalls {
    /// How late the heartbeat's tick ran at worst: the whole runtime held up.
    pub runtime: Duration,
    /// The longest one worker stayed busy without getting back to its
    /// scheduler: one poll held it (or the machine did not run it).
    pub worker: Duration,
}

/// A heartbeat task and a watcher thread on the runtime it was started on;
/// both stopped when dropped.
pub struct Heartbeat {
    /// The largest lateness since the start or the last [`take`](Self::take), in µs.
    late_us: Arc<AtomicU64>,
    /// The longest busy stretch of a worker over the same time, in µs.
    worker_us: Arc<AtomicU64>,
    task: JoinHandle<()>,
    stop: Arc<AtomicBool>,
    watcher: Option<thread::JoinHandle<()>>,
}

impl Heartbeat {
    /// The usual period: 10 ms.
    pub const EVERY: Duration = Duration::from_millis(10);

    /// Starts a heartbeat every `every` on the current runtime, and its
    /// watcher thread.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime.
    pub fn start(every: Duration) -> Self {
        let late_us = Arc::new(AtomicU64::new(0));
        let late = Arc::clone(&late_us);
        let task = tokio::spawn(async move {
            let mut interval = tokio::time::interval(every);
            // After a stall, the next tick a period from when it ran, not a
            // burst of the missed ones.
            interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
            loop {
                let due = interval.tick().await;
                let behind = tokio::time::Instant::now().saturating_duration_since(due);
                late.fetch_max(micros(behind), Ordering::Relaxed);
            }
        });
        let worker_us = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let metrics = tokio::runtime::Handle::current().metrics();
        let watcher = {
            let worst = Arc::clone(&worker_us);
            let stop = Arc::clone(&stop);
            thread::Builder::new()
                .name("heartbeat-watch".to_owned())
                .spawn(move || watch(&metrics, &worst, &stop))
                .ok()
        };
        Self {
            late_us,
            worker_us,
            task,
            stop,
            watcher,
        }
    }

    /// The worst since the start or the last [`take`](Self::take).
    pub fn worst(&self) -> Stalls {
        Stalls {
            runtime: Duration::from_micros(self.late_us.load(Ordering::Relaxed)),
            worker: Duration::from_micros(self.worker_us.load(Ordering::Relaxed)),
        }
    }

    /// [`worst`](Self::worst), and starts over: the figures of one phase.
    pub fn take(&self) -> Stalls {
        Stalls {
            runtime: Duration::from_micros(self.late_us.swap(0, Ordering::Relaxed)),
            worker: Duration::from_micros(self.worker_us.swap(0, Ordering::Relaxed)),
        }
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.task.abort();
        self.stop.store(true, Ordering::Relaxed);
        if let Some(watcher) = self.watcher.take() {
            let _ = watcher.join();
        }
    }
}

/// What the watcher last saw of one worker: its metrics and since when.
struct Seen {
    busy: Duration,
    park_unpark: u64,
    since: Instant,
}

/// Every [`WATCH_EVERY`] until `stop`: a worker that is not parked (an even
/// park/unpark count) and reported nothing new since it was last seen to
/// has been busy that long in one stretch.
fn watch(metrics: &RuntimeMetrics, worst: &AtomicU64, stop: &AtomicBool) {
    let read = |worker: usize, now: Instant| Seen {
        busy: metrics.worker_total_busy_duration(worker),
        park_unpark: metrics.worker_park_unpark_count(worker),
        since: now,
    };
    let now = Instant::now();
    let mut seen: Vec<Seen> = (0..metrics.num_workers())
        .map(|worker| read(worker, now))
        .collect();
    while !stop.load(Ordering::Relaxed) {
        thread::sleep(WATCH_EVERY);
        let now = Instant::now();
        for (worker, last) in seen.iter_mut().enumerate() {
            let current = read(worker, now);
            let parked = current.park_unpark % 2 == 1;
            if parked || current.busy != last.busy || current.park_unpark != last.park_unpark {
                *last = current;
            } else {
                worst.fetch_max(micros(now - last.since), Ordering::Relaxed);
            }
        }
    }
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Lower bounds only: the stall is the test's own, a busy machine can
    // only add to it.

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_runtime_blocked_whole_shows_in_both() {
        let heartbeat = Heartbeat::start(Heartbeat::EVERY);
        tokio::time::sleep(Duration::from_millis(30)).await;
        heartbeat.take();
        // The only worker blocked: no tick can run meanwhile.
        tokio::spawn(async { thread::sleep(Duration::from_millis(300)) })
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(30)).await;
        let stalls = heartbeat.take();
        assert!(stalls.runtime >= Duration::from_millis(250), "{stalls:?}");
        assert!(stalls.worker >= Duration::from_millis(250), "{stalls:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_blocked_worker_of_two_shows_as_a_worker_stall() {
        let heartbeat = Heartbeat::start(Heartbeat::EVERY);
        tokio::time::sleep(Duration::from_millis(30)).await;
        heartbeat.take();
        tokio::spawn(async { thread::sleep(Duration::from_millis(300)) })
            .await
            .unwrap();
        assert!(heartbeat.take().worker >= Duration::from_millis(250));
    }
}
