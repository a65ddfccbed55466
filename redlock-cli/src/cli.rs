//! The command line: subcommands, options and their help texts.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use redlock_tokio::core::MAX_TTL_MS;

const EXIT_CODES: &str = "\
Exit codes:
  0        success (exec, elect: the command exited 0)
  1        exec: the lock is held by another owner (busy; see --busy-exit-code);
           elect --deadline: another process still leads;
           release: the value is held on no node (mistyped, expired or released
           already); nothing was deleted
  2        usage or configuration error (bad option, no nodes, bad URL, a
           host name that does not resolve, invalid TTL, even or duplicate
           nodes, password rejected, unreadable TLS file, TLS certificate
           rejected), or the key holds something else than a lock (a list, a
           hash, ...)
  3        no quorum: too many nodes down or too slow
  4        exec: the lock was lost while the command ran; the command was stopped
           (elect --once: the leadership was lost)
  126/127  exec, elect: the command could not be executed / was not found
  128+N    exec, elect: the command died of signal N (or redlock got signal N
           before the command started)
  other    exec, elect: the command's own exit code";

/// A distributed flock(1): run a command while holding a Redlock on N
/// independent Redis nodes.
#[derive(Debug, Parser)]
#[command(name = "redlock", version, after_help = EXIT_CODES)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) common: Common,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run a command while holding the lock, and release it at the end.
    ///
    /// Takes the lock on KEY (one attempt, unless --wait), runs COMMAND with
    /// the lock kept alive in the background, and releases the lock when
    /// COMMAND exits, whatever happens. If the lock is lost while COMMAND
    /// runs (another owner took it, or too many nodes failed until its
    /// validity ran out), COMMAND's process group gets SIGTERM, then SIGKILL
    /// after --kill-grace, and redlock exits with code 4.
    ///
    /// SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to redlock are forwarded to
    /// COMMAND's process group; if COMMAND has not exited --kill-grace later,
    /// it gets SIGKILL. The lock is released after COMMAND exits. Ctrl-Z
    /// (SIGTSTP) stops COMMAND along with redlock; the lock is not extended
    /// while stopped.
    ///
    /// COMMAND runs in its own process group (so it cannot read from the
    /// terminal), with these variables set: REDLOCK_KEY (KEY as given),
    /// REDLOCK_VALUE (this acquisition's unique value: it can release the
    /// lock, keep it private) and, with --fencing, REDLOCK_FENCING_TOKEN.
    ///
    /// A lock is a promise with limits: if redlock itself is stopped with
    /// SIGKILL or SIGSTOP, COMMAND goes on and the lock expires after --ttl.
    /// Let COMMAND check REDLOCK_FENCING_TOKEN or REDLOCK_VALUE where the
    /// protected resource can.
    // The usage is written out: clap's own lists `--nodes` as required
    // whenever REDLOCK_NODES provides it.
    #[command(
        after_help = EXIT_CODES,
        override_usage = "redlock exec [OPTIONS] <KEY> -- <COMMAND>..."
    )]
    Exec(ExecArgs),
    /// Show who holds a lock: its value, time left and fencing counter on every node.
    ///
    /// Prints the value held on each node. Whoever knows a lock's value can
    /// release it (`redlock release --value`): treat the output as
    /// privileged. Exits 3 when fewer than a quorum of nodes answered.
    #[command(after_help = EXIT_CODES, override_usage = "redlock status [OPTIONS] <KEY>")]
    Status(StatusArgs),
    /// Release a lock held by a known value, on every node.
    ///
    /// Deletes KEY only on the nodes where it still holds VALUE: a key held
    /// by another value is never touched. For a lock whose holder died or
    /// hung. Exits 0 once the value can no longer hold a quorum (nodes that
    /// failed to answer may keep it until its TTL), 1 when the value was held
    /// on no node (a typo, or already expired or released), 3 when too many
    /// nodes failed to tell. A holder that keeps the lock alive (`exec`)
    /// notices at its next extension that its value is gone from a quorum:
    /// it stops its command and exits 4, and the lock stays released.
    #[command(
        after_help = EXIT_CODES,
        override_usage = "redlock release [OPTIONS] --value <VALUE> <KEY>"
    )]
    Release(ReleaseArgs),
    /// Run a command while leading an election, and campaign again on loss.
    ///
    /// Campaigns for NAME (waiting while another process leads), runs
    /// COMMAND while leading, with the leadership renewed in the background
    /// every --retry-period. The leader steps down --renew-deadline after
    /// its last confirmed renewal, before any other process can be elected:
    /// COMMAND's process group then gets SIGTERM, then SIGKILL after
    /// --kill-grace, and redlock campaigns again (with --once, exits 4).
    /// When COMMAND exits by itself, redlock resigns (NAME is free at once)
    /// and exits with COMMAND's code. Signals are passed on as for `exec`.
    ///
    /// COMMAND gets REDLOCK_KEY (NAME), REDLOCK_TERM and
    /// REDLOCK_FENCING_TOKEN (both the term: larger than every earlier
    /// leader's; let the resources COMMAND writes refuse smaller ones).
    #[command(
        after_help = EXIT_CODES,
        override_usage = "redlock elect [OPTIONS] <NAME> -- <COMMAND>..."
    )]
    Elect(ElectArgs),
    /// Show who leads an election: its id, term and proclaimed value, on every node.
    ///
    /// Advisory: the leader may have stepped down by the time this prints.
    /// Exits 3 when fewer than a quorum of nodes answered.
    #[command(after_help = EXIT_CODES, override_usage = "redlock leader [OPTIONS] <NAME>")]
    Leader(LeaderArgs),
}

/// Options every subcommand takes, before or after its name
/// (`redlock -N URL exec ...` as well as `redlock exec -N URL ...`).
#[derive(Debug, Args)]
pub(crate) struct Common {
    /// The nodes that vote on the lock, comma-separated or repeated: each a
    /// Redis or Valkey master, `redis://[user:password@]host[:port][/db]`
    /// (`rediss://` for TLS), or a whole Redis Cluster as one node,
    /// `redis+cluster://host:port,host:port`. Use an odd number of
    /// independent nodes (no replicas of one another).
    #[arg(
        long,
        global = true,
        // Not `-n`: that is `flock -n`, "do not wait".
        short = 'N',
        env = "REDLOCK_NODES",
        value_delimiter = ',',
        value_name = "URL[,URL...]",
        hide_env_values = true
    )]
    pub(crate) nodes: Vec<String>,
    /// Prepended to KEY to form the Redis key, for example "lock:".
    #[arg(
        long,
        global = true,
        env = "REDLOCK_KEY_PREFIX",
        default_value = "",
        value_name = "PREFIX"
    )]
    pub(crate) key_prefix: String,
    /// How long one node may take to answer. Default: 1% of the TTL,
    /// between 10 ms and 50 ms.
    #[arg(long, global = true, value_parser = parse_duration, allow_hyphen_values = true, value_name = "DURATION")]
    pub(crate) node_timeout: Option<Duration>,
    /// How long connecting to one node may take.
    #[arg(long, global = true, value_parser = parse_duration, allow_hyphen_values = true, default_value = "1s", value_name = "DURATION")]
    pub(crate) connect_timeout: Duration,
    /// Trust only the CA certificate(s) in this PEM file for rediss://
    /// nodes. Default: the public (webpki) roots built into redlock; the
    /// system store and SSL_CERT_FILE are not read.
    #[arg(long, global = true, env = "REDLOCK_TLS_CA", value_name = "FILE")]
    pub(crate) tls_ca: Option<PathBuf>,
    /// Present this client certificate (PEM) to rediss:// nodes that
    /// require one (mutual TLS). Needs --tls-key.
    #[arg(
        long,
        global = true,
        env = "REDLOCK_TLS_CERT",
        value_name = "FILE",
        requires = "tls_key"
    )]
    pub(crate) tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(
        long,
        global = true,
        env = "REDLOCK_TLS_KEY",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    pub(crate) tls_key: Option<PathBuf>,
    /// Accept an even number of nodes. An even N tolerates no more
    /// failures than N-1: the extra node is wasted.
    #[arg(long, global = true)]
    pub(crate) allow_even: bool,
    /// Accept nodes whose maxmemory-policy may evict keys (anything but
    /// noeviction): a lock evicted there can be granted to another client.
    #[arg(long, global = true)]
    pub(crate) allow_eviction: bool,
    /// Refuse nodes that may lose locks when they restart (no AOF, or
    /// appendfsync other than always), exit 2. Default: accept them (said
    /// at WARN with -v).
    #[arg(long, global = true)]
    pub(crate) refuse_weak_persistence: bool,
    /// Count a node's vote only once its AOF has the write (WAITAOF behind
    /// every grant and extension). Needs Redis 7.2+ or Valkey with
    /// appendonly yes and appendfsync always; other nodes exit 2.
    #[arg(long, global = true)]
    pub(crate) wait_for_aof: bool,
    /// Refuse to start (exit 3) unless this many nodes answer at connect,
    /// or `all`. Default: start with whatever answers (a node missing is
    /// said on stderr).
    #[arg(long, global = true, value_parser = parse_required, value_name = "COUNT|all")]
    pub(crate) require_nodes: Option<usize>,
    /// Machine-readable output: one JSON object per line (exec: per event,
    /// on stderr, since stdout belongs to the command; status and release:
    /// the result, on stdout).
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// Print only errors (not progress, and not the busy message of exec).
    #[arg(long, short = 'q', global = true)]
    pub(crate) quiet: bool,
    /// Log the client's requests and decisions on stderr (RUST_LOG overrides the filter).
    #[arg(long, short = 'v', global = true)]
    pub(crate) verbose: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ExecArgs {
    /// How long the lock lives on each node unless extended. It is extended
    /// in the background while COMMAND runs (at half its TTL), so this bounds
    /// how long the lock outlives a redlock that was killed with SIGKILL.
    #[arg(long, value_parser = parse_ttl, allow_hyphen_values = true, default_value = "10s", value_name = "DURATION")]
    pub(crate) ttl: Duration,
    /// Wait for the lock if it is held (retrying every 50 to 200 ms), for at
    /// most --deadline, or without limit (also while nodes are down).
    /// Default: one attempt, and exit 1 at once if the lock is held, as
    /// `flock -n` (the usual need of a cron job on several hosts: run once,
    /// skip elsewhere).
    #[arg(long, short = 'w', overrides_with = "no_wait")]
    pub(crate) wait: bool,
    /// One attempt: exit 1 at once if the lock is held (the default).
    #[arg(long, overrides_with = "wait")]
    pub(crate) no_wait: bool,
    /// With --wait, give up (exit 1 if still held, 3 if nodes failed) after
    /// this long. Implies --wait.
    #[arg(long, value_parser = parse_duration, allow_hyphen_values = true, value_name = "DURATION", conflicts_with = "no_wait")]
    pub(crate) deadline: Option<Duration>,
    /// Take a fencing token with the lock (one more round trip) and export it
    /// as REDLOCK_FENCING_TOKEN: larger than every earlier holder's token
    /// (with --permits, every earlier holder's of the same permit slot).
    #[arg(long)]
    pub(crate) fencing: bool,
    /// Run while holding one of K permits of a semaphore (at most K holders
    /// of KEY at once; every user of KEY must give the same K). The permit
    /// is a lock on its slot, `{KEY}\0permit<i>`.
    #[arg(long, value_name = "K")]
    pub(crate) permits: Option<u32>,
    /// How long COMMAND has between SIGTERM and SIGKILL, when the lock is
    /// lost or redlock is told to stop.
    #[arg(long, value_parser = parse_duration, allow_hyphen_values = true, default_value = "5s", value_name = "DURATION")]
    pub(crate) kill_grace: Duration,
    /// The exit code when the lock is held by another owner, as `flock -E`.
    #[arg(long, short = 'E', default_value_t = 1, value_name = "CODE")]
    pub(crate) busy_exit_code: u8,
    /// The lock's name (the Redis key is the key prefix followed by it).
    pub(crate) key: String,
    /// The command to run and its arguments, after `--`.
    #[arg(last = true, required = true, num_args = 1.., value_name = "COMMAND")]
    pub(crate) command: Vec<OsString>,
}

impl ExecArgs {
    /// Whether to retry while the lock is held.
    pub(crate) fn waits(&self) -> bool {
        (self.wait || self.deadline.is_some()) && !self.no_wait
    }
}

#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// A semaphore of K permits (`exec --permits K`): show each permit's
    /// holder. Without it, a semaphore in use is found by the number of
    /// permits its masters keep.
    #[arg(long, value_name = "K")]
    pub(crate) permits: Option<u32>,
    /// The lock's name.
    pub(crate) key: String,
}

#[derive(Debug, Args)]
pub(crate) struct ReleaseArgs {
    /// The lock's name.
    pub(crate) key: String,
    /// The value to release, as `redlock status` shows it (or REDLOCK_VALUE
    /// inside `redlock exec`).
    #[arg(long, value_name = "VALUE")]
    pub(crate) value: String,
}

#[derive(Debug, Args)]
pub(crate) struct ElectArgs {
    /// The lease: how long the leadership lives on each node unless
    /// renewed, so how long NAME stays taken after a leader was killed.
    #[arg(long, value_parser = parse_lease, allow_hyphen_values = true, default_value = "10s", value_name = "DURATION")]
    pub(crate) lease: Duration,
    /// A leader steps down this long after its last confirmed renewal.
    /// Default: two thirds of the lease (less the clock drift allowance).
    #[arg(long, value_parser = parse_duration, allow_hyphen_values = true, value_name = "DURATION")]
    pub(crate) renew_deadline: Option<Duration>,
    /// The pause between renewals. Default: a quarter of the renew
    /// deadline. The lease (less drift) must exceed the renew deadline,
    /// which must exceed 1.2 x the retry period.
    #[arg(long, value_parser = parse_duration, allow_hyphen_values = true, value_name = "DURATION")]
    pub(crate) retry_period: Option<Duration>,
    /// Once elected, write VALUE (an address, say) as the leader's, under
    /// its term; `redlock leader` shows it.
    #[arg(long, value_name = "VALUE")]
    pub(crate) proclaim: Option<String>,
    /// Lead at most once: after a loss, exit 4 instead of campaigning again.
    #[arg(long)]
    pub(crate) once: bool,
    /// Give up a campaign after this long (exit 1 while another process
    /// leads, 3 while nodes fail). Default: campaign without limit.
    #[arg(long, value_parser = parse_duration, allow_hyphen_values = true, value_name = "DURATION")]
    pub(crate) deadline: Option<Duration>,
    /// How long COMMAND has between SIGTERM and SIGKILL, when the
    /// leadership is lost or redlock is told to stop.
    #[arg(long, value_parser = parse_duration, allow_hyphen_values = true, default_value = "5s", value_name = "DURATION")]
    pub(crate) kill_grace: Duration,
    /// The election's name (the Redis key is the key prefix followed by it).
    #[arg(value_name = "NAME")]
    pub(crate) key: String,
    /// The command to run while leading, and its arguments, after `--`.
    #[arg(last = true, required = true, num_args = 1.., value_name = "COMMAND")]
    pub(crate) command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub(crate) struct LeaderArgs {
    /// The election's name.
    #[arg(value_name = "NAME")]
    pub(crate) key: String,
}

/// Parses `argv` (the program's name first). A command given without `--`
/// before it (`redlock exec mykey echo hi`) is an unexpected argument to
/// clap: the error then says where `--` goes.
pub(crate) fn parse_from(argv: &[OsString]) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(argv).map_err(|error| with_double_dash_tip(error, argv))
}

fn with_double_dash_tip(mut error: clap::Error, argv: &[OsString]) -> clap::Error {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    // With a `--` already there, a stray argument is not the command.
    if error.kind() != ErrorKind::UnknownArgument || argv.iter().any(|arg| arg == "--") {
        return error;
    }
    let Some(ContextValue::String(unexpected)) = error.get(ContextKind::InvalidArg) else {
        return error;
    };
    let unexpected = OsString::from(unexpected);
    // The first place where `--` makes a valid `exec` or `elect`.
    let fixed = (1..argv.len())
        .filter(|&at| argv[at] == unexpected)
        .find_map(|at| {
            let mut fixed = argv.to_vec();
            fixed.insert(at, "--".into());
            match Cli::try_parse_from(&fixed) {
                Ok(Cli {
                    command: Command::Exec(_) | Command::Elect(_),
                    ..
                }) => Some(fixed),
                _ => None,
            }
        });
    if let Some(fixed) = fixed {
        let tip = format!(
            "put `--` before the command: redlock {}",
            command_line(&fixed[1..])
        );
        error.insert(
            ContextKind::Suggested,
            ContextValue::StyledStrs(vec![tip.into()]),
        );
    }
    error
}

/// `--require-nodes`: a count, or `all` (every node given).
fn parse_required(text: &str) -> Result<usize, String> {
    match text.trim() {
        "all" => Ok(usize::MAX),
        count => count
            .parse()
            .map_err(|_| "expected a number of nodes, or all".to_owned()),
    }
}

/// The longest duration an option takes: a century, far beyond any use,
/// and far inside what a deadline (now + duration) can hold.
const MAX_DURATION: Duration = Duration::from_secs(100 * 31_557_600); // humantime's 100y

/// `10s`, `500ms`, `2m`, `1h 30m`: humantime's syntax, up to a century.
///
/// Every duration becomes a deadline (now + duration), and adding one
/// beyond the clock's range panics. The `cli_args` fuzz target found such
/// durations accepted (`--node-timeout 18374686479671623834s`); `exec` adds
/// `--kill-grace` to now when it signals the command, so
/// `--kill-grace 300000000000y` would have panicked there.
///
/// A negative one (`-5s`) reaches this parser (the options take values
/// that start with a hyphen) so that it is not taken for a flag.
fn parse_duration(text: &str) -> Result<Duration, String> {
    parse_positive(text, "a duration")
}

/// `--ttl`: a duration, at most the longest TTL a node is given.
fn parse_ttl(text: &str) -> Result<Duration, String> {
    parse_at_most_max_ttl(text, "a TTL", "TTL")
}

/// `--lease`: the TTL of a leadership, so at most the longest TTL too.
fn parse_lease(text: &str) -> Result<Duration, String> {
    parse_at_most_max_ttl(text, "a lease", "lease")
}

fn parse_positive(text: &str, what: &str) -> Result<Duration, String> {
    let text = text.trim();
    if let Some(rest) = text.strip_prefix('-') {
        return Err(if rest.starts_with(|c: char| c.is_ascii_digit()) {
            format!("{what} cannot be negative: give a positive duration such as 10s")
        } else {
            // `--ttl --wait`: the value was left out.
            "expected a duration such as 10s, 500ms or 2m, not an option".to_owned()
        });
    }
    let duration = humantime::parse_duration(text)
        .map_err(|error| format!("{error} (expected a duration such as 10s, 500ms or 2m)"))?;
    if duration > MAX_DURATION {
        return Err("longer than 100 years".to_owned());
    }
    Ok(duration)
}

/// The client refuses a TTL over [`MAX_TTL_MS`] too, but in milliseconds
/// and seconds; said here, both durations read in one style.
fn parse_at_most_max_ttl(text: &str, what: &str, name: &str) -> Result<Duration, String> {
    let duration = parse_positive(text, what)?;
    let max = Duration::from_millis(MAX_TTL_MS);
    // As the client counts: whole milliseconds.
    if duration.as_millis() > max.as_millis() {
        return Err(format!(
            "{name} {} is over the maximum of {}",
            in_days(duration),
            in_days(max)
        ));
    }
    Ok(duration)
}

/// A duration as humantime writes it, but in days at most: humantime's
/// months (30.44 days) would write 31 days as `1month 13h 26m 24s`.
fn in_days(duration: Duration) -> String {
    const DAY: u64 = 24 * 60 * 60;
    let days = duration.as_secs() / DAY;
    let rest = duration - Duration::from_secs(days * DAY);
    let unit = if days == 1 { "day" } else { "days" };
    match (days, rest.is_zero()) {
        (0, _) => humantime::format_duration(rest).to_string(),
        (_, true) => format!("{days}{unit}"),
        (_, false) => format!("{days}{unit} {}", humantime::format_duration(rest)),
    }
}

/// The command line as a shell would show it: arguments with spaces or
/// special characters in single quotes.
pub(crate) fn command_line(args: &[std::ffi::OsString]) -> String {
    args.iter()
        .map(|arg| {
            let arg = arg.to_string_lossy();
            let plain = !arg.is_empty()
                && arg.chars().all(|c| {
                    c.is_ascii_alphanumeric()
                        || matches!(c, '-' | '_' | '.' | '/' | ':' | '=' | ',' | '+' | '@')
                });
            if plain {
                arg.into_owned()
            } else {
                format!("'{}'", arg.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_cli_is_consistent() {
        Cli::command().debug_assert();
    }

    /// One word for a member of the quorum: a node (a Redis server is a
    /// process, and a node may be a whole cluster of them).
    #[test]
    fn the_help_calls_a_member_of_the_quorum_a_node() {
        let mut cli = Cli::command();
        cli.build();
        let mut helps = vec![cli.render_long_help().to_string()];
        for subcommand in cli.get_subcommands_mut() {
            if subcommand.get_name() != "help" {
                helps.push(subcommand.render_long_help().to_string());
            }
        }
        for help in helps {
            assert!(help.contains("-N, --nodes <URL[,URL...]>"), "{help}");
            assert!(help.contains("REDLOCK_NODES"), "{help}");
            assert!(!help.to_lowercase().contains("server"), "{help}");
        }
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("10").is_err());
        assert_eq!(parse_duration("100y"), Ok(MAX_DURATION));
    }

    #[test]
    fn a_duration_too_long_for_a_deadline_is_a_usage_error() {
        assert!(parse_duration("101y").is_err());
        assert!(parse_duration("18374686479671623834s").is_err());
        let argv = [
            "redlock",
            "exec",
            "-N",
            "redis://a",
            "--kill-grace",
            "300000000000y",
            "k",
            "--",
            "true",
        ];
        let error = Cli::try_parse_from(argv).unwrap_err();
        assert_eq!(error.kind(), clap::error::ErrorKind::ValueValidation);
    }

    fn exec(args: &[&str]) -> (Common, ExecArgs) {
        let mut argv = vec!["redlock", "exec", "-N", "redis://a"];
        argv.extend_from_slice(args);
        let cli = Cli::try_parse_from(argv).unwrap();
        match cli.command {
            Command::Exec(exec) => (cli.common, exec),
            other => panic!("not exec: {other:?}"),
        }
    }

    #[test]
    fn waiting_is_opt_in() {
        assert!(!exec(&["k", "--", "true"]).1.waits());
        assert!(exec(&["--wait", "k", "--", "true"]).1.waits());
        assert!(exec(&["--deadline", "3s", "k", "--", "true"]).1.waits());
        assert!(!exec(&["--wait", "--no-wait", "k", "--", "true"]).1.waits());
        assert!(exec(&["--no-wait", "--wait", "k", "--", "true"]).1.waits());
    }

    #[test]
    fn the_command_comes_after_the_double_dash() {
        let (_, args) = exec(&["k", "--", "sh", "-c", "exit 3"]);
        assert_eq!(args.key, "k");
        assert_eq!(args.command, ["sh", "-c", "exit 3"]);
        let missing = Cli::try_parse_from(["redlock", "exec", "-N", "redis://a", "k"]);
        assert!(missing.is_err());
    }

    #[test]
    fn a_client_certificate_needs_its_key() {
        let (common, _) = exec(&[
            "--tls-cert",
            "c.pem",
            "--tls-key",
            "k.pem",
            "k",
            "--",
            "true",
        ]);
        assert_eq!(common.tls_cert, Some(PathBuf::from("c.pem")));
        assert_eq!(common.tls_key, Some(PathBuf::from("k.pem")));
        for lonely in ["--tls-cert", "--tls-key"] {
            let argv = [
                "redlock",
                "exec",
                "-N",
                "rediss://a",
                lonely,
                "f.pem",
                "k",
                "--",
                "true",
            ];
            assert!(Cli::try_parse_from(argv).is_err(), "{lonely} alone");
        }
    }

    #[test]
    fn nodes_split_on_commas_and_repeat() {
        let (common, _) = exec(&["-N", "redis://b,redis://c", "k", "--", "true"]);
        assert_eq!(common.nodes, ["redis://a", "redis://b", "redis://c"]);
    }

    #[test]
    fn common_options_go_before_or_after_the_subcommand() {
        let before = Cli::try_parse_from([
            "redlock",
            "-N",
            "redis://a,redis://b,redis://c",
            "--node-timeout",
            "20ms",
            "--json",
            "status",
            "k",
        ])
        .unwrap();
        let after = Cli::try_parse_from([
            "redlock",
            "status",
            "-N",
            "redis://a,redis://b,redis://c",
            "--node-timeout",
            "20ms",
            "--json",
            "k",
        ])
        .unwrap();
        for cli in [before, after] {
            assert_eq!(cli.common.nodes, ["redis://a", "redis://b", "redis://c"]);
            assert_eq!(cli.common.node_timeout, Some(Duration::from_millis(20)));
            assert!(cli.common.json);
            assert!(matches!(cli.command, Command::Status(ref status) if status.key == "k"));
        }
    }
}
