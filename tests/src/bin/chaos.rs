//! The chaos suite: worker processes contend for locks while real faults
//! hit real Redis masters; a checker then looks for overlapping holds.
//!
//! Run it with `make chaos` (everything, with the compose part where Docker
//! runs) or `make chaos-ci` (the shorter schedule `make test` runs); both go
//! through `scripts/chaos.sh`, which builds the image, starts and removes the
//! compose project. Directly:
//!
//! ```text
//! cargo run -p redlock-tests --bin chaos -- [--ci|--full] [--seed N]
//!     [--no-process] [--compose PROJECT --ports 7101,7102,7103,7104,7105]
//!     [--out DIR]
//! ```
//!
//! `CHAOS_SEED` also sets the seed; `CHAOS_ONLY=election,semaphore` runs
//! only those scenarios (names in [`suite::SCENARIOS`]), with the seeds a
//! whole run would give them. The last line printed is
//! `chaos summary: granted=N overlaps=K stale_writes_accepted=S in_model_faults=F out_of_model_violations_found=V`;
//! the exit status is non-zero when a check failed.
//!
//! See [`redlock_tests::chaos`] for how it works.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use redlock_tests::chaos::suite::{self, ComposeSpec, Mode, Options, SCENARIOS};

fn usage() -> ExitCode {
    eprintln!(
        "usage: chaos [--ci|--full] [--seed N] [--no-process] [--compose PROJECT --ports P1,..,P5] [--out DIR]"
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let mut mode = Mode::Ci;
    let mut seed: Option<u64> = std::env::var("CHAOS_SEED")
        .ok()
        .filter(|s| !s.is_empty())
        .and_then(|s| s.parse().ok());
    let mut process = true;
    let mut project = None;
    let mut ports: Vec<u16> = Vec::new();
    let mut out = None;
    let only: Option<Vec<String>> = std::env::var("CHAOS_ONLY")
        .ok()
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.split(',').map(|n| n.trim().to_owned()).collect());
    if let Some(unknown) = only
        .iter()
        .flatten()
        .find(|n| !SCENARIOS.contains(&n.as_str()))
    {
        eprintln!(
            "chaos: CHAOS_ONLY names {unknown:?}, not one of {}",
            SCENARIOS.join(", ")
        );
        return ExitCode::from(2);
    }
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--ci" => mode = Mode::Ci,
            "--full" => mode = Mode::Full,
            "--no-process" => process = false,
            "--seed" => match args.next().and_then(|s| s.parse().ok()) {
                Some(s) => seed = Some(s),
                None => return usage(),
            },
            "--compose" => project = args.next(),
            "--ports" => {
                match args.next().map(|p| {
                    p.split(',')
                        .map(str::parse)
                        .collect::<Result<Vec<u16>, _>>()
                }) {
                    Some(Ok(p)) => ports = p,
                    _ => return usage(),
                }
            }
            "--out" => out = args.next().map(PathBuf::from),
            _ => return usage(),
        }
    }
    let compose = match project {
        Some(project) if ports.len() == 5 => Some(ComposeSpec { project, ports }),
        Some(_) => return usage(),
        None => None,
    };
    // A fresh seed unless one was given: printed, so any run can be replayed.
    let seed = seed.unwrap_or_else(|| {
        let nanos = redlock_tests::chaos::clock::mono_ns();
        nanos ^ (u64::from(std::process::id()) << 32)
    });
    let exe = std::env::current_exe().expect("the suite's own path");
    let worker_exe = exe.with_file_name("chaos-worker");
    if !worker_exe.is_file() {
        eprintln!(
            "chaos: {} not found: build it with `cargo build -p redlock-tests --bins`",
            worker_exe.display()
        );
        return ExitCode::FAILURE;
    }
    let out_dir = out.unwrap_or_else(|| {
        exe.parent()
            .and_then(|dir| dir.parent())
            .map_or_else(|| PathBuf::from("target"), PathBuf::from)
            .join("chaos")
    });
    let options = Options {
        mode,
        seed,
        process,
        compose,
        out_dir,
        worker_exe,
        only,
    };
    println!(
        "chaos: seed {seed} (replay: CHAOS_SEED={seed}), {} mode, records in {}{}",
        if mode == Mode::Ci { "CI" } else { "full" },
        options.out_dir.display(),
        match &options.only {
            Some(only) => format!(", only {}", only.join(",")),
            None => String::new(),
        }
    );
    // The process part's masters and the protected resource run this binary
    // (REDLOCK_SERVER_BIN); the compose part runs its image's server.
    println!("chaos: local servers: {}", redlock_tests::server());
    if let Some(mix) = std::env::var_os(redlock_tests::chaos::masters::MIX_SERVER_ENV)
        .filter(|bin| !bin.is_empty())
    {
        println!(
            "chaos: local masters 1, 3, ... run {} instead ({})",
            std::path::Path::new(&mix).display(),
            redlock_tests::chaos::masters::MIX_SERVER_ENV
        );
    }
    let started = Instant::now();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a Tokio runtime");
    let report = runtime.block_on(suite::run(options.clone()));
    println!("{}", suite::render(&report, &options, started.elapsed()));
    // Background releases of the probe may still be in flight; do not wait.
    runtime.shutdown_background();
    if report.failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
