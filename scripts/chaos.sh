#!/usr/bin/env bash
# Runs the chaos suite (tests/src/bin/chaos.rs): the process-level part on
# every machine, and the compose part (docker-compose.yml) where a Docker
# engine runs.
#
# Usage: scripts/chaos.sh ci|full
#
# Environment:
#   CHAOS_SEED=N          replay a run (the seed is printed at the start)
#   CHAOS_ONLY=a,b        run only these scenarios: mixed, restart_delayed,
#                         restart_empty, restart_empty_voting_at_once,
#                         clock_jump, cluster, semaphore, election,
#                         fenced_restart (the last three with their
#                         out-of-model or planted-bug scenario); each gets
#                         the seed a whole run gives it,
#                         and no compose project starts unless mixed or
#                         restart_empty is named
#   CHAOS_DOCKER=auto     auto (default): compose part when Docker answers;
#                         on: fail when it cannot run; off: skip it
#   REDIS_IMAGE=...       image for the compose masters; by default one is
#                         built from this machine's redis-server
#                         (scripts/build-redis-image.sh), since no registry
#                         may be reachable
#   CARGO=cargo
#
# The compose project gets a name of its own (redlock-chaos-<pid>) and free
# loopback ports, so a cluster started by hand with `docker compose up` is
# never touched. It is removed on exit, also on failure or Ctrl-C: its
# containers, their network namespaces (with any iptables rules and qdiscs
# the suite added inside them) and its network go with it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

mode="${1:-ci}"
case "$mode" in ci | full) ;; *)
    echo "usage: $0 ci|full" >&2
    exit 2
    ;;
esac
CARGO="${CARGO:-cargo}"
CHAOS_DOCKER="${CHAOS_DOCKER:-auto}"

log() { printf 'chaos.sh: %s\n' "$*" >&2; }

scripts/ensure-chaos-deps.sh

# The suite and its worker, in the dev profile that `make test` already built.
"$CARGO" build --quiet -p redlock-tests --bins
target_dir="$("$CARGO" metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
chaos_bin="$target_dir/debug/chaos"

compose=()
compose_args=()
project=""

cleanup() {
    local status=$?
    if [ -n "$project" ]; then
        # Paused containers cannot be stopped: let them go first.
        for id in $(docker ps -q --filter "label=com.docker.compose.project=$project" 2>/dev/null); do
            docker unpause "$id" >/dev/null 2>&1 || true
        done
        "${compose[@]}" -p "$project" -f docker-compose.yml down --volumes --remove-orphans \
            --timeout 1 >/dev/null 2>&1 || true
        # Belt and braces, should `down` itself have failed.
        for id in $(docker ps -aq --filter "label=com.docker.compose.project=$project" 2>/dev/null); do
            docker rm -f "$id" >/dev/null 2>&1 || true
        done
        docker network rm "${project}_redlock" >/dev/null 2>&1 || true
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The compose part runs mixed and restart_empty only: no project to start
# when CHAOS_ONLY names neither.
compose_wanted=true
if [ -n "${CHAOS_ONLY:-}" ] && ! [[ ",${CHAOS_ONLY// /}," =~ ,(mixed|restart_empty), ]]; then
    compose_wanted=false
fi

docker_ok=false
if $compose_wanted && [ "$CHAOS_DOCKER" != off ] && command -v docker >/dev/null 2>&1 &&
    docker info >/dev/null 2>&1; then
    if docker compose version >/dev/null 2>&1; then
        compose=(docker compose)
    elif command -v docker-compose >/dev/null 2>&1 && docker-compose version >/dev/null 2>&1; then
        compose=(docker-compose)
    fi
    for tool in nsenter iptables; do
        command -v "$tool" >/dev/null 2>&1 || compose=()
    done
    [ "${#compose[@]}" -gt 0 ] && docker_ok=true
fi
if ! $compose_wanted; then
    log "compose part skipped: CHAOS_ONLY=$CHAOS_ONLY names none of its scenarios (mixed, restart_empty)"
elif ! $docker_ok; then
    if [ "$CHAOS_DOCKER" = on ]; then
        log "CHAOS_DOCKER=on but Docker, docker compose/docker-compose, nsenter or iptables is missing"
        exit 1
    fi
    log "compose part skipped: no Docker engine, compose command, nsenter or iptables (CHAOS_DOCKER=$CHAOS_DOCKER)"
fi

# True when nothing listens on 127.0.0.1:$1.
port_free() {
    ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

if $docker_ok; then
    export REDIS_IMAGE="${REDIS_IMAGE:-$(scripts/build-redis-image.sh)}"
    # Five free ports below the kernel's ephemeral range, where the test
    # harness's own servers live.
    ports=()
    base=$((17000 + (($$ % 180) * 5)))
    for ((p = base; p < base + 1000 && ${#ports[@]} < 5; p++)); do
        port_free "$p" && ports+=("$p")
    done
    if [ "${#ports[@]}" -lt 5 ]; then
        log "no 5 free loopback ports from $base"
        exit 1
    fi
    project="redlock-chaos-$$"
    export REDIS1_PORT="${ports[0]}" REDIS2_PORT="${ports[1]}" REDIS3_PORT="${ports[2]}" \
        REDIS4_PORT="${ports[3]}" REDIS5_PORT="${ports[4]}"
    log "starting compose project $project (${compose[*]}, image $REDIS_IMAGE, ports ${ports[*]})"
    "${compose[@]}" -p "$project" -f docker-compose.yml up -d --quiet-pull >/dev/null 2>&1 ||
        "${compose[@]}" -p "$project" -f docker-compose.yml up -d
    for port in "${ports[@]}"; do
        for ((i = 0; i < 300; i++)); do
            if [ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ]; then
                break
            fi
            sleep 0.1
        done
    done
    compose_args=(--compose "$project" --ports "$(
        IFS=,
        echo "${ports[*]}"
    )")
fi

set +e
"$chaos_bin" "--$mode" "${compose_args[@]}"
status=$?
set -e
exit "$status"
