//! The report, as printed.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use super::{GROSS_FACTOR, NODE_TIMEOUT, Options, Report, gross_no_quorum_ms};
use crate::chaos::checker::{Analysis, Verdict, WindowReport};

/// The report, as printed; the summary line comes last.
pub fn render(report: &Report, options: &Options, wall: Duration) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "\n=== chaos report (seed {}) ===", options.seed);
    let _ = writeln!(out, "local servers: {}", crate::server());
    let _ = writeln!(
        out,
        "{:<36} {:>7} {:>8} {:>6} {:>8} {:>8} {:>8} {:>6} {:>7}",
        "scenario", "faults", "granted", "overl", "writes", "fenced", "late", "stale", "secs"
    );
    for s in &report.scenarios {
        let a = &s.analysis;
        let _ = writeln!(
            out,
            "{:<36} {:>7} {:>8} {:>6} {:>8} {:>8} {:>8} {:>6} {:>7.1}{}",
            s.name,
            s.faults,
            a.granted(),
            a.overlaps.len(),
            a.writes,
            a.fenced_writes_rejected,
            a.late_writes,
            a.stale_writes_accepted,
            s.seconds,
            if s.in_model { "" } else { "  (out of model)" }
        );
    }

    // Liveness per fault class, over every mixed scenario.
    let mut classes: BTreeMap<(String, String), Vec<&WindowReport>> = BTreeMap::new();
    for s in report.scenarios.iter().filter(|s| !s.probes.is_empty()) {
        let part = s.name.split('/').next().unwrap_or_default().to_owned();
        for w in &s.windows {
            classes
                .entry((part.clone(), w.window.class.clone()))
                .or_default()
                .push(w);
        }
    }
    let decide_ms = gross_no_quorum_ms();
    let _ = writeln!(
        out,
        "\nliveness per fault class (a majority up: locks are granted; a majority down: no lock, every acquire fails with no-quorum, none slower than {GROSS_FACTOR}x the per-node timeout of {} ms; max ms leaves out calls made while the machine stalled):",
        NODE_TIMEOUT.as_millis(),
    );
    let _ = writeln!(
        out,
        "{:<8} {:<26} {:>7} {:>9} {:>15} {:>11} {:>9}  liveness",
        "part", "class", "faults", "grants", "probes granted", "no-quorum", "max ms"
    );
    for ((part, class), windows) in &classes {
        let grants: usize = windows.iter().map(|w| w.grants).sum();
        let probes: usize = windows.iter().map(|w| w.probes).sum();
        let granted: usize = windows.iter().map(|w| w.probes_granted).sum();
        let no_quorum: usize = windows.iter().map(|w| w.probes_no_quorum).sum();
        let max = windows.iter().map(|w| w.probe_max_ms).fold(0.0, f64::max);
        let verdict = windows
            .iter()
            .map(|w| w.verdict(decide_ms))
            .max()
            .unwrap_or(Verdict::Held);
        let starved = windows
            .iter()
            .filter(|w| w.verdict(decide_ms) == Verdict::Starved)
            .count();
        let _ = writeln!(
            out,
            "{:<8} {:<26} {:>7} {:>9} {:>9}/{:<5} {:>11} {:>9.1}  {}",
            part,
            class,
            windows.len(),
            grants,
            granted,
            probes,
            no_quorum,
            max,
            match verdict {
                Verdict::Held => "held".to_owned(),
                Verdict::Starved => format!("held ({starved} window(s) starved: no verdict)"),
                Verdict::Failed => "FAILED".to_owned(),
            }
        );
    }
    let down: Vec<&WindowReport> = classes
        .iter()
        .filter(|((_, class), _)| class == "majority_down")
        .flat_map(|(_, w)| w.iter().copied())
        .collect();
    if !down.is_empty() {
        let max = down.iter().map(|w| w.probe_max_ms).fold(0.0, f64::max);
        let max_all = down.iter().map(|w| w.probe_max_all_ms).fold(0.0, f64::max);
        let disturbed: usize = down.iter().map(|w| w.probes_disturbed).sum();
        let total: usize = down.iter().map(|w| w.probes).sum();
        let nq: usize = down.iter().map(|w| w.probes_no_quorum).sum();
        let workers: usize = down.iter().map(|w| w.worker_attempts).sum();
        let workers_nq: usize = down.iter().map(|w| w.worker_no_quorum).sum();
        let workers_held: usize = down.iter().map(|w| w.worker_held).sum();
        let workers_max = down
            .iter()
            .map(|w| w.worker_try_lock_max_ms)
            .fold(0.0, f64::max);
        let workers_disturbed: usize = down.iter().map(|w| w.worker_calls_disturbed).sum();
        let workers_max_all = down
            .iter()
            .map(|w| w.worker_try_lock_max_all_ms)
            .fold(0.0, f64::max);
        let mut probe_times: Vec<f64> = down.iter().map(|w| w.probe_max_ms).collect();
        probe_times.sort_by(f64::total_cmp);
        let _ = writeln!(
            out,
            "majority down: probe {nq}/{total} acquires failed with no-quorum, slowest {max:.1} ms (per-node timeout {} ms, gate {decide_ms:.0} ms){}; workers' {workers} calls: {workers_nq} no-quorum, {workers_held} held by another owner on the masters still up, slowest single attempt {workers_max:.1} ms{}",
            NODE_TIMEOUT.as_millis(),
            if disturbed > 0 {
                format!(
                    "; {disturbed} more ran while the machine stalled (slowest {max_all:.1} ms)"
                )
            } else {
                String::new()
            },
            if workers_disturbed > 0 {
                format!(
                    "; {workers_disturbed} more ran while the machine stalled (slowest {workers_max_all:.1} ms)"
                )
            } else {
                String::new()
            }
        );
    }

    let mut fencing = Analysis::default();
    for s in &report.scenarios {
        let a = &s.analysis;
        fencing.writes += a.writes;
        fencing.fenced_writes_rejected += a.fenced_writes_rejected;
        fencing.late_writes += a.late_writes;
        fencing.superseded_writes += a.superseded_writes;
        fencing.superseded_writes_rejected += a.superseded_writes_rejected;
        fencing.paused_past_validity += a.paused_past_validity;
        fencing.paused_and_noticed += a.paused_and_noticed;
        fencing.kept_alive_holds += a.kept_alive_holds;
        fencing.extended_holds += a.extended_holds;
        fencing.open_holds += a.open_holds;
    }
    let _ = writeln!(
        out,
        "\nfencing: {} writes, {} rejected by the resource; {} late (after the writer's validity), {} superseded (a newer holder existed), of which {} rejected",
        fencing.writes,
        fencing.fenced_writes_rejected,
        fencing.late_writes,
        fencing.superseded_writes,
        fencing.superseded_writes_rejected
    );
    let _ = writeln!(
        out,
        "paused clients: {} holds stopped past their validity, {} noticed the loss; {} holds kept alive, {} extended; killed holders: {} holds left open, taken to last until their validity ended",
        fencing.paused_past_validity,
        fencing.paused_and_noticed,
        fencing.kept_alive_holds,
        fencing.extended_holds,
        fencing.open_holds
    );
    for s in &report.scenarios {
        for note in &s.notes {
            let _ = writeln!(out, "note: {}: {note}", s.name);
        }
        if !s.in_model {
            for o in &s.analysis.overlaps {
                let _ = writeln!(
                    out,
                    "violation found: {}: key {}: worker {} and worker {} held it at once for {:.1} ms",
                    s.name, o.key, o.first.worker, o.second.worker, o.overlap_ms
                );
            }
            for f in &s.analysis.falling_tokens {
                let _ = writeln!(
                    out,
                    "violation found: {}: key {}: worker {} granted token {} after worker {}'s {}",
                    s.name, f.key, f.after.worker, f.after_term, f.before.worker, f.before_term
                );
            }
            if s.analysis.stale_writes_accepted > 0 {
                let _ = writeln!(
                    out,
                    "violation found: {}: the resource accepted {} stale writes",
                    s.name, s.analysis.stale_writes_accepted
                );
            }
        }
    }
    for skip in &report.skipped {
        let _ = writeln!(out, "skipped: {skip}");
    }
    for failure in &report.failures {
        let _ = writeln!(out, "FAILURE: {failure}");
    }
    let _ = writeln!(
        out,
        "{} in {:.1} s; replay with CHAOS_SEED={}",
        if report.failures.is_empty() {
            "PASSED"
        } else {
            "FAILED"
        },
        wall.as_secs_f64(),
        options.seed
    );
    if let Some(semaphore) = &report.semaphore {
        let _ = writeln!(out, "{}", semaphore.line());
    }
    if let Some(election) = &report.election {
        let _ = writeln!(out, "{}", election.line());
    }
    if let Some(fenced) = &report.fenced {
        let _ = writeln!(out, "{}", fenced.line());
    }
    let _ = write!(out, "{}", report.summary_line());
    out
}
