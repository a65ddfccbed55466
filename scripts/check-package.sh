#!/usr/bin/env bash
# What is published is what the crates claim: the declared minimum Rust
# version is a compiler this run builds with, and each published crate's
# package holds its README and both licence files. `--full` also builds the
# packaged crates on their own (`cargo package`), as crates.io users would.
set -euo pipefail
CARGO="${CARGO:-cargo}"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
crates=(redlock-core redlock-tokio redlock-testkit redlock-cli)

msrv=$(sed -n 's/^rust-version = "\(.*\)"$/\1/p' Cargo.toml)
have=$(rustc --version | awk '{ print $2 }')
if [[ "$have" == "$msrv" || "$have" == "$msrv".* ]]; then
    echo "package: rust-version $msrv is the compiler of this run ($have): the whole suite checks it"
elif rustup toolchain list 2>/dev/null | grep -q "^$msrv"; then
    "$CARGO" "+$msrv" check --workspace --all-targets --locked
    echo "package: rust-version $msrv checked with cargo +$msrv check"
else
    echo "package: rust-version $msrv NOT checked in this run: this compiler is $have and toolchain $msrv is not installed (rustup toolchain install $msrv)" >&2
fi

for crate in "${crates[@]}"; do
    files=$("$CARGO" package --allow-dirty --list -p "$crate")
    for needed in README.md LICENSE-MIT LICENSE-APACHE; do
        if ! grep -qx "$needed" <<<"$files"; then
            echo "package: $crate would be published without $needed" >&2
            exit 1
        fi
    done
done
echo "package: ${crates[*]} each carry README.md, LICENSE-MIT and LICENSE-APACHE"

if [[ "${1:-}" == "--full" ]]; then
    args=()
    for crate in "${crates[@]}"; do args+=(-p "$crate"); done
    "$CARGO" package --allow-dirty "${args[@]}"
    echo "package: ${crates[*]} build from their packaged sources"
fi
