//! CPU time of processes, from `/proc/<pid>/task/*/schedstat` (nanoseconds
//! on the CPU, summed over the process's live threads). Linux only; zero
//! elsewhere, which the report shows as "n/a".

use std::time::Duration;

/// CPU time used so far by the threads `pid` has now.
pub(crate) fn of_process(pid: u32) -> Duration {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Duration::ZERO;
    };
    let mut ns = 0u64;
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("schedstat")) else {
            continue;
        };
        ns += stat
            .split_whitespace()
            .next()
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0);
    }
    Duration::from_nanos(ns)
}

/// CPU time of this process and of `servers`, summed.
pub(crate) fn snapshot(servers: &[u32]) -> (Duration, Duration) {
    let client = of_process(std::process::id());
    let servers = servers.iter().map(|&pid| of_process(pid)).sum();
    (client, servers)
}
