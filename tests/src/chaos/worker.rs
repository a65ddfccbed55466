//! One chaos worker process: tasks that contend for a few keys through the
//! public `redlock-tokio` API and record every attempt, hold and write.
//!
//! The orchestrator starts it as `chaos-worker '<Config as JSON>'`, stops it
//! by writing `stop` (or closing) its stdin, may stop and continue it with
//! `SIGSTOP`/`SIGCONT` at any time, and reads `held <key> <hold>` lines on its
//! stdout when [`Config::announce`] is set.
//!
//! A hold goes: grant, write to the protected resource, work in short steps
//! (watching validity, sometimes extending, sometimes kept alive), a second
//! write sent whatever the validity (it models a write already in flight
//! when the process was stopped: the case fencing is for), a check whether
//! the lock is still ours, release.
//!
//! With [`Config::election`] the process campaigns in an election instead
//! ([`ElectionConfig`], `worker/election.rs`): a leadership is recorded as a
//! hold whose end is its loss signal, and its term is the token of its
//! writes.

use std::future::IntoFuture;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use redlock_tokio::{AcquireError, Error, KeepAlive, LockGuard, Redlock, Wait};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncBufReadExt;

use super::clock::{instant_ns, mono_ns, nanos};
use super::record::{Api, Attempt, Extended, Grant, Hold, Outcome, Record, TokenKind, Write};
use super::resource::Resource;

mod election;

pub use election::ElectionConfig;

/// What one worker process does.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Config {
    /// Its id in the scenario (in every record).
    pub worker: u32,
    /// The scenario's name: the protected resource's namespace.
    pub scenario: String,
    /// The Redis masters.
    pub urls: Vec<String>,
    /// The protected resource's server.
    pub resource_url: String,
    /// The resources to lock, picked at random for each acquire.
    pub keys: Vec<String>,
    /// Concurrent tasks in the process, each with its own acquires.
    pub tasks: u32,
    /// Lock TTL.
    pub ttl_ms: u64,
    /// Per-node timeout.
    pub node_timeout_ms: u64,
    /// Ask for fencing tokens (fenced locks).
    pub fencing: bool,
    /// Take one of this many permits of a semaphore on each key instead of
    /// a lock. A hold and its writes are then named `<key>/permit<slot>`:
    /// each slot is a lock of its own, with its own fencing tokens.
    #[serde(default)]
    pub permits: Option<u32>,
    /// Share of acquires made with one attempt (`Wait::No`); the others retry.
    pub try_lock_share: f64,
    /// Share of holds kept alive (they last 1.5 TTL).
    pub keep_alive_share: f64,
    /// Share of the other holds that extend once, half way through.
    pub extend_share: f64,
    /// Length of the work under the lock, uniform in this range (ms).
    pub hold_ms: (u64, u64),
    /// Pause after a release or a busy lock, uniform in this range (ms).
    pub idle_ms: (u64, u64),
    /// Upper bound on the run, whatever the orchestrator says.
    pub run_ms: u64,
    /// Print `held <key> <hold>` on stdout at each grant.
    pub announce: bool,
    /// Seeds the worker's choices (keys, lengths, APIs).
    pub seed: u64,
    /// The JSON-lines file to write.
    pub out: PathBuf,
    /// Campaign in the election `keys[0]` (lease `ttl_ms`) instead of
    /// taking locks.
    #[serde(default)]
    pub election: Option<ElectionConfig>,
    /// A planted bug of the core to switch on in this worker (its name,
    /// `RestartedNodeVotes`): an out-of-model scenario's positive control.
    #[serde(default)]
    pub planted: Option<String>,
}

/// How long a work step lasts at most: the resolution at which a stopped
/// process is noticed.
const STEP: Duration = Duration::from_millis(5);

/// A step that took this much longer than planned was a stall (the process
/// was stopped, or starved).
const STALL: Duration = Duration::from_millis(50);

/// How long a worker waits for a keep-alive's loss signal once it saw the
/// validity gone. The signal comes at once on a healthy machine; the bound
/// only stops a missing signal from hanging the worker, so it is generous
/// (a 2 s bound was once missed on a 2-core machine at load 14).
const LOSS_SIGNAL_WAIT: Duration = Duration::from_secs(10);

struct Shared {
    config: Config,
    redlock: Redlock,
    resource: Resource,
    out: std::sync::Mutex<std::fs::File>,
    stop: AtomicBool,
    /// `resign` lines read on stdin: a leader elected before the last one
    /// steps down.
    resigns: AtomicU64,
    deadline: Instant,
}

impl Shared {
    /// Appends one record with a single unbuffered write: once this returns
    /// the line is in the file, so a worker killed a moment later (SIGKILL)
    /// still leaves it for the checker.
    fn record(&self, record: Record) {
        let mut line = serde_json::to_string(&record).expect("records serialize");
        line.push('\n');
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        // A full disk loses records; the checker then sees fewer holds.
        let _ = out.write_all(line.as_bytes());
    }

    /// Records one acquire call of `key` over `(start, end)` that gave
    /// `result`.
    fn record_attempt<T>(
        &self,
        key: &str,
        api: Api,
        (start_ns, end_ns): (u64, u64),
        result: &Result<T, Error>,
    ) {
        let (attempt_outcome, error) = match result {
            Ok(_) => (Outcome::Granted, None),
            Err(error) => {
                let o = outcome(error);
                (o, (o != Outcome::Held).then(|| error.to_string()))
            }
        };
        self.record(Record::Attempt(Attempt {
            worker: self.config.worker,
            key: key.to_owned(),
            api,
            start_ns,
            end_ns,
            outcome: attempt_outcome,
            error,
        }));
    }

    fn running(&self) -> bool {
        !self.stop.load(Ordering::Relaxed) && Instant::now() < self.deadline
    }
}

/// Runs the worker until stopped (stdin) or [`Config::run_ms`] passed.
pub async fn run(config: Config) -> Result<(), String> {
    let ttl = Duration::from_millis(config.ttl_ms);
    // A campaign waits on masters that fsync every write: it retries less
    // often than a lock worker spins.
    let (retry_delay, retry_jitter) = match &config.election {
        Some(election) => (election.retry_delay(), election.retry_delay()),
        None => (Duration::from_millis(1), Duration::from_millis(4)),
    };
    let redlock = Redlock::builder(&config.urls)
        .ttl(ttl)
        .node_timeout(Duration::from_millis(config.node_timeout_ms))
        .wait(Wait::Retries(20))
        .retry_delay(retry_delay)
        .retry_jitter(retry_jitter)
        .connect_timeout(Duration::from_secs(1))
        .build()
        .await
        .map_err(|err| format!("client: {err}"))?;
    let resource = Resource::connect(&config.resource_url, &config.scenario)
        .await
        .map_err(|err| format!("resource {}: {err}", config.resource_url))?;
    let file = std::fs::File::create(&config.out)
        .map_err(|err| format!("{}: {err}", config.out.display()))?;
    let shared = Arc::new(Shared {
        deadline: Instant::now() + Duration::from_millis(config.run_ms),
        config,
        redlock,
        resource,
        out: std::sync::Mutex::new(file),
        stop: AtomicBool::new(false),
        resigns: AtomicU64::new(0),
    });

    // `stop` on stdin, or its end, stops the tasks after their current hold;
    // `resign` ends a leader's term.
    let stopper = Arc::clone(&shared);
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            match line.trim() {
                "stop" => break,
                "resign" => {
                    stopper.resigns.fetch_add(1, Ordering::Relaxed);
                }
                _ => {}
            }
        }
        stopper.stop.store(true, Ordering::Relaxed);
    });

    if let Some(election) = shared.config.election.clone() {
        return election::campaign(shared, election).await;
    }
    let tasks: Vec<_> = (0..shared.config.tasks)
        .map(|task| tokio::spawn(contend(Arc::clone(&shared), task)))
        .collect();
    for task in tasks {
        task.await.map_err(|err| format!("task: {err}"))?;
    }
    Ok(())
}

/// The record's outcome for an acquire error.
pub fn outcome(error: &Error) -> Outcome {
    match error.as_acquire() {
        Some(AcquireError::Held { .. }) => Outcome::Held,
        Some(AcquireError::NoQuorum { .. }) => Outcome::NoQuorum,
        Some(AcquireError::ValidityExhausted { .. }) => Outcome::ValidityExhausted,
        Some(AcquireError::DeadlineExceeded { .. }) => Outcome::DeadlineExceeded,
        _ => Outcome::Other,
    }
}

fn uniform(rng: &mut StdRng, (low, high): (u64, u64)) -> Duration {
    Duration::from_millis(if high > low {
        rng.random_range(low..=high)
    } else {
        low
    })
}

/// A task's choices, seeded by the worker's seed, its id and the task.
fn task_rng(config: &Config, task: u32) -> StdRng {
    StdRng::seed_from_u64(
        config
            .seed
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .wrapping_add(u64::from(config.worker) << 16 | u64::from(task)),
    )
}

/// One task: acquire, hold, release, until stopped.
async fn contend(shared: Arc<Shared>, task: u32) {
    let config = &shared.config;
    let mut rng = task_rng(config, task);
    let ttl = Duration::from_millis(config.ttl_ms);
    // Hold numbers unique in the process: task in the high bits.
    let mut next_hold = u64::from(task) << 40;
    while shared.running() {
        let key = config.keys[rng.random_range(0..config.keys.len())].clone();
        let api = if rng.random_bool(config.try_lock_share.clamp(0.0, 1.0)) {
            Api::TryLock
        } else {
            Api::Lock
        };
        // Drawn before the acquire: keep-alive is chosen on the request.
        let keep_alive = rng.random_bool(config.keep_alive_share.clamp(0.0, 1.0));
        let mut request = shared.redlock.lock(key.as_str()).ttl(ttl);
        if api == Api::TryLock {
            request = request.wait(Wait::No);
        }
        if keep_alive {
            request = request.keep_alive(KeepAlive::default());
        }
        let acquire = match (config.permits, config.fencing) {
            (Some(permits), true) => request.permits(permits).fencing().into_future(),
            (Some(permits), false) => request.permits(permits).into_future(),
            (None, true) => request.fencing().into_future(),
            (None, false) => request.into_future(),
        };
        let start_ns = mono_ns();
        let result = acquire.await;
        let end_ns = mono_ns();
        shared.record_attempt(&key, api, (start_ns, end_ns), &result);
        match result {
            Ok(guard) => {
                let hold = next_hold;
                next_hold += 1;
                let key = match config.permits {
                    Some(_) => permit_name(&key, guard.key().as_bytes()),
                    None => key,
                };
                hold_lock(&shared, &mut rng, guard, keep_alive, key, hold, end_ns).await;
                tokio::time::sleep(uniform(&mut rng, config.idle_ms)).await;
            }
            Err(error) if error.is_held_by_other() => {
                tokio::time::sleep(uniform(&mut rng, config.idle_ms)).await;
            }
            Err(_) => {
                // Nodes down: do not spin.
                tokio::time::sleep(Duration::from_millis(rng.random_range(5..=20))).await;
            }
        }
    }
}

/// A permit's name in the records: the semaphore's name and the slot its
/// lock key ends with (`{<key>}\0permit<slot>`), as `<key>/permit<slot>`.
pub fn permit_name(semaphore: &str, slot_key: &[u8]) -> String {
    let marker = b"\0permit";
    let slot = slot_key
        .windows(marker.len())
        .rposition(|window| window == marker)
        .map(|at| String::from_utf8_lossy(&slot_key[at + marker.len()..]).into_owned())
        .unwrap_or_default();
    format!("{semaphore}{}{slot}", crate::chaos::permits::SLOT_SEPARATOR)
}

/// Watches a hold's steps: the longest gap between two of them, and whether
/// a gap outlasted the validity.
struct Steps {
    last: u64,
    longest: u64,
    paused_past_validity: bool,
}

impl Steps {
    fn new() -> Self {
        Self {
            last: mono_ns(),
            longest: 0,
            paused_past_validity: false,
        }
    }

    /// A step ended that was planned to take `planned`; `promised` is the end
    /// of the validity the client had before it.
    fn tick(&mut self, planned: Duration, promised: u64) -> u64 {
        let now = mono_ns();
        let gap = now.saturating_sub(self.last);
        self.longest = self.longest.max(gap);
        if gap > nanos(planned + STALL) && now >= promised {
            self.paused_past_validity = true;
        }
        self.last = now;
        now
    }
}

/// Sleeps `total` in steps of at most [`STEP`], calling `check` after each:
/// it returns false when the lock is gone (then the work stops early).
async fn work(total: Duration, steps: &mut Steps, mut check: impl FnMut(&mut Steps) -> bool) {
    let end = Instant::now() + total;
    // Bounded by time; the count bound is a second guard.
    for _ in 0..100_000 {
        let now = Instant::now();
        if now >= end {
            return;
        }
        tokio::time::sleep(STEP.min(end - now)).await;
        if !check(steps) {
            return;
        }
    }
}

/// `keep_alive`: whether the guard was asked to be kept alive.
async fn hold_lock(
    shared: &Shared,
    rng: &mut StdRng,
    mut guard: LockGuard,
    keep_alive: bool,
    key: String,
    hold: u64,
    granted_ns: u64,
) {
    let config = &shared.config;
    let ttl = Duration::from_millis(config.ttl_ms);
    let fencing_token = guard.fencing_token();
    let (token, token_kind) = match fencing_token {
        Some(token) => (token, TokenKind::Fencing),
        None => (granted_ns, TokenKind::GrantInstant),
    };
    let valid_until_ns = instant_ns(guard.valid_until());
    let round_started_ns = instant_ns(guard.acquired_at());
    shared.record(Record::Grant(Grant {
        worker: config.worker,
        hold,
        key: key.clone(),
        granted_ns,
        valid_until_ns,
        round_started_ns,
        fencing_token,
    }));
    if config.announce {
        println!("held {key} {hold}");
    }
    // Records each move of the validity the client was promised, so that
    // the hold of a worker killed mid-hold ends where its client believed.
    // Compared as `Instant`s: the conversion to the shared clock is exact to
    // a few microseconds only.
    let mut last_until = guard.valid_until();
    let mut extended = |promised: &mut u64, until: Instant| {
        if until > last_until {
            last_until = until;
            let until_ns = instant_ns(until);
            *promised = (*promised).max(until_ns);
            shared.record(Record::Extended(Extended {
                worker: config.worker,
                hold,
                valid_until_ns: until_ns,
            }));
        }
    };
    let mut promised = valid_until_ns;
    let mut steps = Steps::new();
    let mut resource = shared.resource.clone();
    let id = WriteId {
        worker: config.worker,
        hold,
        key: &key,
        token,
        token_kind,
    };
    if let Some(w) = id.write(&mut resource, !guard.is_lost()).await {
        shared.record(Record::Write(w));
    }
    let planned = if keep_alive {
        ttl.mul_f64(1.5)
    } else {
        uniform(rng, config.hold_ms)
    };

    let (believed_valid, extensions, loss, released_ns, end_ns);
    if keep_alive {
        work(planned, &mut steps, |steps| {
            // The validity as it is now: the keep-alive runs on a task of
            // its own and may have extended it while this step was late (a
            // busy machine), in time. Judged against the validity before
            // that extension, a late step would read as a pause past it.
            // (A stopped process extends nothing while stopped.)
            let now_valid = (!guard.is_lost()).then(|| guard.valid_until());
            if let Some(until) = now_valid {
                extended(&mut promised, until);
            }
            steps.tick(STEP, promised);
            now_valid.is_some()
        })
        .await;
        steps.tick(STEP, promised);
        believed_valid = !guard.is_lost();
        if believed_valid {
            extended(&mut promised, guard.valid_until());
        }
        if let Some(w) = id.write(&mut resource, believed_valid).await {
            shared.record(Record::Write(w));
        }
        loss = if believed_valid {
            None
        } else {
            tokio::time::timeout(LOSS_SIGNAL_WAIT, guard.lost())
                .await
                .ok()
                .map(|reason| reason.to_string())
        };
        extensions = guard.extensions();
        released_ns = mono_ns();
        end_ns = released_ns.min(promised);
        let _report = guard.release().await;
    } else {
        let extend = rng.random_bool(config.extend_share.clamp(0.0, 1.0));
        let half = planned / 2;
        work(half, &mut steps, |steps| {
            steps.tick(STEP, promised);
            !guard.is_lost()
        })
        .await;
        if extend && !guard.is_lost() {
            // A failed extension leaves the validity as it was, or marks
            // the lock lost (anything but no quorum): the steps see that.
            let _ = guard.extend(ttl).await;
            extended(&mut promised, guard.valid_until());
        }
        work(planned - half, &mut steps, |steps| {
            steps.tick(STEP, promised);
            !guard.is_lost()
        })
        .await;
        steps.tick(STEP, promised);
        believed_valid = !guard.is_lost();
        extended(&mut promised, guard.valid_until());
        if let Some(w) = id.write(&mut resource, believed_valid).await {
            shared.record(Record::Write(w));
        }
        loss = None;
        extensions = guard.extensions();
        released_ns = mono_ns();
        end_ns = released_ns.min(promised);
        let _report = guard.release().await;
    }
    let noticed_loss = (steps.paused_past_validity || !believed_valid).then_some(!believed_valid);
    shared.record(Record::Hold(Hold {
        worker: config.worker,
        hold,
        key,
        granted_ns,
        valid_until_ns,
        round_started_ns,
        end_ns,
        released_ns,
        fencing_token,
        keep_alive,
        extensions,
        longest_stall_ms: steps.longest as f64 / 1e6,
        paused_past_validity: steps.paused_past_validity,
        noticed_loss,
        loss,
        open: false,
    }));
}

/// Who writes to the protected resource, and with which token.
struct WriteId<'a> {
    worker: u32,
    hold: u64,
    key: &'a str,
    token: u64,
    token_kind: TokenKind,
}

impl WriteId<'_> {
    /// One write; `None` if the resource did not answer (it is never
    /// faulted, so the checker just sees one write fewer).
    async fn write(&self, resource: &mut Resource, believed_valid: bool) -> Option<Write> {
        let sent_ns = mono_ns();
        let result =
            tokio::time::timeout(Duration::from_secs(2), resource.write(self.key, self.token))
                .await;
        let done_ns = mono_ns();
        let Ok(Ok((accepted, seq))) = result else {
            return None;
        };
        Some(Write {
            worker: self.worker,
            hold: self.hold,
            key: self.key.to_owned(),
            token: self.token,
            token_kind: self.token_kind,
            sent_ns,
            done_ns,
            believed_valid,
            accepted,
            seq,
        })
    }
}
