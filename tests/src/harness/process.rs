//! Where harness servers live on disk, and how leftovers are recognised.
//!
//! Every server the harness starts runs with its working directory set to its
//! own data dir `<harness root>/<test pid>-<n>/`, which holds a `redis.pid`
//! file. A process is treated as a harness server only when its `comm` is
//! `redis-server` or `valkey-server` (or the name of the configured binary)
//! *and* its working directory is that data dir, so a recycled pid or an
//! unrelated server on the machine is never signalled.

use std::env;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Once;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;

use super::server;

/// Environment variable that overrides the harness root directory.
///
/// `make test` sets it to `$CARGO_TARGET_DIR/redis-harness` (or
/// `target/redis-harness`) so that its cleanup step looks in the same place.
pub const HARNESS_DIR_ENV: &str = "REDLOCK_HARNESS_DIR";

/// Name of the pid file written into every data dir.
pub(crate) const PID_FILE: &str = "redis.pid";

/// Name of the server log inside every data dir.
pub(crate) const LOG_FILE: &str = "redis.log";

/// The directory under which every harness server gets its data dir.
///
/// In order of preference: `$REDLOCK_HARNESS_DIR`; `redis-harness/` in the Cargo
/// target directory that holds the running test binary (found by its
/// `CACHEDIR.TAG`, so `CARGO_TARGET_DIR` and nextest both work); `target/redis-harness/`
/// in the workspace.
pub fn harness_root() -> &'static Path {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        if let Some(dir) = env::var_os(HARNESS_DIR_ENV).filter(|dir| !dir.is_empty()) {
            let dir = PathBuf::from(dir);
            return if dir.is_absolute() {
                dir
            } else {
                env::current_dir().map(|cwd| cwd.join(&dir)).unwrap_or(dir)
            };
        }
        if let Ok(exe) = env::current_exe()
            && let Some(target) = exe
                .ancestors()
                .skip(1)
                .find(|dir| dir.join("CACHEDIR.TAG").is_file())
        {
            return target.join("redis-harness");
        }
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("the tests crate lives inside the workspace");
        workspace.join("target").join("redis-harness")
    })
}

/// Creates a fresh, empty data dir `<root>/<pid>-<n>/` for one node.
///
/// The first call in a process also sweeps data dirs left behind by test
/// processes that no longer exist (for example a test binary killed by a
/// timeout before its `Drop`s ran).
pub(crate) fn new_data_dir() -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    static SWEEP: Once = Once::new();

    let root = harness_root();
    SWEEP.call_once(|| sweep_dead_owners(root));
    let dir = root.join(format!(
        "{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    // A dir with this name can only exist if a previous process had our pid and
    // died without cleaning up: its server (if any) was already swept above.
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir)
        .unwrap_or_else(|err| panic!("cannot create harness dir {}: {err}", dir.display()));
    dir
}

/// Removes every entry of `dir` except the server log, so a restart starts
/// with no data (no `dump.rdb`, no `appendonlydir`) while the log keeps the
/// history of every incarnation.
pub(crate) fn wipe_data(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_name() == LOG_FILE {
            continue;
        }
        let path = entry.path();
        let result = if path.is_dir() {
            fs::remove_dir_all(&path)
        } else {
            fs::remove_file(&path)
        };
        if let Err(err) = result
            && err.kind() != io::ErrorKind::NotFound
        {
            panic!("cannot wipe {}: {err}", path.display());
        }
    }
}

pub(crate) fn write_pid_file(dir: &Path, pid: u32) {
    // Failing to write it only weakens leftover cleanup; the server itself is fine.
    let _ = fs::write(dir.join(PID_FILE), format!("{pid}\n"));
}

pub(crate) fn remove_pid_file(dir: &Path) {
    let _ = fs::remove_file(dir.join(PID_FILE));
}

fn read_pid_file(dir: &Path) -> Option<u32> {
    fs::read_to_string(dir.join(PID_FILE))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The last `max_bytes` of a node's server log, for panic messages.
pub(crate) fn log_tail(dir: &Path, max_bytes: usize) -> String {
    let log = fs::read(dir.join(LOG_FILE)).unwrap_or_default();
    let start = log.len().saturating_sub(max_bytes);
    String::from_utf8_lossy(&log[start..]).into_owned()
}

/// Sends `signal` to `pid`.
pub(crate) fn send_signal(pid: u32, signal: Signal) -> nix::Result<()> {
    let pid = i32::try_from(pid).map_err(|_| nix::errno::Errno::ESRCH)?;
    signal::kill(Pid::from_raw(pid), signal)
}

/// The scheduler state letter of `pid` from `/proc/<pid>/stat` (`R`, `S`, `T`, ...).
fn process_state(pid: u32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may itself contain ") ", so the
    // state is the first field after the *last* closing parenthesis.
    let after_comm = &stat[stat.rfind(')')? + 1..];
    after_comm.split_whitespace().next()?.chars().next()
}

/// Waits until `pid` is (`stopped == true`) or is no longer (`false`) in the
/// stopped state, so that a test's next request cannot race the signal.
pub(crate) fn wait_for_stopped_state(pid: u32, stopped: bool) {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        match process_state(pid) {
            // `T` is "stopped by a signal"; the process is gone if there is no state.
            Some(state) if (state == 'T') != stopped => {}
            _ => return,
        }
        if Instant::now() >= deadline {
            panic!("process {pid} did not change its stopped state to {stopped} within 2 s");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// True if `pid` is a server (`redis-server`, `valkey-server`) whose working
/// directory is `dir`.
fn is_harness_server(pid: u32, dir: &Path) -> bool {
    let comm = fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    if !server::is_server_name(comm.trim_end()) {
        return false;
    }
    let Ok(cwd) = fs::read_link(format!("/proc/{pid}/cwd")) else {
        return false;
    };
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    cwd == dir
}

/// Kills the servers of data dirs whose owning test process is gone, and
/// removes those dirs.
fn sweep_dead_owners(root: &Path) {
    let Ok(entries) = fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(owner) = name
            .to_str()
            .and_then(|name| name.split_once('-'))
            .and_then(|(owner, _)| owner.parse::<u32>().ok())
        else {
            continue;
        };
        // A live owner (or a recycled pid that looks like one) keeps its dirs:
        // at worst a leftover survives until `make test` cleans up.
        if owner == std::process::id() || Path::new(&format!("/proc/{owner}")).exists() {
            continue;
        }
        let dir = entry.path();
        if let Some(pid) = read_pid_file(&dir)
            && is_harness_server(pid, &dir)
        {
            let _ = send_signal(pid, Signal::SIGKILL);
        }
        let _ = fs::remove_dir_all(&dir);
    }
}
