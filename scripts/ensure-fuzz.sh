#!/usr/bin/env bash
# Installs cargo-fuzz (the libFuzzer driver `make fuzz` runs) when missing,
# with `cargo install --locked` from crates.io, and checks that the nightly
# toolchain it needs is there; then prints cargo-fuzz's version. Idempotent:
# a second run installs nothing. Kept apart from ensure-deps.sh because only
# `make fuzz` needs it (nightly), not `make test`.
set -euo pipefail

CARGO="${CARGO:-cargo}"

log() { printf 'ensure-fuzz: %s\n' "$*" >&2; }

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    log "installing the nightly toolchain (cargo fuzz needs -Z sanitizer flags)"
    rustup toolchain install nightly --profile minimal
fi

if ! "$CARGO" fuzz --version >/dev/null 2>&1; then
    log "installing cargo-fuzz (a minute or two: it is built from source)"
    "$CARGO" install --locked cargo-fuzz --quiet
fi

"$CARGO" fuzz --version
