#!/usr/bin/env bash
# Installs what the test suite needs, when missing, on a Debian machine:
# redis-server and redis-cli (apt), openssl (apt; the TLS tests make their
# certificates with it), rustfmt and clippy (rustup), cargo-nextest.
# With --demo, only what `make demo` needs: redis-server (a newcomer watching
# the demo should not pay for the test tools).
# Idempotent; prints nothing when everything is already there.
set -euo pipefail

CARGO="${CARGO:-cargo}"

SCRIPT_NAME=ensure-deps
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
    if ! command -v apt-get >/dev/null 2>&1; then
        log "redis-server/redis-cli missing and apt-get not available: install Redis >= 6 yourself"
        exit 1
    fi
    log "installing redis-server and redis-tools"
    apt_install redis-server redis-tools >/dev/null
fi

if [ "${1:-}" = --demo ]; then
    exit 0
fi

if ! command -v openssl >/dev/null 2>&1; then
    if ! command -v apt-get >/dev/null 2>&1; then
        log "openssl missing and apt-get not available: install it yourself"
        exit 1
    fi
    log "installing openssl"
    apt_install openssl >/dev/null
fi

# `cargo fmt` and `cargo clippy` are rustup components on a rustup toolchain.
for component in rustfmt clippy; do
    subcommand="${component/rustfmt/fmt}"
    if ! "$CARGO" "$subcommand" --version >/dev/null 2>&1; then
        if command -v rustup >/dev/null 2>&1; then
            log "installing rustup component $component"
            rustup component add "$component" >/dev/null
        else
            log "cargo $subcommand is missing and rustup is not available"
            exit 1
        fi
    fi
done

if ! "$CARGO" nextest --version >/dev/null 2>&1; then
    log "installing cargo-nextest"
    "$CARGO" install cargo-nextest --locked --quiet
fi

# A full `make test` builds about 6 GiB (debug, release, Valkey, harness
# data). Say so up front when the disk is shorter than that, rather than let a
# build die later of "No space left on device".
free_kib=$(df -Pk . | awk 'NR == 2 { print $4 }')
if [ -n "$free_kib" ] && [ "$free_kib" -lt $((6 * 1024 * 1024)) ]; then
    log "warning: only $((free_kib / 1024)) MiB free on this disk; a full build needs about 6 GiB"
fi
