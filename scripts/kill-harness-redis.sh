#!/usr/bin/env bash
# Kills server processes (redis-server, valkey-server) left behind by the
# test harness (redlock-tests) and removes their data dirs.
#
# Usage: scripts/kill-harness-redis.sh HARNESS_ROOT
#
# The harness runs every server with its data dir, HARNESS_ROOT/<test pid>-<n>,
# as working directory. A process is killed only if it is named redis-server
# or valkey-server (or as the binary in $REDLOCK_SERVER_BIN), its working
# directory is such a data dir, and the test process <test pid> that started
# it no longer exists. Servers started any other way, and servers of a test
# run still in progress, are never touched.
set -euo pipefail

root="${1:?usage: $0 HARNESS_ROOT}"
[ -d "$root" ] || exit 0
root="$(cd "$root" && pwd -P)"

# The owning test pid of a data dir path, or nothing if the name does not fit.
owner_of() {
    local name="${1##*/}"
    local owner="${name%%-*}"
    case "$owner" in '' | *[!0-9]*) return 1 ;; esac
    printf '%s' "$owner"
}

# Process names as /proc/<pid>/comm shows them: cut to 15 bytes.
names=(redis-server valkey-server)
configured="${REDLOCK_SERVER_BIN:-${REDIS_SERVER_BIN:-}}"
[ -n "$configured" ] && names+=("$(basename "$configured" | cut -b1-15)")

is_server_name() {
    local name
    for name in "${names[@]}"; do
        [ "$1" = "$name" ] && return 0
    done
    return 1
}

killed=0
for proc in /proc/[0-9]*; do
    comm=""
    read -r comm 2>/dev/null <"$proc/comm" || continue
    is_server_name "$comm" || continue
    cwd="$(readlink "$proc/cwd" 2>/dev/null)" || continue
    [ "${cwd%/*}" = "$root" ] || continue
    owner="$(owner_of "$cwd")" || continue
    [ -d "/proc/$owner" ] && continue
    pid="${proc#/proc/}"
    if kill -KILL "$pid" 2>/dev/null; then
        printf 'kill-harness-redis: killed leftover %s %s in %s\n' "$comm" "$pid" "$cwd" >&2
        killed=$((killed + 1))
    fi
done

for dir in "$root"/*-*; do
    [ -d "$dir" ] || continue
    owner="$(owner_of "$dir")" || continue
    [ -d "/proc/$owner" ] && continue
    rm -rf -- "$dir"
done

if [ "$killed" -gt 0 ]; then
    printf 'kill-harness-redis: %d leftover server(s) killed\n' "$killed" >&2
fi
