//! What the suite runs beside the masters: the worker processes, the probe
//! and the machine's lag monitor.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use redlock_tokio::{Redlock, Wait};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;

use super::{NODE_TIMEOUT, blocking};
use crate::chaos::checker::Records;
use crate::chaos::clock::{mono_ns, nanos};
use crate::chaos::record::{Api, Attempt, Outcome, Record, read_records};
use crate::chaos::worker;

/// How often the probe acquires a fresh key.
const PROBE_EVERY: Duration = Duration::from_millis(20);

/// How long a worker may take to stop once asked.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);

/// A grant announced by a worker (`held <key> <hold>` on its stdout).
#[derive(Clone, Debug)]
pub(super) struct Held {
    pub(super) worker: u32,
    pub(super) at_ns: u64,
}

/// Running worker processes.
pub(super) struct Workers {
    exe: PathBuf,
    dir: PathBuf,
    procs: Vec<WorkerProc>,
    held_tx: mpsc::UnboundedSender<Held>,
    held: mpsc::UnboundedReceiver<Held>,
}

struct WorkerProc {
    config: worker::Config,
    pid: u32,
    child: Child,
    stdin: Option<ChildStdin>,
    /// Killed on purpose: its exit status is not a problem.
    killed: bool,
}

impl Workers {
    pub(super) async fn spawn(exe: &Path, dir: &Path, configs: Vec<worker::Config>) -> Self {
        let (held_tx, held) = mpsc::unbounded_channel();
        let mut workers = Self {
            exe: exe.to_owned(),
            dir: dir.to_owned(),
            procs: Vec::new(),
            held_tx,
            held,
        };
        for config in configs {
            workers.start(config);
        }
        workers
    }

    fn start(&mut self, config: worker::Config) {
        let log = std::fs::File::create(self.dir.join(format!("worker-{}.log", config.worker)))
            .expect("worker log file");
        let mut child = Command::new(&self.exe)
            .arg(serde_json::to_string(&config).expect("configs serialize"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|err| panic!("cannot run {}: {err}", self.exe.display()));
        let pid = child.id().expect("a child just spawned has a pid");
        let stdout = child.stdout.take().expect("piped");
        let tx = self.held_tx.clone();
        let id = config.worker;
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if line.starts_with("held ") {
                    let _ = tx.send(Held {
                        worker: id,
                        at_ns: mono_ns(),
                    });
                }
            }
        });
        self.procs.push(WorkerProc {
            pid,
            stdin: child.stdin.take(),
            child,
            config,
            killed: false,
        });
    }

    fn proc(&mut self, worker: u32) -> &mut WorkerProc {
        self.procs
            .iter_mut()
            .find(|p| p.config.worker == worker)
            .expect("a worker of this scenario")
    }

    /// Kills `worker` with SIGKILL and waits for it to be gone.
    pub(super) async fn kill(&mut self, worker: u32) -> std::io::Result<()> {
        let proc = self.proc(worker);
        proc.killed = true;
        proc.stdin = None;
        signal(proc.pid, Signal::SIGKILL)?;
        proc.child.wait().await.map(drop)
    }

    /// Starts a new process that does what `worker` did, as worker `id`.
    pub(super) fn replace(&mut self, worker: u32, id: u32) {
        let mut config = self.proc(worker).config.clone();
        config.worker = id;
        config.seed = config.seed.wrapping_add(u64::from(id));
        config.out = self.dir.join(format!("worker-{id}.jsonl"));
        self.start(config);
    }

    /// Writes `line` on `worker`'s stdin (an election worker's leader
    /// resigns on `resign`).
    pub(super) async fn tell(&mut self, worker: u32, line: &str) -> std::io::Result<()> {
        match self.proc(worker).stdin.as_mut() {
            Some(stdin) => stdin.write_all(format!("{line}\n").as_bytes()).await,
            None => Ok(()),
        }
    }

    /// Every worker's records so far (files are written unbuffered).
    pub(super) fn records(&self) -> Records {
        self.procs
            .iter()
            .flat_map(|p| read_records(&p.config.out).unwrap_or_default())
            .collect()
    }

    /// Every worker's holds granted at or after `ns`, so far.
    pub(super) fn holds_since(&self, ns: u64) -> Vec<crate::chaos::record::Hold> {
        let mut holds = self.records().holds;
        holds.retain(|h| h.granted_ns >= ns);
        holds
    }

    /// Whether `worker` is inside a hold right now, as its records show: a
    /// grant without its end. Records are written unbuffered at the grant
    /// and at the end, so a stopped or killed worker's file is up to date.
    pub(super) fn in_hold(&mut self, worker: u32) -> bool {
        let out = self.proc(worker).config.out.clone();
        let records: Records = read_records(&out).unwrap_or_default().into_iter().collect();
        records.holds.iter().any(|h| h.open)
    }

    pub(super) fn pid(&mut self, worker: u32) -> u32 {
        self.proc(worker).pid
    }

    /// Forgets the announcements made so far.
    pub(super) fn drain(&mut self) {
        while self.held.try_recv().is_ok() {}
    }

    /// The next grant announced by a worker `accept`s, before `deadline`.
    pub(super) async fn next_grant(
        &mut self,
        deadline: Instant,
        accept: impl Fn(u32) -> bool,
    ) -> Option<Held> {
        let deadline = tokio::time::Instant::from_std(deadline);
        for _ in 0..1_000_000 {
            match tokio::time::timeout_at(deadline, self.held.recv()).await {
                Ok(Some(held)) if accept(held.worker) => return Some(held),
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => return None,
            }
        }
        None
    }

    /// Asks every worker to stop, waits (kills after [`STOP_TIMEOUT`]) and
    /// reads their records.
    pub(super) async fn stop(mut self) -> (Vec<Record>, Vec<String>) {
        let mut problems = Vec::new();
        for proc in self.procs.iter_mut().filter(|p| !p.killed) {
            // A worker left stopped by a failed step must run to exit.
            let _ = signal(proc.pid, Signal::SIGCONT);
            if let Some(mut stdin) = proc.stdin.take() {
                let _ = stdin.write_all(b"stop\n").await;
            }
        }
        let mut records = Vec::new();
        for proc in &mut self.procs {
            let id = proc.config.worker;
            match tokio::time::timeout(STOP_TIMEOUT, proc.child.wait()).await {
                _ if proc.killed => {}
                Ok(Ok(status)) if status.success() => {}
                Ok(Ok(status)) => problems.push(format!("worker {id} exited with {status}")),
                Ok(Err(err)) => problems.push(format!("worker {id}: {err}")),
                Err(_) => {
                    let _ = proc.child.kill().await;
                    problems.push(format!("worker {id} did not stop within {STOP_TIMEOUT:?}"));
                }
            }
            match read_records(&proc.config.out) {
                Ok(mut r) => records.append(&mut r),
                Err(err) => problems.push(format!("worker {id} records: {err}")),
            }
        }
        (records, problems)
    }
}

/// The probe: one `try_lock` on a fresh key every [`PROBE_EVERY`].
pub(super) struct Probe {
    stop: Arc<AtomicBool>,
    last_granted_ns: Arc<AtomicU64>,
    thread: std::thread::JoinHandle<Vec<Attempt>>,
}

impl Probe {
    /// Starts the probe on a thread and runtime of its own, so that its
    /// timings measure the client, not the suite's proxies sharing a runtime.
    pub(super) fn start(urls: Vec<String>, ttl: Duration, name: String, run_for: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let last_granted_ns = Arc::new(AtomicU64::new(0));
        let flag = Arc::clone(&stop);
        let granted = Arc::clone(&last_granted_ns);
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a Tokio runtime for the probe");
            runtime.block_on(probe(urls, ttl, name, run_for, flag, granted))
        });
        Self {
            stop,
            last_granted_ns,
            thread,
        }
    }

    /// Whether a probe that started at or after `ns` was granted its lock.
    pub(super) fn granted_since(&self, ns: u64) -> bool {
        self.last_granted_ns.load(Ordering::Relaxed) >= ns
    }

    pub(super) async fn stop(self) -> Vec<Attempt> {
        self.stop.store(true, Ordering::Relaxed);
        let thread = self.thread;
        blocking(move || thread.join().unwrap_or_default()).await
    }
}

async fn probe(
    urls: Vec<String>,
    ttl: Duration,
    name: String,
    run_for: Duration,
    stop: Arc<AtomicBool>,
    last_granted_ns: Arc<AtomicU64>,
) -> Vec<Attempt> {
    let redlock = Redlock::builder(&urls)
        .ttl(ttl)
        .node_timeout(NODE_TIMEOUT)
        .connect_timeout(Duration::from_secs(1))
        .build()
        .await
        .expect("the probe's client builds");
    let deadline = Instant::now() + run_for;
    let mut attempts = Vec::new();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
        n += 1;
        let key = format!("probe:{name}:{n}");
        let start_ns = mono_ns();
        let result = redlock.lock(key.as_str()).ttl(ttl).wait(Wait::No).await;
        let end_ns = mono_ns();
        let (outcome, error) = match result {
            Ok(guard) => {
                last_granted_ns.fetch_max(start_ns, Ordering::Relaxed);
                // Released in the background.
                drop(guard);
                (Outcome::Granted, None)
            }
            Err(error) => (worker::outcome(&error), Some(error.to_string())),
        };
        attempts.push(Attempt {
            worker: u32::MAX,
            key,
            api: Api::TryLock,
            start_ns,
            end_ns,
            outcome,
            error,
        });
        tokio::time::sleep(PROBE_EVERY).await;
    }
    attempts
}

/// How late a thread must wake up for the machine to count as stalled.
pub const STALL_THRESHOLD: Duration = Duration::from_millis(10);

/// Watches the machine's scheduling: a thread that sleeps 1 ms at a time and
/// records every wake-up later than [`STALL_THRESHOLD`]. On a loaded machine
/// (other builds, other test suites) a runnable thread can wait hundreds of
/// milliseconds for a CPU; timings taken meanwhile say nothing about the
/// client, and the checker leaves them out.
pub struct LagMonitor {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<(u64, u64)>>,
}

impl LagMonitor {
    /// Starts watching, for at most `run_for`.
    pub fn start(run_for: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let tick = Duration::from_millis(1);
            let deadline = Instant::now() + run_for;
            let mut stalls = Vec::new();
            while !flag.load(Ordering::Relaxed) && Instant::now() < deadline {
                let before = mono_ns();
                std::thread::sleep(tick);
                let after = mono_ns();
                if after - before > nanos(tick + STALL_THRESHOLD) {
                    stalls.push((before + nanos(tick), after));
                }
            }
            stalls
        });
        Self { stop, thread }
    }

    /// Stops and returns the stalls, as (start, end) on the shared clock.
    pub async fn stop(self) -> Vec<(u64, u64)> {
        self.stop.store(true, Ordering::Relaxed);
        let thread = self.thread;
        blocking(move || thread.join().unwrap_or_default()).await
    }
}

/// Sends `signal` to process `pid`.
pub(super) fn signal(pid: u32, signal: Signal) -> std::io::Result<()> {
    let pid = i32::try_from(pid).map_err(std::io::Error::other)?;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal).map_err(std::io::Error::from)
}
