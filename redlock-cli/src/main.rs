//! `redlock`: a distributed `flock(1)` over N independent Redis nodes.
//!
//! ```text
//! redlock exec --nodes redis://a,redis://b,redis://c --ttl 10s nightly-report -- ./report.sh
//! redlock status --nodes ... nightly-report
//! redlock release --nodes ... nightly-report --value 5f1c...
//! redlock elect --nodes ... scheduler -- ./scheduler
//! redlock leader --nodes ... scheduler
//! ```
//!
//! `exec` takes the lock (one attempt unless `--wait`), runs the command
//! while the lock is kept alive in the background, stops the command
//! (SIGTERM, then SIGKILL) if the lock is lost, and releases the lock at the
//! end in every case. `redlock --help` and `redlock exec --help` list the
//! options and exit codes; the project's README explains the guarantees.
//!
//! The work is done by [`redlock_tokio`]; this crate only parses arguments,
//! supervises the child process and reports.
#![forbid(unsafe_code)]

mod child;
mod cli;
mod connect;
mod elect;
mod exec;
mod failure;
#[cfg(test)]
mod fuzzed;
mod leader;
mod output;
mod release;
mod status;

use std::process::ExitCode;

use crate::cli::Command;
use crate::output::{JsonTo, Output};

fn main() -> ExitCode {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let cli = cli::parse_from(&argv).unwrap_or_else(|error| error.exit());
    let common = &cli.common;
    let json_to = match &cli.command {
        // stdout belongs to the command.
        Command::Exec(_) | Command::Elect(_) => JsonTo::Stderr,
        Command::Status(_) | Command::Release(_) | Command::Leader(_) => JsonTo::Stdout,
    };
    let output = Output::new(common.json, json_to, common.quiet);
    if common.verbose {
        init_logging();
    }
    // One thread is plenty: a few connections, one child, one keep-alive.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("redlock: cannot start the async runtime: {error}");
            return ExitCode::from(failure::USAGE);
        }
    };
    let code = runtime.block_on(async {
        match cli.command {
            Command::Exec(args) => exec::run(&cli.common, args, &output).await,
            Command::Status(args) => status::run(&cli.common, args, &output).await,
            Command::Release(args) => release::run(&cli.common, args, &output).await,
            Command::Elect(args) => elect::run(&cli.common, args, &output).await,
            Command::Leader(args) => leader::run(&cli.common, args, &output).await,
        }
    });
    ExitCode::from(code)
}

/// Logs on stderr, in colour only when it is a terminal: a log file or a
/// pipe gets no escape codes.
fn init_logging() {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("redlock_tokio=debug,redlock_core=debug"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}
