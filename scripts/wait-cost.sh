#!/usr/bin/env bash
# What `WAIT 1 <timeout>` after each acquire costs: one master and one
# replica on loopback; N `SET key value NX PX ttl` sent back to back, each
# followed by `WAIT 1 1000` or not, as one pipeline through redis-cli, so a
# WAIT holds back everything after it until the replica acknowledged.
# Prints wall time per acquire (a figure, not a test: on a busy machine the
# digits move, the difference is the point). See docs/guarantees.md, "What it
# guarantees" (cluster failover).
#
# Usage: scripts/wait-cost.sh [SERVER_BIN] [ACQUIRES]
# Needs redis-cli. Uses loopback ports 47011 and 47012 and a data dir under
# ${TMPDIR:-/tmp}; both servers are killed by pid on exit, and by a watchdog
# after 240 s.
set -u
BIN=${1:-redis-server}
N=${2:-20000}
ROOT=$(mktemp -d "${TMPDIR:-/tmp}/wait-cost.XXXXXX")
pids=()
watchdog=
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  [ -n "$watchdog" ] && kill "$watchdog" 2>/dev/null
  rm -rf "$ROOT"
}
trap cleanup EXIT
start() { # port [extra args]
  local port=$1; shift
  mkdir -p "$ROOT/$port"
  (cd "$ROOT/$port" && exec "$BIN" --bind 127.0.0.1 --port "$port" --save "" --appendonly no \
    --logfile "$ROOT/$port/log" "$@") </dev/null >/dev/null 2>&1 &
  pids+=($!)
}
start 47011
start 47012 --replicaof 127.0.0.1 47011
( sleep 240; for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done ) </dev/null >/dev/null 2>&1 &
watchdog=$!
for _ in $(seq 1 100); do
  redis-cli -p 47012 info replication 2>/dev/null | grep -q "master_link_status:up" && break
  sleep 0.1
done
commands() { # with_wait
  for i in $(seq 1 "$N"); do
    printf 'SET lock:%d value NX PX 10000\n' "$i"
    [ "$1" = yes ] && printf 'WAIT 1 1000\n'
  done
}
run() { # label with_wait
  commands "$2" > "$ROOT/commands"
  redis-cli -p 47011 flushall >/dev/null
  local start end
  start=$(date +%s%N)
  redis-cli -p 47011 < "$ROOT/commands" > "$ROOT/replies"
  end=$(date +%s%N)
  local acked
  acked=$(grep -c '^1$' "$ROOT/replies")
  echo "$1: $(( (end - start) / N / 1000 )) us per acquire ($N acquires, WAIT acknowledged $acked)"
}
for _ in 1 2; do
  run "SET NX PX" no
  run "SET NX PX + WAIT 1 1000" yes
done
