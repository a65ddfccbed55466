#!/usr/bin/env bash
# Builds a small local Redis image from this machine's Debian `redis-server`,
# for machines that cannot pull the official image (no registry access):
#
#   scripts/build-redis-image.sh            # tag redlock/redis-debian:local
#   REDIS_IMAGE=redlock/redis-debian:local docker compose up -d
#
# The image is `FROM scratch` and holds only what the server needs to run:
# the real redis-server binary (on Debian /usr/bin/redis-server is a symlink
# to redis-check-rdb: the same binary picks its role from its name, so the
# file is copied under the name redis-server), redis-cli for health checks,
# the shared libraries `ldd` lists, the dynamic loader, and a minimal /etc
# (passwd and group with a `redis` user). No shell, no package manager.
#
# Faults that need tools (tc, iptables) are applied from the host inside the
# container's network namespace with `nsenter -t <pid> -n`, so the image stays
# minimal.
#
# Usage: scripts/build-redis-image.sh [TAG]   (default: $REDIS_IMAGE or
# redlock/redis-debian:local). Prints the tag on stdout. Idempotent: Docker's
# build cache makes a rebuild with the same binary a no-op.
set -euo pipefail

tag="${1:-${REDIS_IMAGE:-redlock/redis-debian:local}}"

log() { printf 'build-redis-image: %s\n' "$*" >&2; }

for tool in docker ldd readlink; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        log "$tool is missing"
        exit 1
    fi
done
server="$(command -v redis-server || true)"
cli="$(command -v redis-cli || true)"
if [ -z "$server" ] || [ -z "$cli" ]; then
    log "redis-server or redis-cli missing: run scripts/ensure-deps.sh first"
    exit 1
fi
# Asked under its own name: the same file run as redis-check-rdb checks RDB files.
version="$("$server" --version | sed -n 's/.* v=\([^ ]*\).*/\1/p')"
server="$(readlink -f "$server")"
cli="$(readlink -f "$cli")"

context="$(mktemp -d "${TMPDIR:-/tmp}/redlock-redis-image.XXXXXX")"
trap 'rm -rf -- "$context"' EXIT
root="$context/root"
mkdir -p "$root/usr/bin" "$root/etc" "$root/tmp" "$context/data"
chmod 1777 "$root/tmp"
cp "$server" "$root/usr/bin/redis-server"
cp "$cli" "$root/usr/bin/redis-cli"

# Every library either binary links, plus the loader, copied (symlinks
# followed) to the path the loader looks for it at.
libraries() {
    ldd "$1" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'
}
copied=0
while read -r lib; do
    [ -n "$lib" ] || continue
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
    copied=$((copied + 1))
done < <({ libraries "$server"; libraries "$cli"; } | sort -u)

cat >"$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
redis:x:999:999:redis:/data:/sbin/nologin
EOF
cat >"$root/etc/group" <<'EOF'
root:x:0:
redis:x:999:
EOF

cat >"$context/Dockerfile" <<EOF
FROM scratch
COPY root/ /
COPY --chown=999:999 data/ /data/
ENV PATH=/usr/bin
LABEL org.opencontainers.image.title="redis-server ${version} from Debian" \\
      org.opencontainers.image.description="FROM scratch: Debian's redis-server and redis-cli with their libraries, built by redlock-rs scripts/build-redis-image.sh"
WORKDIR /data
USER redis
EXPOSE 6379
CMD ["redis-server", "--protected-mode", "no"]
EOF

log "building $tag: redis-server $version, $copied libraries"
# The classic builder needs no BuildKit/buildx plugin and can build FROM
# scratch without pulling anything.
DOCKER_BUILDKIT=0 docker build --quiet --tag "$tag" "$context" >/dev/null 2>"$context/build.log" || {
    cat "$context/build.log" >&2
    log "docker build failed"
    exit 1
}

# A smoke test: the server starts and answers, as the compose file runs it.
if ! docker run --rm --network none --entrypoint redis-server "$tag" --version >/dev/null; then
    log "the image was built but redis-server does not run in it"
    exit 1
fi
printf '%s\n' "$tag"
