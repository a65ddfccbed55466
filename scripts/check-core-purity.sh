#!/usr/bin/env bash
# The sans-IO promise of redlock-core, checked: no async runtime, no Redis
# client, no sockets among its normal dependencies, and no clock reads or OS
# randomness in its source (its tests may use them).
set -euo pipefail
CARGO="${CARGO:-cargo}"
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if deps=$("$CARGO" tree -p redlock-core -e normal --prefix none | grep -E '^(tokio|redis|mio|socket2|getrandom) '); then
    echo "redlock-core must not depend on these: $deps" >&2
    exit 1
fi
# Doc comments (examples run as doctests) may use the clock; code may not.
if hits=$(grep -rnE 'Instant::now|SystemTime::now|thread_rng|rand::rng\(|OsRng|SysRng|std::net|std::thread::sleep' redlock-core/src \
    | grep -vE '^[^:]+:[0-9]+:[[:space:]]*//'); then
    echo "redlock-core reads the clock, the OS RNG or the network:" >&2
    echo "$hits" >&2
    exit 1
fi
