//! One chaos worker process; started by the `chaos` suite, never by hand.
//!
//! Usage: `chaos-worker '<redlock_tests::chaos::worker::Config as JSON>'`.
//! See [`redlock_tests::chaos::worker`].

use std::process::ExitCode;

use nix::sys::signal::Signal;
use redlock_tests::chaos::worker::{self, Config};

fn main() -> ExitCode {
    // Die with the orchestrator, whatever kills it: a worker must not
    // outlive the suite (its run is bounded anyway).
    let parent = nix::unistd::getppid();
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
    if nix::unistd::getppid() != parent {
        return ExitCode::FAILURE;
    }
    let Some(config) = std::env::args().nth(1) else {
        eprintln!("usage: chaos-worker '<config as JSON>'");
        return ExitCode::FAILURE;
    };
    let config: Config = match serde_json::from_str(&config) {
        Ok(config) => config,
        Err(err) => {
            eprintln!("chaos-worker: bad config: {err}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(name) = &config.planted {
        use redlock_tokio::core::planted::{self, Bug};
        let Some(bug) = Bug::ALL.into_iter().find(|bug| format!("{bug:?}") == *name) else {
            eprintln!("chaos-worker: no planted bug {name}");
            return ExitCode::FAILURE;
        };
        // One thread: the runtime below runs every task on this one.
        planted::set(Some(bug));
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a Tokio runtime");
    match runtime.block_on(worker::run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("chaos-worker: {err}");
            ExitCode::FAILURE
        }
    }
}
