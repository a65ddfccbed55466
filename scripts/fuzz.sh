#!/usr/bin/env bash
# Runs every cargo-fuzz target in fuzz/ for FUZZ_SECONDS each (libFuzzer's
# -max_total_time), then prints one line per target:
#   fuzz <target>: execs=N seconds=S crashes=C
# and exits non-zero when any target crashed (the input is in
# fuzz/artifacts/<target>/; replay it with
# `cargo +nightly fuzz run <target> <file>`).
#
# The seed corpus (fuzz/corpus/<target>/, in the repository) is read, never
# written: what a run discovers goes to $FUZZ_WORK/<target>/ (kept between
# runs, under target/). FUZZ_TARGETS="replies info" runs some targets only.
set -euo pipefail

CARGO="${CARGO:-cargo}"
SECONDS_EACH="${FUZZ_SECONDS:-60}"
root="$(cd "$(dirname "$0")/.." && pwd)"
work="${FUZZ_WORK:-$root/target/fuzz-corpus}"
cd "$root/fuzz"

# Safe Rust throughout, so no sanitizer (several times the execs per
# second); debug assertions on, so that overflows panic as in tests.
flags=(--debug-assertions --sanitizer none)
targets="${FUZZ_TARGETS:-$("$CARGO" +nightly fuzz list)}"
"$CARGO" +nightly fuzz build "${flags[@]}"

status=0
summary=()
for target in $targets; do
    mkdir -p "$work/$target" "corpus/$target" "artifacts/$target"
    log="$work/$target.log"
    before=$(find "artifacts/$target" -type f | wc -l)
    started=$(date +%s)
    code=0
    "$CARGO" +nightly fuzz run "${flags[@]}" "$target" "$work/$target" "corpus/$target" -- \
        -max_total_time="$SECONDS_EACH" -print_final_stats=1 > "$log" 2>&1 || code=$?
    seconds=$(( $(date +%s) - started ))
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    if [ -z "$execs" ]; then
        # A crash ends the run before the final stats: its last status line.
        execs=$(grep -o '^#[0-9]*' "$log" | tail -n 1 | tr -d '#')
    fi
    crashes=$(( $(find "artifacts/$target" -type f | wc -l) - before ))
    if [ "$code" -ne 0 ]; then
        status=1
        [ "$crashes" -gt 0 ] || crashes=1
        grep -m 3 -E "panicked at|^SUMMARY|Test unit written to" "$log" >&2 || tail -n 20 "$log" >&2
    fi
    summary+=("fuzz $target: execs=${execs:-0} seconds=$seconds crashes=$crashes")
done
printf '%s\n' "${summary[@]}"
exit "$status"
