//! Lock a resource on the Redis nodes named by `REDLOCK_NODES`
//! (comma-separated URLs; default three local nodes on ports 7001..7003).
//!
//! ```text
//! REDLOCK_NODES=redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003 \
//!     cargo run -p redlock-tokio --example quickstart
//! ```

use redlock_tokio::{Redlock, RunError};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let nodes = std::env::var("REDLOCK_NODES").unwrap_or_else(|_| {
        "redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003".to_owned()
    });

    // The five lines to adopt:
    let redlock = Redlock::connect(nodes.split(',')).await?;
    let guard = redlock.lock("quickstart").await?;
    println!("locked {} for {:?}", guard.key(), guard.validity());
    // ... work while guard.validity() is left ...
    let report = guard.release().await;
    println!("{report}");

    // Or run work under the lock, kept alive meanwhile (below).
    let answer = compute(&redlock).await?;
    println!("computed {answer} under the lock");
    Ok(())
}

/// Runs work under the lock, kept alive meanwhile: the work is cancelled if
/// the lock is lost, and the lock is released at the end either way. The
/// work sees the lock (value, fencing token, validity, loss signal) and may
/// fail with any error; `RunError` says whether the lock or the work failed.
async fn compute(redlock: &Redlock) -> Result<u32, RunError> {
    redlock
        .lock("quickstart")
        .run(async |lock| {
            println!("working under {} for {:?}", lock.key(), lock.validity());
            Ok(6 * 7)
        })
        .await
}
