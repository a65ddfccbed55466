#!/usr/bin/env bash
# Installs what the chaos suite needs beyond scripts/ensure-deps.sh, when
# missing, on a Debian machine. Idempotent; prints nothing when all is there.
#
# - cc (gcc): builds the LD_PRELOAD library that jumps a redis-server's clock
#   (libfaketime cannot run Debian's jemalloc-linked redis-server; see
#   tests/src/chaos/clock_shift.rs);
# - nsenter (util-linux), iptables, tc (iproute2): faults inside a
#   container's network namespace, for the compose part only, so they are
#   installed only when a Docker engine answers.
#
# Nothing here is fatal: a part whose tool is missing is skipped by the suite
# and says so.
set -euo pipefail

SCRIPT_NAME=ensure-chaos-deps
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"


missing=()
command -v cc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    command -v nsenter >/dev/null 2>&1 || missing+=(util-linux)
    command -v iptables >/dev/null 2>&1 || missing+=(iptables)
    command -v tc >/dev/null 2>&1 || missing+=(iproute2)
fi
[ "${#missing[@]}" -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
    log "missing ${missing[*]} and apt-get is not available: the parts that need them are skipped"
    exit 0
fi
log "installing ${missing[*]}"
if ! as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null 2>&1; then
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 || true
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >/dev/null 2>&1 ||
        log "could not install ${missing[*]}: the parts that need them are skipped"
fi
