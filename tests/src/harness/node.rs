//! One real server process (`redis-server` or `valkey-server`) and a small
//! synchronous client for assertions.

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use redis::{Cmd, FromRedisValue, IntoConnectionInfo, RedisResult, ToRedisArgs, Value};

use super::process::{self, LOG_FILE};
use super::server;

/// How long a server may take to answer its first request before the start
/// counts as failed.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(5);

/// Connect, read and write timeout of the assertion client.
///
/// Short, so that an assertion against a paused node fails after this long
/// instead of hanging the test.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(1);

/// How many fresh ports [`RedisNode::start`] tries when the chosen port was
/// taken by another process between picking it and the server binding it.
const START_ATTEMPTS: usize = 20;

/// Options for [`RedisNode::start_with`].
#[derive(Clone, Debug, Default)]
pub struct NodeOptions {
    /// Require this password (`--requirepass`). The assertion client of the
    /// node authenticates with it automatically; [`RedisNode::url`] does not
    /// contain it (use [`RedisNode::url_with_password`]).
    pub password: Option<String>,
    /// Extra server arguments, appended after the harness's own, so
    /// they override them (for example `["--appendonly", "yes"]`).
    pub extra_args: Vec<String>,
    /// Extra environment variables of the server process, on top of the
    /// test's own (for example an `LD_PRELOAD` library that shifts the
    /// server's wall clock; see the chaos suite).
    pub env: Vec<(String, String)>,
    /// Also listen for TLS, on a second port ([`RedisNode::tls_port`]).
    /// The plain port stays open for the assertion client.
    pub tls: Option<TlsOptions>,
    /// Run this server binary instead of the one every other node runs
    /// ([`server`](crate::server)): for clusters of Redis and Valkey mixed.
    pub bin: Option<PathBuf>,
    /// Run in Redis Cluster mode (`--cluster-enabled yes`, config file in the
    /// data dir), with a cluster bus port of its own picked like the main
    /// port ([`RedisNode::cluster_port`]) and announced on `127.0.0.1`. See
    /// [`ShardedNode`](crate::ShardedNode), which forms clusters of these.
    pub cluster: bool,
}

/// TLS settings of a [`RedisNode`] (see [`TestCerts`](crate::TestCerts)).
#[derive(Clone, Debug)]
pub struct TlsOptions {
    /// The server certificate (`--tls-cert-file`).
    pub cert_file: PathBuf,
    /// Its private key (`--tls-key-file`).
    pub key_file: PathBuf,
    /// The CA that client certificates must come from (`--tls-ca-cert-file`).
    pub ca_file: PathBuf,
    /// Require a client certificate (`--tls-auth-clients yes`).
    pub auth_clients: bool,
}

/// A server process (`redis-server` or `valkey-server`, see
/// [`server`](crate::server())) on a free loopback port, killed when dropped.
///
/// The server listens on `127.0.0.1` only, with no persistence
/// (`--save "" --appendonly no`) and its own data dir under
/// [`harness_root`](crate::harness_root). Dropping the node kills the process
/// (`SIGKILL`), reaps it and removes the data dir, also when the test panics.
///
/// Every method takes `&self`, so a test can kill, pause or restart a node
/// from another thread while a lock operation runs against it.
///
/// The assertion helpers ([`get`](Self::get), [`set`](Self::set), ...) open a
/// new connection per call with [`CLIENT_TIMEOUT`] and panic with a message
/// naming the node if the request fails; [`try_command`](Self::try_command)
/// and [`ping`](Self::ping) return the error instead.
pub struct RedisNode {
    port: u16,
    tls_port: Option<u16>,
    cluster_port: Option<u16>,
    options: NodeOptions,
    dir: PathBuf,
    /// `None` after [`kill`](Self::kill) until the next restart.
    process: Mutex<Option<Child>>,
}

impl RedisNode {
    /// Starts a server with default [`NodeOptions`].
    ///
    /// # Panics
    /// If the server binary cannot be run or does not answer within
    /// [`STARTUP_TIMEOUT`].
    pub fn start() -> Self {
        Self::start_with(NodeOptions::default())
    }

    /// Starts a server with `options`.
    ///
    /// The port is picked by binding port 0 and released just before the
    /// server binds it, so another process may take it in between; the start
    /// is then retried on another port.
    ///
    /// # Panics
    /// If the server binary cannot be run, exits during startup for a reason
    /// other than a taken port, or does not answer within [`STARTUP_TIMEOUT`].
    pub fn start_with(options: NodeOptions) -> Self {
        let dir = process::new_data_dir();
        for _ in 0..START_ATTEMPTS {
            let port = free_port();
            let tls_port = options.tls.as_ref().map(|_| free_port());
            // A port just released may come back from the next bind.
            let cluster_port = options.cluster.then(|| {
                std::iter::repeat_with(free_port)
                    .find(|&bus| bus != port && Some(bus) != tls_port)
                    .expect("an endless supply of ports")
            });
            match launch(port, tls_port, cluster_port, &dir, &options) {
                Ok(child) => {
                    return Self {
                        port,
                        tls_port,
                        cluster_port,
                        options,
                        dir,
                        process: Mutex::new(Some(child)),
                    };
                }
                Err(LaunchError::PortTaken) => process::wipe_data(&dir),
                Err(LaunchError::Failed(why)) => {
                    let _ = fs::remove_dir_all(&dir);
                    panic!("{why}");
                }
            }
        }
        let _ = fs::remove_dir_all(&dir);
        panic!(
            "{}: every one of {START_ATTEMPTS} free ports was taken before it could bind",
            server::server_bin().display()
        );
    }

    /// The cluster bus port of a node started with [`NodeOptions::cluster`].
    pub fn cluster_port(&self) -> Option<u16> {
        self.cluster_port
    }

    /// The TCP port on `127.0.0.1`; stays the same across [`restart`](Self::restart).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The TLS port on `127.0.0.1` of a node started with
    /// [`NodeOptions::tls`]; stays the same across [`restart`](Self::restart).
    pub fn tls_port(&self) -> Option<u16> {
        self.tls_port
    }

    /// `rediss://127.0.0.1:TLS_PORT`, without a password.
    ///
    /// # Panics
    /// If the node was started without [`NodeOptions::tls`].
    pub fn tls_url(&self) -> String {
        let port = self
            .tls_port
            .unwrap_or_else(|| panic!("{self} was started without TLS"));
        format!("rediss://127.0.0.1:{port}")
    }

    /// `redis://127.0.0.1:PORT`, without a password.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `redis://:PASSWORD@127.0.0.1:PORT`, with `password` percent-encoded.
    ///
    /// Any password can be given, to test a wrong one.
    pub fn url_with_password(&self, password: &str) -> String {
        format!(
            "redis://:{}@127.0.0.1:{}",
            percent_encode(password),
            self.port
        )
    }

    /// The options the node was started with.
    pub fn options(&self) -> &NodeOptions {
        &self.options
    }

    /// The node's data dir (working directory, pid file `redis.pid`, log `redis.log`).
    pub fn data_dir(&self) -> &Path {
        &self.dir
    }

    /// The pid of the server process, or `None` after [`kill`](Self::kill) or
    /// if the process has exited.
    pub fn pid(&self) -> Option<u32> {
        let mut process = self.process();
        if running(&mut process) {
            process.as_ref().map(Child::id)
        } else {
            None
        }
    }

    /// True while the server process exists, including while it is paused.
    pub fn is_running(&self) -> bool {
        running(&mut self.process())
    }

    /// Kills the server with `SIGKILL` and waits for it to exit: no shutdown
    /// handling, open connections are reset. Does nothing if it is not running.
    pub fn kill(&self) {
        let mut process = self.process();
        self.kill_locked(&mut process);
    }

    /// Stops the server with `SIGSTOP`, as a long GC pause or a frozen VM
    /// would: connections are accepted by the kernel but nothing is answered.
    ///
    /// Returns once the process is stopped.
    ///
    /// # Panics
    /// If the server is not running.
    pub fn pause(&self) {
        let pid = self.expect_pid("pause");
        process::send_signal(pid, Signal::SIGSTOP)
            .unwrap_or_else(|err| panic!("{self}: SIGSTOP failed: {err}"));
        process::wait_for_stopped_state(pid, true);
    }

    /// Continues a [`pause`](Self::pause)d server with `SIGCONT`; it then
    /// answers the requests that queued up meanwhile.
    ///
    /// Returns once the process is no longer stopped.
    ///
    /// # Panics
    /// If the server is not running.
    pub fn resume(&self) {
        let pid = self.expect_pid("resume");
        process::send_signal(pid, Signal::SIGCONT)
            .unwrap_or_else(|err| panic!("{self}: SIGCONT failed: {err}"));
        process::wait_for_stopped_state(pid, false);
    }

    /// Starts the server again on the same port with an empty data set, as a
    /// node that crashed and came back without persistence would. A running
    /// server is killed first.
    ///
    /// # Panics
    /// If the server does not come back within [`STARTUP_TIMEOUT`] (for
    /// example because another process took the port meanwhile).
    pub fn restart(&self) {
        self.restart_inner(true);
    }

    /// Like [`restart`](Self::restart), but keeps the data dir, so a server
    /// started with persistence in [`NodeOptions::extra_args`] (for example
    /// `--appendonly yes --appendfsync always`) comes back with its keys.
    ///
    /// # Panics
    /// As [`restart`](Self::restart).
    pub fn restart_keeping_data(&self) {
        self.restart_inner(false);
    }

    fn restart_inner(&self, wipe: bool) {
        let mut process = self.process();
        self.kill_locked(&mut process);
        if wipe {
            process::wipe_data(&self.dir);
        }
        // The port was ours a moment ago; if someone grabbed it, they may let
        // go soon (a port probe), so keep trying until the deadline.
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            match launch(
                self.port,
                self.tls_port,
                self.cluster_port,
                &self.dir,
                &self.options,
            ) {
                Ok(child) => {
                    *process = Some(child);
                    return;
                }
                Err(LaunchError::PortTaken) if Instant::now() < deadline => {
                    thread::sleep(Duration::from_millis(20));
                }
                Err(LaunchError::PortTaken) => {
                    panic!("{self}: cannot restart, port {} stays taken", self.port)
                }
                Err(LaunchError::Failed(why)) => panic!("{why}"),
            }
        }
    }

    /// A new synchronous connection with [`CLIENT_TIMEOUT`], authenticated if
    /// the node has a password. It does not send `CLIENT SETINFO`, so it adds
    /// nothing to [`commandstats`](Self::commandstats) on connect.
    pub fn connection(&self) -> RedisResult<redis::Connection> {
        open_connection(self.port, self.options.password.as_deref(), CLIENT_TIMEOUT)
    }

    /// `PING`; an error if the node is down, paused (a timeout after
    /// [`CLIENT_TIMEOUT`]) or refuses it.
    pub fn ping(&self) -> RedisResult<()> {
        let reply: String = redis::cmd("PING").query(&mut self.connection()?)?;
        if reply == "PONG" {
            Ok(())
        } else {
            Err(redis::RedisError::from(io::Error::other(format!(
                "PING answered {reply:?}"
            ))))
        }
    }

    /// Runs any command, for example `node.try_command(["CONFIG", "GET", "maxmemory"])`.
    /// A Redis error reply is an `Err`.
    pub fn try_command<I, A>(&self, args: I) -> RedisResult<Value>
    where
        I: IntoIterator<Item = A>,
        A: ToRedisArgs,
    {
        build(args).query(&mut self.connection()?)
    }

    /// The server's clock (`TIME`) in microseconds: what a fenced grant's
    /// token is at least.
    ///
    /// # Panics
    /// If the node cannot be reached.
    pub fn clock_us(&self) -> u64 {
        let (seconds, micros): (u64, u64) =
            redis::from_redis_value(self.command(["TIME"])).expect("TIME answers two numbers");
        seconds * 1_000_000 + micros
    }

    /// Runs any command and returns its reply.
    ///
    /// # Panics
    /// If the node cannot be reached or answers with an error.
    pub fn command<I, A>(&self, args: I) -> Value
    where
        I: IntoIterator<Item = A>,
        A: ToRedisArgs,
    {
        self.expect(&build(args))
    }

    /// [`command`](Self::command) on a connection that waits up to
    /// `timeout` instead of [`CLIENT_TIMEOUT`]: for administration that may
    /// take longer on a loaded machine (a `CLUSTER SETSLOT` saves the
    /// cluster configuration with an fsync, a `MIGRATE` waits for the
    /// target).
    ///
    /// # Panics
    /// If the node cannot be reached or answers with an error.
    pub fn command_within<I, A>(&self, timeout: Duration, args: I) -> Value
    where
        I: IntoIterator<Item = A>,
        A: ToRedisArgs,
    {
        let cmd = build(args);
        open_connection(self.port, self.options.password.as_deref(), timeout)
            .and_then(|mut con| cmd.query(&mut con))
            .unwrap_or_else(|err| panic!("{self}: `{}` failed: {err}", describe(&cmd)))
    }

    /// `GET key`.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Option<Vec<u8>> {
        self.expect(redis::cmd("GET").arg(key.as_ref()))
    }

    /// `SET key value` (no expiry).
    pub fn set(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) {
        self.expect::<()>(redis::cmd("SET").arg(key.as_ref()).arg(value.as_ref()));
    }

    /// `EXISTS key`.
    pub fn exists(&self, key: impl AsRef<[u8]>) -> bool {
        self.expect::<i64>(redis::cmd("EXISTS").arg(key.as_ref())) > 0
    }

    /// `KEYS pattern`, sorted so assertions do not depend on Redis's order.
    pub fn keys(&self, pattern: impl AsRef<[u8]>) -> Vec<Vec<u8>> {
        let mut keys: Vec<Vec<u8>> = self.expect(redis::cmd("KEYS").arg(pattern.as_ref()));
        keys.sort();
        keys
    }

    /// `PTTL key`: remaining milliseconds, `-1` without expiry, `-2` if missing.
    pub fn pttl(&self, key: impl AsRef<[u8]>) -> i64 {
        self.expect(redis::cmd("PTTL").arg(key.as_ref()))
    }

    /// Calls per command since start or [`reset_stats`](Self::reset_stats),
    /// from `INFO commandstats`: lower-case names such as `"evalsha"`, `"set"`,
    /// subcommands as `"script|load"`. Commands never called are absent.
    ///
    /// In Redis 7 `calls` includes calls that failed while running (such as an
    /// `EVALSHA` answered with `NOSCRIPT`) but not ones rejected before running
    /// (unknown command, wrong arity, `NOAUTH`). The `INFO` call made here is
    /// counted from the next call on.
    pub fn commandstats(&self) -> BTreeMap<String, u64> {
        let info: String = self.expect(redis::cmd("INFO").arg("commandstats"));
        parse_commandstats(&info)
    }

    /// `CONFIG SET appendfsync <appendfsync>` then `appendonly <appendonly>`,
    /// and, when that switched AOF on, waits (up to 30 s) until the server
    /// has written its AOF in the background: until then it syncs none, and
    /// a `WAITAOF` waits for it.
    ///
    /// # Panics
    /// If the node refuses, or the AOF is not written within 30 s.
    pub fn persist(&self, appendonly: &str, appendfsync: &str) {
        self.command(["CONFIG", "SET", "appendfsync", appendfsync]);
        self.command(["CONFIG", "SET", "appendonly", appendonly]);
        let since = std::time::Instant::now();
        loop {
            let info: String = self.expect(redis::cmd("INFO").arg("persistence"));
            let busy = ["aof_rewrite_in_progress:1", "aof_rewrite_scheduled:1"]
                .iter()
                .any(|busy| info.contains(busy));
            if !busy {
                return;
            }
            assert!(
                since.elapsed() < Duration::from_secs(30),
                "{self}: AOF not written within 30 s"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `CONFIG RESETSTAT`: zeroes [`commandstats`](Self::commandstats).
    pub fn reset_stats(&self) {
        self.expect::<()>(redis::cmd("CONFIG").arg("RESETSTAT"));
    }

    fn expect<T: FromRedisValue>(&self, cmd: &Cmd) -> T {
        let result = self.connection().and_then(|mut con| cmd.query(&mut con));
        result.unwrap_or_else(|err| panic!("{self}: `{}` failed: {err}", describe(cmd)))
    }

    fn process(&self) -> MutexGuard<'_, Option<Child>> {
        // A panic while holding the lock leaves the child in a usable state.
        self.process.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn expect_pid(&self, action: &str) -> u32 {
        self.pid()
            .unwrap_or_else(|| panic!("{self}: cannot {action}, the server is not running"))
    }

    fn kill_locked(&self, process: &mut Option<Child>) {
        if let Some(mut child) = process.take() {
            // Fails only if the child was already reaped, which is fine.
            let _ = child.kill();
            let _ = child.wait();
            process::remove_pid_file(&self.dir);
        }
    }
}

impl fmt::Display for RedisNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "redis node 127.0.0.1:{}", self.port)
    }
}

impl fmt::Debug for RedisNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisNode")
            .field("port", &self.port)
            .field("tls_port", &self.tls_port)
            .field("dir", &self.dir)
            .field("password", &self.options.password.as_ref().map(|_| "***"))
            .field("extra_args", &self.options.extra_args)
            .finish_non_exhaustive()
    }
}

impl Drop for RedisNode {
    fn drop(&mut self) {
        let mut process = self.process();
        self.kill_locked(&mut process);
        let _ = fs::remove_dir_all(&self.dir);
    }
}

fn running(process: &mut Option<Child>) -> bool {
    match process {
        // `try_wait` also reaps a server that exited on its own (for example
        // after `SHUTDOWN` or `DEBUG SEGFAULT`); a stopped process counts as running.
        Some(child) => matches!(child.try_wait(), Ok(None)),
        None => false,
    }
}

enum LaunchError {
    /// The server could not bind its port: try another one (or later).
    PortTaken,
    /// Anything else: a message for the panic.
    Failed(String),
}

/// A port that was free a moment ago.
fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .unwrap_or_else(|err| panic!("cannot bind a loopback port: {err}"))
}

/// Spawns a server on `port` (and `tls_port`) in `dir` and waits until it
/// answers as itself, with its data set loaded.
fn launch(
    port: u16,
    tls_port: Option<u16>,
    cluster_port: Option<u16>,
    dir: &Path,
    options: &NodeOptions,
) -> Result<Child, LaunchError> {
    let bin = options.bin.clone().unwrap_or_else(server::server_bin);
    let mut command = Command::new(&bin);
    command
        .current_dir(dir)
        .arg("--port")
        .arg(port.to_string())
        .args(["--bind", "127.0.0.1", "--protected-mode", "no"])
        .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
        .arg("--dir")
        .arg(dir)
        .arg("--logfile")
        .arg(dir.join(LOG_FILE));
    if let Some(password) = &options.password {
        command.arg("--requirepass").arg(password);
    }
    if let (Some(tls), Some(tls_port)) = (&options.tls, tls_port) {
        command
            .arg("--tls-port")
            .arg(tls_port.to_string())
            .arg("--tls-cert-file")
            .arg(&tls.cert_file)
            .arg("--tls-key-file")
            .arg(&tls.key_file)
            .arg("--tls-ca-cert-file")
            .arg(&tls.ca_file)
            .arg("--tls-auth-clients")
            .arg(if tls.auth_clients { "yes" } else { "no" });
    }
    if let Some(bus) = cluster_port {
        command
            .args(["--cluster-enabled", "yes"])
            .args(["--cluster-config-file", "nodes.conf"])
            .arg("--cluster-port")
            .arg(bus.to_string())
            .args(["--cluster-announce-ip", "127.0.0.1"]);
    }
    command.args(&options.extra_args);
    command.envs(options.env.iter().map(|(name, value)| (name, value)));
    // The log goes to the data dir. Inherited stdout/stderr would also keep the
    // test's pipes open, which nextest reports as a leak.
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());

    let mut child = command
        .spawn()
        .map_err(|err| LaunchError::Failed(server::cannot_run(&bin, &err)))?;
    process::write_pid_file(dir, child.id());

    let deadline = Instant::now() + STARTUP_TIMEOUT;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            process::remove_pid_file(dir);
            let log = process::log_tail(dir, 2000);
            // Either port: the TLS one is reported as "port N (tls)".
            if log.contains("Failed listening on port") || log.contains("Address already in use") {
                return Err(LaunchError::PortTaken);
            }
            return Err(LaunchError::Failed(format!(
                "{} on port {port} exited during startup ({status}); log {}:\n{log}",
                bin.display(),
                dir.join(LOG_FILE).display()
            )));
        }
        // Checking the pid tells our server apart from another test's server
        // that won a race for the same port (ours then exits, seen above).
        let probe_timeout = Duration::from_millis(250);
        if let Ok(server_pid) = server_pid(port, options.password.as_deref(), probe_timeout)
            && server_pid == child.id()
        {
            return Ok(child);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            process::remove_pid_file(dir);
            return Err(LaunchError::Failed(format!(
                "{} on port {port} did not answer within {STARTUP_TIMEOUT:?}; log {}:\n{}",
                bin.display(),
                dir.join(LOG_FILE).display(),
                process::log_tail(dir, 2000)
            )));
        }
        thread::sleep(Duration::from_millis(5));
    }
}

/// The `process_id` the server on `port` reports in `INFO`, once it has
/// finished loading its data set.
///
/// `INFO` is answered while an AOF or RDB file is still loading, when every
/// data command fails with `LOADING`, so `loading:0` is part of being ready.
fn server_pid(port: u16, password: Option<&str>, timeout: Duration) -> RedisResult<u32> {
    let mut con = open_connection(port, password, timeout)?;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .arg("persistence")
        .query(&mut con)?;
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    if field("loading") != Some("0") {
        return Err(io::Error::other("still loading its data set").into());
    }
    field("process_id")
        .and_then(|pid| pid.parse().ok())
        .ok_or_else(|| io::Error::other("INFO server has no process_id").into())
}

fn open_connection(
    port: u16,
    password: Option<&str>,
    timeout: Duration,
) -> RedisResult<redis::Connection> {
    let info = format!("redis://127.0.0.1:{port}").into_connection_info()?;
    let mut settings = info.redis_settings().clone().set_skip_set_lib_name();
    if let Some(password) = password {
        settings = settings.set_password(password);
    }
    let client = redis::Client::open(info.set_redis_settings(settings))?;
    let con = client.get_connection_with_timeout(timeout)?;
    con.set_read_timeout(Some(timeout))?;
    con.set_write_timeout(Some(timeout))?;
    Ok(con)
}

fn build<I, A>(args: I) -> Cmd
where
    I: IntoIterator<Item = A>,
    A: ToRedisArgs,
{
    let mut cmd = Cmd::new();
    for arg in args {
        cmd.arg(arg);
    }
    cmd
}

/// The command as text for a panic message, shortened if long.
fn describe(cmd: &Cmd) -> String {
    let words: Vec<String> = cmd
        .args_iter()
        .map(|arg| match arg {
            redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            _ => String::from("<cursor>"),
        })
        .collect();
    let text = words.join(" ");
    match text.char_indices().nth(120) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text,
    }
}

/// Parses `cmdstat_<name>:calls=<n>,usec=...` lines.
fn parse_commandstats(info: &str) -> BTreeMap<String, u64> {
    info.lines()
        .filter_map(|line| {
            let (name, fields) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = fields
                .split(',')
                .find_map(|field| field.strip_prefix("calls="))?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
fn percent_encode(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_commandstats() {
        let info = "# Commandstats\r\n\
            cmdstat_evalsha:calls=3,usec=30,usec_per_call=10.00,rejected_calls=0,failed_calls=1\r\n\
            cmdstat_script|load:calls=1,usec=5,usec_per_call=5.00,rejected_calls=0,failed_calls=0\r\n";
        let stats = parse_commandstats(info);
        assert_eq!(stats.get("evalsha"), Some(&3));
        assert_eq!(stats.get("script|load"), Some(&1));
        assert_eq!(stats.len(), 2);
    }

    #[test]
    fn percent_encodes_passwords() {
        assert_eq!(percent_encode("a b@c:d/é"), "a%20b%40c%3Ad%2F%C3%A9");
        assert_eq!(percent_encode("Plain-1.2_3~"), "Plain-1.2_3~");
    }
}
