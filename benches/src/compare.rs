//! No silent regression of a printed figure (issue 52): every run that
//! writes a result under `benches/results/` compares its summary line
//! (`bench summary: key=value ...`, `market summary: ...`) with the same
//! line of the last committed result of the same file (the same server and
//! shape), and prints, above its own summary and in its report, each figure
//! that moved the wrong way by more than a fifth.
//!
//! The committed result is `git show HEAD:benches/results/<file>`, dated by
//! the last commit that touched it. Outside a git checkout, it is the file
//! as found before the run overwrites it. A figure that is not a number
//! (`n/a`, `yes`) or is missing from either line is left out.
//!
//! A printed figure, never a pass/fail (STYLE.md, principle 16): a busy
//! machine moves figures too, and the reader judges.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the committed results are, from the repository's root.
pub(crate) const RESULTS: &str = "benches/results";

/// A figure moved the wrong way when it got worse by more than this factor:
/// a fifth.
const WORSE_BY: f64 = 1.2;

/// Figures whose names contain one of these are better lower: latencies,
/// CPU, gaps, stalls and waits, commands, misses and leftovers, retries,
/// bytes, the spread over shards. Every other figure (throughput, ratios of
/// it, shares) is better higher.
const LOWER_IS_BETTER: [&str; 14] = [
    "p50",
    "p99",
    "cpu",
    "gap",
    "stall",
    "latency",
    "wait",
    "commands",
    "misses",
    "keys_left",
    "double_sales",
    "retries",
    "bytes",
    "spread",
];

/// Whether a smaller value of the figure `name` is the better one.
pub(crate) fn lower_is_better(name: &str) -> bool {
    LOWER_IS_BETTER.iter().any(|word| name.contains(word))
}

/// What a summary line starts with, up to and including `summary:`
/// (`bench summary:`, `bench cluster summary:`, `market summary:`).
fn prefix(line: &str) -> Option<&str> {
    let line = line.trim_start();
    line.find("summary:")
        .map(|at| &line[..at + "summary:".len()])
}

/// The `key=value` pairs of a summary line, in order, values as written.
pub(crate) fn fields(line: &str) -> Vec<(&str, &str)> {
    let rest = prefix(line).map_or(line, |prefix| &line.trim_start()[prefix.len()..]);
    rest.split_whitespace()
        .filter_map(|pair| pair.split_once('='))
        .filter(|(key, _)| !key.is_empty())
        .collect()
}

/// One figure that moved the wrong way.
#[derive(Debug, PartialEq)]
pub(crate) struct Moved {
    pub(crate) name: String,
    pub(crate) old: String,
    pub(crate) new: String,
    /// New over old; `None` from 0.
    pub(crate) ratio: Option<f64>,
}

impl std::fmt::Display for Moved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} -> {}", self.name, self.old, self.new)?;
        if let Some(ratio) = self.ratio {
            write!(f, " ({ratio:.2}x)")?;
        }
        Ok(())
    }
}

/// The figures of `new` that moved the wrong way by more than a fifth from
/// `old`, in `new`'s order. From 0 there is no ratio: a better-lower figure
/// (keys left, misses) that rose by a whole unit or more counts.
pub(crate) fn moved_wrong_way(old: &str, new: &str) -> Vec<Moved> {
    let old = fields(old);
    let number = |text: &str| text.parse::<f64>().ok().filter(|v| v.is_finite());
    let mut moved = Vec::new();
    for (name, new_text) in fields(new) {
        let Some((_, old_text)) = old.iter().find(|(key, _)| *key == name) else {
            continue;
        };
        let (Some(before), Some(after)) = (number(old_text), number(new_text)) else {
            continue;
        };
        if before < 0.0 || after < 0.0 {
            continue;
        }
        let lower = lower_is_better(name);
        let ratio = if before == 0.0 {
            if !(lower && after >= 1.0) {
                continue;
            }
            None
        } else {
            let ratio = after / before;
            let worse = if lower {
                ratio > WORSE_BY
            } else {
                ratio < 1.0 / WORSE_BY
            };
            if !worse {
                continue;
            }
            Some(ratio)
        };
        moved.push(Moved {
            name: name.to_owned(),
            old: (*old_text).to_owned(),
            new: new_text.to_owned(),
            ratio,
        });
    }
    moved
}

/// The last line of `text` that is a summary of the same kind as `summary`.
fn same_summary<'a>(text: &'a str, summary: &str) -> Option<&'a str> {
    let prefix = prefix(summary)?;
    text.lines()
        .map(str::trim)
        .rfind(|line| line.starts_with(prefix))
}

/// The sentence for `summary` against a committed result's text.
pub(crate) fn sentence(committed: &str, label: &str, summary: &str) -> String {
    let Some(old) = same_summary(committed, summary) else {
        return format!(
            "no figure to compare with: the last committed result ({label}) has no `{}` line",
            prefix(summary).unwrap_or("summary:")
        );
    };
    let moved = moved_wrong_way(old, summary);
    if moved.is_empty() {
        format!(
            "no figure moved the wrong way by more than a fifth since the last committed result ({label})"
        )
    } else {
        let moved: Vec<String> = moved.iter().map(Moved::to_string).collect();
        format!(
            "regressions since the last committed result ({label}): {}",
            moved.join(", ")
        )
    }
}

/// The repository's root: where this crate was built from.
fn root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

fn git(root: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(args)
        .env("TZ", "UTC")
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The last committed result `file` (under [`RESULTS`]) and its label
/// (`8f37ef9, 2026-11-27 23:43 UTC`); outside a git checkout, the file as
/// found. `Err`: why there is none.
fn committed(file: &str) -> Result<(String, String), String> {
    let root = root();
    let path = format!("{RESULTS}/{file}");
    if git(&root, &["rev-parse", "--is-inside-work-tree"]).is_none() {
        return std::fs::read_to_string(root.join(&path))
            .map(|text| (text, format!("{path} as found, no git")))
            .map_err(|_| format!("no {path} and no git"));
    }
    let text = git(&root, &["show", &format!("HEAD:{path}")])
        .ok_or_else(|| format!("{path} is not committed"))?;
    let label = git(
        &root,
        &[
            "log",
            "-1",
            "--format=%h, %cd",
            "--date=format-local:%Y-%m-%d %H:%M UTC",
            "--",
            &path,
        ],
    )
    .map(|label| label.trim().to_owned())
    .filter(|label| !label.is_empty())
    .unwrap_or_else(|| "HEAD".to_owned());
    Ok((text, label))
}

/// The line a run prints above `summary` and writes into its result
/// `file` (a name under [`RESULTS`], such as `redis-nodes-5.md`). Call it
/// before the run writes its own file there. A `quick` run says so: the
/// committed results are full runs.
pub(crate) fn against_committed(file: &str, summary: &str, quick: bool) -> String {
    let line = match committed(file) {
        Ok((text, label)) => sentence(&text, &label, summary),
        Err(why) => format!("no figure to compare with: {why}"),
    };
    if quick {
        format!("{line} (this run is a quick one)")
    } else {
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_the_pairs_after_summary() {
        assert_eq!(
            fields("bench summary: a=1.00 b=n/a c=0"),
            [("a", "1.00"), ("b", "n/a"), ("c", "0")]
        );
        assert_eq!(
            fields("bench cluster summary: bytes_per_lock=207"),
            [("bytes_per_lock", "207")]
        );
        assert_eq!(
            fields("market summary: conserved=yes keys_left=0"),
            [("conserved", "yes"), ("keys_left", "0")]
        );
        assert!(fields("bench summary:").is_empty());
    }

    #[test]
    fn direction_follows_the_name() {
        for lower in [
            "acquire_p50_vs_floor",
            "acquire_p99_vs_rslock",
            "cpu_per_cycle_vs_floor",
            "gap_p99_in_round_trips",
            "paused1_worst_gap_ms",
            "paused1_runtime_stall_ms",
            "commands_per_release",
            "node_misses",
            "keys_left",
            "fine_buy_p99_ms",
            "watch_retries_per_buy",
            "bytes_per_lock",
            "calls_spread_s3",
        ] {
            assert!(lower_is_better(lower), "{lower}");
        }
        for higher in [
            "throughput_vs_rslock",
            "contention_vs_rslock",
            "contention_held_share",
            "paused1_throughput_vs_healthy",
            "fine_ops_per_60s",
            "ours_vs_safe_floor_min",
        ] {
            assert!(!lower_is_better(higher), "{higher}");
        }
    }

    #[test]
    fn only_a_move_the_wrong_way_by_more_than_a_fifth_counts() {
        let old = "bench summary: throughput_vs_rslock=1.50 contention_vs_rslock=1.62 \
                   gap_p99_in_round_trips=2.47 commands_per_acquire=1.00 keys_left=0 \
                   node_misses=0 paused1_runtime_stall_ms=1 conserved=yes";
        let new = "bench summary: throughput_vs_rslock=1.30 contention_vs_rslock=0.77 \
                   gap_p99_in_round_trips=43.90 commands_per_acquire=0.50 keys_left=3 \
                   node_misses=0 paused1_runtime_stall_ms=2040 conserved=no extra=5";
        let moved = moved_wrong_way(old, new);
        let names: Vec<&str> = moved.iter().map(|m| m.name.as_str()).collect();
        // 1.30 / 1.50 = 0.87: within a fifth. Fewer commands: the right way.
        assert_eq!(
            names,
            [
                "contention_vs_rslock",
                "gap_p99_in_round_trips",
                "keys_left",
                "paused1_runtime_stall_ms"
            ]
        );
        assert_eq!(
            moved[0].to_string(),
            "contention_vs_rslock 1.62 -> 0.77 (0.48x)"
        );
        assert_eq!(moved[2].to_string(), "keys_left 0 -> 3");
    }

    #[test]
    fn the_boundary_is_a_fifth_either_way() {
        let moved = |old: &str, new: &str| !moved_wrong_way(old, new).is_empty();
        assert!(!moved("s summary: x_p50=1.00", "s summary: x_p50=1.20"));
        assert!(moved("s summary: x_p50=1.00", "s summary: x_p50=1.21"));
        assert!(!moved("s summary: ops=1.20", "s summary: ops=1.00"));
        assert!(moved("s summary: ops=1.21", "s summary: ops=1.00"));
        // From 0: a better-higher figure has no ratio; a gap under 1 ms is noise.
        assert!(!moved("s summary: ops=0", "s summary: ops=5"));
        assert!(!moved("s summary: gap_ms=0", "s summary: gap_ms=0.4"));
    }

    #[test]
    fn the_sentence_names_the_committed_result() {
        let committed = "# Report\n\n```\nbench summary: contention_vs_rslock=1.62\n```\n\
                         ```\nbench cluster summary: bytes_per_lock=10\n```\n";
        assert_eq!(
            sentence(
                committed,
                "8f37ef9, 2026-11-27 23:43 UTC",
                "bench summary: contention_vs_rslock=0.77"
            ),
            "regressions since the last committed result (8f37ef9, 2026-11-27 23:43 UTC): \
             contention_vs_rslock 1.62 -> 0.77 (0.48x)"
        );
        assert_eq!(
            sentence(
                committed,
                "HEAD",
                "bench cluster summary: bytes_per_lock=11"
            ),
            "no figure moved the wrong way by more than a fifth since the last committed result (HEAD)"
        );
        assert!(
            sentence(committed, "HEAD", "market summary: keys_left=0")
                .contains("no `market summary:` line")
        );
    }
}
