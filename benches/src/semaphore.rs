//! (s) Semaphore, this library only: a semaphore of k = 1, 4 and 16
//! permits (`LockRequest::permits`) beside a plain lock, under 1 and 64
//! contending tasks of one client on one name. Each task takes a permit
//! (or the lock), holds it [`HOLD`], releases it and asks again at once,
//! until the shape's time is up (and at most [`MAX_CYCLES`] times).
//! Printed after the tables, never asserted.
//!
//! - **acquire p50 / p99**: from the call to the grant, waiting included
//!   (with 64 tasks, most of it is waiting for a permit to come free);
//! - **granted/s**: permits (or locks) granted per second of the shape.

use std::future::IntoFuture;
use std::time::{Duration, Instant};

use redlock_tokio::{Redlock, Wait};

use crate::stats::{Latencies, us};

/// How long each task holds its permit.
pub(crate) const HOLD: Duration = Duration::from_millis(1);

/// The shapes: `None` is the plain lock, `Some(k)` a semaphore of k.
pub(crate) const KINDS: [Option<u32>; 4] = [None, Some(1), Some(4), Some(16)];

/// Contending tasks of each shape.
pub(crate) const CONTENDERS: [usize; 2] = [1, 64];

/// The count bound of each task's loop (the time bound comes first).
const MAX_CYCLES: u64 = 1_000_000;

/// One shape's figures.
pub(crate) struct Shape {
    pub(crate) permits: Option<u32>,
    pub(crate) tasks: usize,
    pub(crate) grants: u64,
    pub(crate) failures: u64,
    pub(crate) elapsed: Duration,
    pub(crate) acquire: Latencies,
}

impl Shape {
    pub(crate) fn granted_per_second(&self) -> f64 {
        self.grants as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    pub(crate) fn line(&self) -> String {
        let kind = match self.permits {
            None => "lock".to_owned(),
            Some(k) => format!("semaphore k={k}"),
        };
        format!(
            "| {kind} | {} | {} | {} | {} | {:.0} | {} |",
            self.tasks,
            self.grants,
            us(self.acquire.p50()),
            us(self.acquire.p99()),
            self.granted_per_second(),
            self.failures,
        )
    }
}

/// The table's header.
pub(crate) const HEADER: &str = "| kind | contenders | grants | acquire p50 (us) | acquire p99 (us) | granted/s | failed |\n|---|---:|---:|---:|---:|---:|---:|";

/// Runs one shape for `duration`: `tasks` tasks of one client on `name`.
pub(crate) async fn run(
    urls: &[String],
    permits: Option<u32>,
    tasks: usize,
    duration: Duration,
    name: &str,
) -> Result<Shape, String> {
    let redlock = Redlock::builder(urls.iter().map(String::as_str))
        .build()
        .await
        .map_err(|err| format!("semaphore client: {err}"))?;
    let started = Instant::now();
    let end = started + duration;
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let redlock: Redlock = redlock.clone();
        let name = name.to_owned();
        handles.push(tokio::spawn(async move {
            let (mut grants, mut failures) = (0u64, 0u64);
            let mut acquire = Latencies::new();
            for _ in 0..MAX_CYCLES {
                if Instant::now() >= end {
                    break;
                }
                let asked = Instant::now();
                let request = redlock
                    .lock(&name)
                    .wait(Wait::AtMost(Duration::from_secs(30)));
                let acquired = match permits {
                    Some(k) => request.permits(k).into_future().await,
                    None => request.await,
                };
                match acquired {
                    Ok(guard) => {
                        acquire.record(asked.elapsed());
                        grants += 1;
                        tokio::time::sleep(HOLD).await;
                        guard.release().await;
                    }
                    Err(_) => failures += 1,
                }
            }
            (grants, failures, acquire)
        }));
    }
    let mut shape = Shape {
        permits,
        tasks,
        grants: 0,
        failures: 0,
        elapsed: Duration::ZERO,
        acquire: Latencies::new(),
    };
    for handle in handles {
        let (grants, failures, acquire) = handle
            .await
            .map_err(|err| format!("semaphore task: {err}"))?;
        shape.grants += grants;
        shape.failures += failures;
        shape.acquire.merge(&acquire);
    }
    shape.elapsed = started.elapsed();
    // Its releases in flight end here, not in the next shape's figures.
    redlock.shutdown().await;
    Ok(shape)
}
