#!/usr/bin/env bash
# Prints which server the real-server harness runs, for example
# "Valkey 9.1.2 (/work/redlock/target/valkey/bin/valkey-server)".
#
# Usage: scripts/which-server.sh [BIN]
#
# BIN defaults to what the harness (redlock-tests) runs: $REDLOCK_SERVER_BIN,
# else $REDIS_SERVER_BIN, else redis-server from PATH. Fails if it cannot run.
set -euo pipefail

bin="${1:-${REDLOCK_SERVER_BIN:-${REDIS_SERVER_BIN:-redis-server}}}"
if ! path="$(command -v -- "$bin")"; then
    printf 'which-server: %s not found (run make deps, or set REDLOCK_SERVER_BIN)\n' "$bin" >&2
    exit 1
fi
case "$path" in /*) ;; *) path="$PWD/${path#./}" ;; esac
# "Valkey server v=9.1.2 sha=... malloc=libc ..." -> "Valkey 9.1.2".
version="$("$path" --version)"
name="$(printf '%s\n' "$version" | sed -n 's/^\([^ ]*\) server v=\([^ ]*\).*/\1 \2/p')"
if [ -z "$name" ]; then
    printf 'which-server: %s --version answered: %s\n' "$path" "$version" >&2
    exit 1
fi
printf '%s (%s)\n' "$name" "$path"
