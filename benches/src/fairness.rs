//! (j) Fairness: tasks that take turns on one key, each holding it for
//! [`HOLD`], releasing it and asking again at once. Printed, never asserted.
//!
//! - **worst wait / fair cycle**: the longest a task waited for one grant,
//!   over the fair cycle (tasks x hold: every other task held it once). 1 is
//!   a perfect queue; the goal is at most 2 in one process.
//! - **Jain's index** of the grants over tasks: (sum x)^2 / (n sum x^2), 1
//!   when every task got as many grants, 1/n when one got them all.
//! - **hand-over gap**: from a release's reply to the next grant (the lock
//!   idle between two holders), p50 and p99.
//!
//! Three shapes: one client with every task, several clients with some
//! tasks each (waiters queue first come, first served inside a client only;
//! between clients Redlock's race decides), and the same several clients
//! with the fair option (`LockRequest::fair`: the masters' queues order the
//! clients; the goal is a worst wait of at most 3 fair cycles).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redlock_tokio::{Redlock, Wait};

use crate::stats::{Latencies, ms, us};

/// How long each task holds the lock.
pub(crate) const HOLD: Duration = Duration::from_millis(20);

/// One shape's figures.
pub(crate) struct Fairness {
    pub(crate) clients: usize,
    pub(crate) tasks_per_client: usize,
    pub(crate) fair: bool,
    pub(crate) grants: Vec<u64>,
    pub(crate) failures: u64,
    pub(crate) worst_wait: Duration,
    pub(crate) waits: Latencies,
    pub(crate) gaps: Latencies,
}

impl Fairness {
    fn tasks(&self) -> usize {
        self.clients * self.tasks_per_client
    }

    /// Every other task holding once.
    pub(crate) fn fair_cycle(&self) -> Duration {
        HOLD * u32::try_from(self.tasks()).unwrap_or(u32::MAX)
    }

    pub(crate) fn worst_over_cycle(&self) -> f64 {
        self.worst_wait.as_secs_f64() / self.fair_cycle().as_secs_f64()
    }

    /// Jain's fairness index of the grants over tasks.
    pub(crate) fn jain(&self) -> f64 {
        let sum: f64 = self.grants.iter().map(|&g| g as f64).sum();
        let squares: f64 = self.grants.iter().map(|&g| (g as f64).powi(2)).sum();
        if squares == 0.0 {
            return f64::NAN;
        }
        sum * sum / (self.grants.len() as f64 * squares)
    }

    pub(crate) fn line(&self) -> String {
        format!(
            "| {} x {}{} | {} | {} | {:.2} | {:.3} | {} | {} | {} | {} |",
            self.clients,
            self.tasks_per_client,
            if self.fair { ", fair" } else { "" },
            self.grants.iter().sum::<u64>(),
            ms(self.worst_wait.as_secs_f64() * 1e6),
            self.worst_over_cycle(),
            self.jain(),
            ms(self.waits.p99()),
            us(self.gaps.p50()),
            us(self.gaps.p99()),
            self.failures,
        )
    }
}

/// The table's header.
pub(crate) const HEADER: &str = "| clients x tasks | grants | worst wait | worst / fair cycle | Jain's index | wait p99 | hand-over gap p50 (us) | gap p99 (us) | failed |\n|---|---|---|---|---|---|---|---|---|";

/// What the tasks of one shape share.
#[derive(Default)]
struct Shared {
    /// Grants so far, numbering them.
    grants: u64,
    /// When the last release's reply came, if no grant came since.
    released: Option<Instant>,
    gaps: Latencies,
}

/// Runs one shape for `duration`: `clients` clients of their own, each
/// with `tasks_per_client` tasks, on one key.
pub(crate) async fn run(
    urls: &[String],
    clients: usize,
    tasks_per_client: usize,
    fair: bool,
    duration: Duration,
    key: &str,
) -> Result<Fairness, String> {
    let mut redlocks = Vec::new();
    for _ in 0..clients {
        let redlock = Redlock::builder(urls.iter().map(String::as_str))
            .build()
            .await
            .map_err(|err| format!("fairness client: {err}"))?;
        redlocks.push(redlock);
    }
    let shared = Arc::new(Mutex::new(Shared::default()));
    let end = Instant::now() + duration;
    let mut tasks = Vec::new();
    for redlock in &redlocks {
        for _ in 0..tasks_per_client {
            let redlock = redlock.clone();
            let shared = Arc::clone(&shared);
            let key = key.to_owned();
            tasks.push(tokio::spawn(async move {
                let (mut grants, mut failures) = (0u64, 0u64);
                let mut worst = Duration::ZERO;
                let mut waits = Latencies::new();
                while Instant::now() < end {
                    let asked = Instant::now();
                    let request = redlock
                        .lock(&key)
                        .wait(Wait::AtMost(Duration::from_secs(30)));
                    let acquired = if fair {
                        request.fair().await
                    } else {
                        request.await
                    };
                    match acquired {
                        Ok(guard) => {
                            let granted = Instant::now();
                            let grant = {
                                let mut shared = shared.lock().unwrap();
                                shared.grants += 1;
                                if let Some(released) = shared.released.take() {
                                    shared
                                        .gaps
                                        .record(granted.saturating_duration_since(released));
                                }
                                shared.grants
                            };
                            let waited = granted - asked;
                            worst = worst.max(waited);
                            waits.record(waited);
                            grants += 1;
                            tokio::time::sleep(HOLD).await;
                            guard.release().await;
                            let mut shared = shared.lock().unwrap();
                            if shared.grants == grant {
                                shared.released = Some(Instant::now());
                            } else {
                                // The next holder's grant came before this
                                // release's reply: no idle gap at all.
                                shared.gaps.record(Duration::ZERO);
                            }
                        }
                        Err(_) => failures += 1,
                    }
                }
                (grants, failures, worst, waits)
            }));
        }
    }
    let mut result = Fairness {
        clients,
        tasks_per_client,
        fair,
        grants: Vec::new(),
        failures: 0,
        worst_wait: Duration::ZERO,
        waits: Latencies::new(),
        gaps: Latencies::new(),
    };
    for task in tasks {
        let (grants, failures, worst, waits) =
            task.await.map_err(|err| format!("fairness task: {err}"))?;
        result.grants.push(grants);
        result.failures += failures;
        result.worst_wait = result.worst_wait.max(worst);
        result.waits.merge(&waits);
    }
    result.gaps = std::mem::take(&mut shared.lock().unwrap().gaps);
    Ok(result)
}
