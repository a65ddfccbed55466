//! Fuzzed command lines: parsing any arguments gives options or a clap
//! error, never a panic; every duration it accepts can be a deadline (added
//! to now), the TTL and node timeout it accepts are a valid configuration or
//! a [`ConfigError`], and each node URL is a node name or
//! [`ConfigError::InvalidNode`].
//!
//! The arguments are options, subcommands and values (durations of any size
//! and unit, URLs, keys, `--`) or any text. Shared by the `cli_args` fuzz
//! target (`fuzz/`, nightly, which includes this file and `cli.rs`) and the
//! stable test below, which `make test` runs.

use std::time::{Duration, Instant};

use arbitrary::{Result, Unstructured};
use clap::Parser;
use redlock_tokio::core::Config;
use redlock_tokio::{ConfigError, Redlock};

use crate::cli::{Cli, Command};

/// Runs one input; panics when a property fails.
pub(crate) fn check(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let _ = run(&mut u);
}

const WORDS: [&str; 35] = [
    "exec",
    "status",
    "release",
    "--",
    "-N",
    "--nodes",
    "--ttl",
    "--deadline",
    "--kill-grace",
    "--node-timeout",
    "--connect-timeout",
    "--wait",
    "-w",
    "--no-wait",
    "--fencing",
    "--busy-exit-code",
    "-E",
    "--value",
    "--key-prefix",
    "--allow-even",
    "--allow-eviction",
    "--refuse-weak-persistence",
    "--wait-for-aof",
    "--require-nodes",
    "all",
    "--json",
    "-q",
    "--tls-ca",
    "--tls-cert",
    "--tls-key",
    "redis://a,redis://b,redis://c",
    "redis+cluster://a:1,a:2",
    "key",
    "true",
    "-h",
];

/// humantime's units, and none.
const UNITS: [&str; 12] = [
    "ns", "us", "ms", "s", "m", "min", "h", "d", "w", "M", "y", "",
];

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    let mut argv = vec!["redlock".to_owned()];
    for _ in 0..u.int_in_range(0..=12)? {
        argv.push(match u.int_in_range(0..=5)? {
            0..=2 => (*u.choose(&WORDS)?).to_owned(),
            3 => {
                let amount: u64 = match u.int_in_range(0..=2)? {
                    0 => u.int_in_range(0..=100)?,
                    1 => u.int_in_range(0..=1_000_000)?,
                    _ => u.arbitrary()?,
                };
                let space = if u.ratio(1, 8)? { " " } else { "" };
                format!("{amount}{space}{}", u.choose(&UNITS)?)
            }
            4 => u.arbitrary::<u8>()?.to_string(),
            _ => u.arbitrary()?,
        });
    }
    check_args(&argv);
    Ok(())
}

fn check_args(argv: &[String]) {
    let cli = match Cli::try_parse_from(argv) {
        Ok(cli) => cli,
        Err(error) => {
            // A typed error, whose message renders (help and version are
            // errors too, by clap's design).
            let _ = (error.kind(), error.to_string());
            return;
        }
    };
    let common = &cli.common;
    let now = Instant::now();
    let mut durations = vec![common.connect_timeout];
    durations.extend(common.node_timeout);
    let mut ttl = None;
    if let Command::Exec(exec) = &cli.command {
        durations.extend([exec.ttl, exec.kill_grace]);
        durations.extend(exec.deadline);
        ttl = Some(exec.ttl);
    }
    for duration in durations {
        assert!(
            now.checked_add(duration).is_some(),
            "{argv:?}: {duration:?} was accepted but cannot be a deadline"
        );
    }
    // The TTL and node timeout, as the client checks them.
    let mut config = Config::new(["a", "b", "c"]).ttl(ttl.unwrap_or(Duration::from_secs(10)));
    config.node_timeout = common.node_timeout;
    let _: std::result::Result<_, ConfigError> = config.validate();
    for node in &common.nodes {
        if let Err(error) = Redlock::node_name(node.trim()) {
            assert!(
                matches!(error, ConfigError::InvalidNode { .. }),
                "{node:?}: {error:?}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// The `cli_args` fuzz target's corpus (`fuzz/corpus/cli_args/`), then a
    /// thousand random inputs from a fixed seed (`FUZZED_CASES=N`: N
    /// instead; fewer than the other targets' 3000, as clap unoptimised
    /// takes about 0.5 ms per command line). `make fuzz` runs it under
    /// libFuzzer for longer.
    #[test]
    fn any_command_line_is_options_or_a_typed_error() {
        let started = std::time::Instant::now();
        let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/cli_args");
        let mut seeds = 0;
        // The corpus is in the repository, not in the published crate.
        if let Ok(entries) = std::fs::read_dir(&corpus) {
            for entry in entries {
                let input = std::fs::read(entry.expect("a corpus entry").path()).expect("readable");
                super::check(&input);
                seeds += 1;
            }
        }
        let cases: usize = std::env::var("FUZZED_CASES")
            .ok()
            .and_then(|cases| cases.parse().ok())
            .unwrap_or(1000);
        // A small generator (xorshift): the CLI has no RNG dependency.
        let mut state: u64 = 22;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..cases {
            let len = next() % 512;
            let input: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            super::check(&input);
        }
        println!(
            "fuzzed cli_args: corpus={seeds} random={cases} seconds={:.2}",
            started.elapsed().as_secs_f64()
        );
    }
}
