#!/usr/bin/env bash
# Benchmarks measure what users run: the bench binary's dependency graph
# (redlock-benches alone, as `make bench*` builds it, dev-dependencies of the
# core's micro-benchmarks included) turns on no test-only feature of
# redlock-tokio or redlock-core (planted bugs, the simulation hooks,
# `#insecure` TLS), nor Tokio's test-util. redlock-tests keeps them behind its
# `test-only` feature, which benches/Cargo.toml turns off.
set -euo pipefail
CARGO="${CARGO:-cargo}"
cd "$(dirname "${BASH_SOURCE[0]}")/.."

tree=$("$CARGO" tree -p redlock-benches -e features --prefix none)
if hits=$(grep -E '^(redlock-tokio|redlock-core) feature "(planted-bugs|simulation|insecure-tls)"|^tokio feature "test-util"' <<<"$tree" | sort -u); then
    echo "redlock-benches turns on test-only features:" >&2
    echo "$hits" >&2
    echo "(see: $CARGO tree -p redlock-benches -e features -i redlock-tokio)" >&2
    exit 1
fi
