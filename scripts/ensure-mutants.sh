#!/usr/bin/env bash
# Installs cargo-mutants (the mutation tester `make mutants` runs) when
# missing, with `cargo install --locked` from crates.io, then prints its
# version. Idempotent: a second run installs nothing. Kept apart from
# ensure-deps.sh because only `make mutants` needs it, not `make test`.
set -euo pipefail

CARGO="${CARGO:-cargo}"

log() { printf 'ensure-mutants: %s\n' "$*" >&2; }

if ! "$CARGO" mutants --version >/dev/null 2>&1; then
    log "installing cargo-mutants (a few minutes: it is built from source)"
    "$CARGO" install --locked cargo-mutants --quiet
fi

"$CARGO" mutants --version
