#!/usr/bin/env bash
# The public API of the published library crates, as `cargo public-api`
# lists it (rustdoc JSON, nightly), against the snapshots committed in
# api/: a change to the API that the snapshot does not show fails here, so
# every change to it is seen in review. UPDATE=1 rewrites the snapshots.
# Installs cargo-public-api (crates.io, a few minutes) when missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

CARGO="${CARGO:-cargo}"
log() { printf 'public-api: %s\n' "$*" >&2; }

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    log "the nightly toolchain is missing (rustdoc JSON needs it): rustup toolchain install nightly --profile minimal"
    exit 1
fi
if ! "$CARGO" public-api --version >/dev/null 2>&1; then
    log "installing cargo-public-api (built from source, a few minutes)"
    "$CARGO" install --locked cargo-public-api --quiet
fi

status=0
# The user-facing features; the simulation hooks and planted bugs are not API.
check() {
    local package=$1 features=$2 snapshot="api/$1.txt" current
    current=$(mktemp)
    "$CARGO" +nightly public-api --package "$package" --features "$features" --simplified --simplified \
        --color never > "$current" 2> >(grep -v '^\s*\(Documenting\|Compiling\|Finished\|Checking\)' >&2)
    if [ "${UPDATE:-0}" = 1 ]; then
        mv "$current" "$snapshot"
        log "$snapshot written ($(wc -l < "$snapshot") items)"
    elif ! diff -u "$snapshot" "$current"; then
        log "the public API of $package differs from $snapshot (diff above): if the change is meant, run UPDATE=1 scripts/check-public-api.sh and commit the snapshot"
        status=1
        rm -f "$current"
    else
        log "$package: $(wc -l < "$snapshot") items, as in $snapshot"
        rm -f "$current"
    fi
}
check redlock-tokio "tls,metrics,blocking"
check redlock-core ""
check redlock-testkit ""
exit $status
