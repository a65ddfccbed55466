#!/usr/bin/env bash
# What a release notice costs on a Redis Cluster node: classic PUBLISH (the
# cluster forwards it to every node over its bus) against sharded SPUBLISH
# (stays on the shard that owns the channel's slot), as server CPU
# (utime + stime from /proc) per message on each shard of a 3-master cluster
# with no subscribers. Figures, not a test: see docs/cluster.md.
#
# Usage: scripts/cluster-pubsub-cost.sh [SERVER_BIN] [MESSAGES]
# Needs redis-cli and redis-benchmark. Uses loopback ports 47001-47003 and
# their bus ports 48001-48003 and data dirs under ${TMPDIR:-/tmp}. Every
# server is killed by its pid on exit, and by a watchdog after 240 s.
set -u
BIN=${1:-redis-server}
N=${2:-200000}
ROOT=$(mktemp -d "${TMPDIR:-/tmp}/cluster-pubsub.XXXXXX")
pids=()
watchdog=
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  [ -n "$watchdog" ] && kill "$watchdog" 2>/dev/null
  rm -rf "$ROOT"
}
trap cleanup EXIT
for i in 1 2 3; do
  d=$ROOT/n$i; mkdir -p $d
  (cd $d && exec $BIN --bind 127.0.0.1 --port 4700$i --cluster-enabled yes --cluster-config-file nodes.conf --cluster-port 4800$i --cluster-announce-ip 127.0.0.1 --save "" --appendonly no --logfile $d/log) </dev/null >/dev/null 2>&1 &
  pids+=($!)
done
# Bounded: a watchdog kills the servers by pid after 240 s whatever happens.
( sleep 240; for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done ) </dev/null >/dev/null 2>&1 &
watchdog=$!
sleep 1
redis-cli -p 47001 cluster addslotsrange 0 5460 >/dev/null
redis-cli -p 47002 cluster addslotsrange 5461 10922 >/dev/null
redis-cli -p 47003 cluster addslotsrange 10923 16383 >/dev/null
redis-cli -p 47001 cluster meet 127.0.0.1 47002 48002 >/dev/null
redis-cli -p 47001 cluster meet 127.0.0.1 47003 48003 >/dev/null
for t in $(seq 1 200); do
  ok=0; for i in 1 2 3; do redis-cli -p 4700$i cluster info | grep -q "cluster_state:ok" && ok=$((ok+1)); done
  [ $ok = 3 ] && break; sleep 0.2
done
spids=("${pids[@]}")
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
# a channel in shard 1's slots
ch=""; for k in $(seq 1 100); do s=$(redis-cli -p 47001 cluster keyslot "ch$k"); [ "$s" -le 5460 ] && { ch="ch$k"; break; }; done
hz=$(getconf CLK_TCK)
measure() {
  local before=() after=()
  for p in "${spids[@]}"; do before+=($(cpu $p)); done
  redis-benchmark -p 47001 -n $N -c 20 -P 16 -q "$@" >/dev/null
  for p in "${spids[@]}"; do after+=($(cpu $p)); done
  local line="$*:"
  for i in 0 1 2; do line="$line shard$((i+1)) $(( (after[i]-before[i]) * 1000000 / hz * 1000 / N ))ns/msg"; done
  echo "$line"
}
for round in 1 2; do
  measure PUBLISH $ch x
  measure SPUBLISH $ch x
done
