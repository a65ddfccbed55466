//! A synchronous program that takes a lock with the blocking client and
//! leaves `main` with the guard alive, the way a user's program does:
//! `tests/tests/blocking.rs` then checks that no key is left once the
//! process is gone.
//!
//! Usage: `exit-blocking keep|keep-alive|drop KEY URL...`: `keep` returns
//! from `main` with the guard alive, `keep-alive` the same with the lock
//! kept alive, `drop` drops the guard and returns at once.

use std::process::ExitCode;

use redlock_tokio::{KeepAlive, blocking::Redlock};

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(mode), Some(key)) = (args.next(), args.next()) else {
        eprintln!("usage: exit-blocking keep|keep-alive|drop KEY URL...");
        return ExitCode::from(2);
    };
    let urls: Vec<String> = args.collect();
    let redlock = match Redlock::connect(&urls) {
        Ok(redlock) => redlock,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::from(1);
        }
    };
    let request = redlock.lock(key.as_str());
    let request = match mode.as_str() {
        "keep-alive" => request.keep_alive(KeepAlive::default()),
        _ => request,
    };
    let guard = match request.acquire() {
        Ok(guard) => guard,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::from(1);
        }
    };
    println!("locked");
    if mode == "drop" {
        drop(guard);
        return ExitCode::SUCCESS;
    }
    // Locals drop in reverse order: the guard, then the client, whose drop
    // waits for the release.
    let _guard = guard;
    ExitCode::SUCCESS
}
