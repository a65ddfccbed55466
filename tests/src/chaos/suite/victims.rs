//! Catching a worker inside a hold, to stop it (SIGSTOP) or kill it
//! (SIGKILL) there: the mixed, semaphore and election scenarios' client
//! faults.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use rand::rngs::StdRng;

use super::GRANT_CAP;
use super::instruments::{Held, Workers, signal};
use super::schedule::between;
use crate::chaos::clock::mono_ns;

/// The next grant to a worker `accept`ed, then a short wait into its hold.
pub(super) async fn victim_grant(
    workers: &mut Workers,
    accept: impl Fn(u32) -> bool,
    rng: &mut StdRng,
) -> Option<Held> {
    workers.drain();
    let held = workers
        .next_grant(Instant::now() + Duration::from_secs(3), accept)
        .await?;
    tokio::time::sleep(between(rng, 5, 60)).await;
    Some(held)
}

/// Stops (SIGSTOP) a worker `accept`ed just after one of its grants, and
/// makes sure from its records that it is inside a hold: a busy machine may
/// deliver the announcement late, so it is tried three times. The grant and
/// the stopped process's pid, or `None` when no try landed inside a hold.
pub(super) async fn stop_in_hold(
    workers: &mut Workers,
    rng: &mut StdRng,
    accept: impl Fn(u32) -> bool + Copy,
) -> std::io::Result<Option<(Held, u32)>> {
    for _ in 0..3 {
        let Some(held) = victim_grant(workers, accept, rng).await else {
            continue;
        };
        let pid = workers.pid(held.worker);
        signal(pid, Signal::SIGSTOP)?;
        wait_stopped(pid).await;
        if workers.in_hold(held.worker) {
            return Ok(Some((held, pid)));
        }
        signal(pid, Signal::SIGCONT)?;
    }
    Ok(None)
}

/// Waits (briefly) until process `pid` is stopped: `kill` only queues the
/// signal.
async fn wait_stopped(pid: u32) {
    for _ in 0..200 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The state follows the command name in parentheses.
        if stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('T'))
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// A worker killed inside a hold ([`kill_in_hold`]).
pub(super) struct Killed {
    /// The grant it was killed in.
    pub(super) held: Held,
    /// When it was dead, on the shared clock.
    pub(super) at_ns: u64,
    /// The next grant after its death that the caller waited for.
    pub(super) next: Held,
}

/// Kills (SIGKILL) a worker `accept`ed just after one of its grants and
/// starts a new process in its place, with the id `replacement` gives;
/// tried three times until the kill lands inside a hold (its records tell).
/// Then waits up to [`GRANT_CAP`] for the next grant to a worker `next`
/// accepts (given the replacement's id): an error when none comes. `None`:
/// no try landed inside a hold.
pub(super) async fn kill_in_hold(
    workers: &mut Workers,
    rng: &mut StdRng,
    accept: impl Fn(u32) -> bool + Copy,
    mut replacement: impl FnMut() -> u32,
    next: impl Fn(u32, u32) -> bool,
) -> std::io::Result<Option<Killed>> {
    for _ in 0..3 {
        let Some(held) = victim_grant(workers, accept, rng).await else {
            continue;
        };
        let killed = held.worker;
        workers.kill(killed).await?;
        let at_ns = mono_ns();
        let mid_hold = workers.in_hold(killed);
        let new = replacement();
        workers.replace(killed, new);
        if !mid_hold {
            continue;
        }
        let Some(after) = workers
            .next_grant(Instant::now() + GRANT_CAP, |w| next(new, w))
            .await
        else {
            return Err(std::io::Error::other(format!(
                "nothing granted within {} s of worker {killed}'s SIGKILL mid-hold",
                GRANT_CAP.as_secs()
            )));
        };
        return Ok(Some(Killed {
            held,
            at_ns,
            next: after,
        }));
    }
    Ok(None)
}
