//! A program that takes a lock and then fails, the way a user's `main` does:
//! `let _guard = redlock.lock(..).await?; work().await?;`. Used by
//! `tests/tests/shutdown.rs` to check what is left on the masters once the
//! process is gone.
//!
//! Usage: `exit-early current|multi shutdown|no-shutdown|panic|keep KEY URL...`:
//! `shutdown` calls `Redlock::shutdown` before returning, `no-shutdown` just
//! returns the error (the guard was dropped on the way), `panic` panics with
//! the guard alive, `keep` returns the error with the guard still alive
//! (moved out of the failing block), as a program that keeps it in `main`.

use std::process::ExitCode;

use redlock_tokio::Redlock;

async fn work() -> Result<(), String> {
    Err("the work failed".into())
}

async fn run(mode: &str, key: String, urls: Vec<String>) -> Result<(), String> {
    let redlock = Redlock::connect(&urls).await.map_err(|e| e.to_string())?;
    let result = async {
        let guard = redlock
            .lock(key.as_str())
            .await
            .map_err(|e| e.to_string())?;
        match mode {
            "panic" => panic!("the work panicked with the lock held"),
            "keep" => {
                // Leaked into a task that outlives `main`'s future: the
                // runtime drops it as it shuts down.
                tokio::spawn(async move {
                    let _guard = guard;
                    std::future::pending::<()>().await;
                });
            }
            _ => drop(guard),
        }
        work().await
    }
    .await;
    if mode == "shutdown" {
        redlock.shutdown().await;
    }
    result
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(flavor), Some(mode), Some(key)) = (args.next(), args.next(), args.next()) else {
        eprintln!("usage: exit-early current|multi shutdown|no-shutdown|panic|keep KEY URL...");
        return ExitCode::from(2);
    };
    let urls: Vec<String> = args.collect();
    let runtime = match flavor.as_str() {
        "current" => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    }
    .enable_all()
    .build()
    .expect("a Tokio runtime");
    match runtime.block_on(run(&mode, key, urls)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("exit-early: {err}");
            ExitCode::FAILURE
        }
    }
}
