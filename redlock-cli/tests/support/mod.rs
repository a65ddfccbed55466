//! Running the `redlock` binary against real Redis servers, with bounded waits.
#![allow(dead_code)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use redlock_tests::RedisCluster;

/// The binary under test.
pub(crate) const REDLOCK: &str = env!("CARGO_BIN_EXE_redlock");

/// Generous bound on any one run, for a busy 2-core machine: no test
/// asserts tight timings, only that things end.
pub(crate) const RUN_LIMIT: Duration = Duration::from_secs(20);

/// `redlock` with the test's environment stripped of what would change it.
pub(crate) fn redlock() -> Command {
    let mut command = Command::new(REDLOCK);
    command
        .env_remove("REDLOCK_NODES")
        .env_remove("REDLOCK_KEY_PREFIX")
        .env_remove("REDLOCK_TLS_CA")
        .env_remove("REDLOCK_TLS_CERT")
        .env_remove("REDLOCK_TLS_KEY")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    command
}

/// `redlock SUBCOMMAND --nodes <the cluster's URLs> --node-timeout 150ms`.
/// The node timeout is generous so that a busy machine does not turn a slow
/// answer into a failed vote.
pub(crate) fn redlock_on(cluster: &RedisCluster, subcommand: &str) -> Command {
    let mut command = redlock();
    command
        .arg(subcommand)
        .arg("--nodes")
        .arg(cluster.urls().join(","))
        .args(["--node-timeout", "150ms"]);
    command
}

/// What a finished run printed, and how it ended.
#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) status: ExitStatus,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
    pub(crate) elapsed: Duration,
}

impl Run {
    /// The exit code; panics (with the output) if redlock died of a signal.
    pub(crate) fn code(&self) -> i32 {
        self.status
            .code()
            .unwrap_or_else(|| panic!("redlock died of a signal: {self:#?}"))
    }

    /// Asserts the exit code, showing everything printed when it differs.
    #[track_caller]
    pub(crate) fn assert_code(&self, code: i32) -> &Self {
        assert_eq!(self.status.code(), Some(code), "unexpected exit: {self:#?}");
        assert!(
            !self.stderr.contains("panicked"),
            "redlock panicked: {self:#?}"
        );
        self
    }

    /// Every stdout line parsed as JSON.
    pub(crate) fn stdout_json(&self) -> Vec<serde_json::Value> {
        parse_lines(&self.stdout)
    }

    /// Every stderr line parsed as JSON.
    pub(crate) fn stderr_json(&self) -> Vec<serde_json::Value> {
        parse_lines(&self.stderr)
    }
}

fn parse_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"))
        })
        .collect()
}

/// A started `redlock`, with its output collected in the background.
pub(crate) struct Running {
    child: Child,
    started: Instant,
    stdout: thread::JoinHandle<String>,
    stderr: thread::JoinHandle<String>,
}

/// Starts `command` with its stdout and stderr captured.
pub(crate) fn start(command: &mut Command) -> Running {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start redlock");
    let stdout = reader(child.stdout.take().expect("piped stdout"));
    let stderr = reader(child.stderr.take().expect("piped stderr"));
    Running {
        child,
        started: Instant::now(),
        stdout,
        stderr,
    }
}

fn reader(mut pipe: impl Read + Send + 'static) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

impl Running {
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it is still running.
    pub(crate) fn is_running(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }

    /// Sends `signal` (such as `"TERM"`) with kill(1).
    pub(crate) fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} failed");
    }

    /// Waits at most `limit` for the exit; kills redlock and panics after.
    pub(crate) fn wait_within(mut self, limit: Duration) -> Run {
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                let stderr = self.stderr.join().unwrap_or_default();
                panic!("redlock still running after {limit:?}; stderr:\n{stderr}");
            }
            thread::sleep(Duration::from_millis(10));
        };
        let elapsed = self.started.elapsed();
        Run {
            status,
            stdout: self.stdout.join().expect("stdout reader"),
            stderr: self.stderr.join().expect("stderr reader"),
            elapsed,
        }
    }

    /// [`wait_within`](Self::wait_within) [`RUN_LIMIT`].
    pub(crate) fn wait(self) -> Run {
        self.wait_within(RUN_LIMIT)
    }
}

/// Runs `command` to the end (at most [`RUN_LIMIT`]).
pub(crate) fn run(command: &mut Command) -> Run {
    start(command).wait()
}

/// Polls `condition` every 10 ms until it holds, or panics after `within`.
#[track_caller]
pub(crate) fn eventually(what: &str, within: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    loop {
        if condition() {
            return;
        }
        assert!(Instant::now() < deadline, "not within {within:?}: {what}");
        thread::sleep(Duration::from_millis(10));
    }
}

/// Waits until `key` is on a majority of the cluster's nodes.
#[track_caller]
pub(crate) fn wait_for_lock(cluster: &RedisCluster, key: &str) {
    eventually(&format!("lock {key} taken"), RUN_LIMIT, || {
        cluster.nodes().iter().filter(|n| n.exists(key)).count() > cluster.len() / 2
    });
}

/// Asserts that `key` exists on no node.
#[track_caller]
pub(crate) fn assert_absent(cluster: &RedisCluster, key: &str) {
    for node in cluster.nodes() {
        assert!(!node.exists(key), "key {key} left on {}", node.url());
    }
}

/// A fresh empty directory for marker files, removed on drop.
pub(crate) struct Scratch(PathBuf);

impl Scratch {
    pub(crate) fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("redlock-cli-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create scratch dir");
        Self(dir)
    }

    pub(crate) fn path(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Whether process `pid` is gone (or a zombie waiting to be reaped).
pub(crate) fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // The state follows the command name in parentheses.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
    }
}
