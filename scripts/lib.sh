# Shared by the scripts/ensure-*.sh installers: source it after setting
# SCRIPT_NAME (the prefix of every message).

log() { printf '%s: %s\n' "${SCRIPT_NAME:-script}" "$*" >&2; }

# Runs a command as root: directly when we are root, else through sudo.
# Fails (status 1, with a message) when neither is possible.
as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        log "need root to run '$*', and sudo is not installed"
        return 1
    fi
}

# Installs Debian packages quietly, refreshing the package lists once first.
apt_install() {
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
}
