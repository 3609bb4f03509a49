#!/usr/bin/env bash
# Prints the path of a Python interpreter that has the peers of the benchmark
# (Ray and Celery, bench/peers/requirements.txt) on stdout, one line,
# installing them into <repo>/.bench-peers/venv if they are not there yet,
# and makes sure `redis-server` (Celery's broker) is installed: with apt-get
# when missing (as root, or through sudo). Everything else goes to stderr.
#
# $SWARM_PEERS_PYTHON, if set, is used as it is (it must import ray and
# celery). Safe to run concurrently: the install runs under an flock.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_root="$(cd "$here/../.." && pwd)"
venv="$repo_root/.bench-peers/venv"

log() { echo "peers/setup.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

have_peers() {
    "$1" -c 'import ray, celery, redis' >/dev/null 2>&1
}

ensure_redis() {
    command -v redis-server >/dev/null && return 0
    log "redis-server is missing; installing Debian's package"
    local sudo=()
    if [[ "$(id -u)" != 0 ]]; then
        command -v sudo >/dev/null || die "redis-server is missing and neither root nor sudo is available: install it (apt-get install redis-server)"
        sudo=(sudo)
    fi
    command -v apt-get >/dev/null || die "redis-server is missing and there is no apt-get: install Redis >= 6 on PATH"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-server >&2 \
        || { "${sudo[@]}" apt-get update -q >&2 && "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-server >&2; } \
        || die "could not install redis-server"
    # The benchmark starts a redis-server of its own on a free port; a system
    # service the package may have started on 6379 is not used.
    command -v redis-server >/dev/null || die "redis-server is still not on PATH"
}

ensure_redis

if [[ -n "${SWARM_PEERS_PYTHON:-}" ]]; then
    have_peers "$SWARM_PEERS_PYTHON" || die "SWARM_PEERS_PYTHON=$SWARM_PEERS_PYTHON cannot import ray, celery and redis"
    echo "$SWARM_PEERS_PYTHON"
    exit 0
fi

mkdir -p "$repo_root/.bench-peers"
exec 9>"$repo_root/.bench-peers/.lock"
flock 9
if ! have_peers "$venv/bin/python"; then
    python="$(command -v python3 || true)"
    [[ -n "$python" ]] || die "python3 is not installed"
    log "installing $(grep -v '^#' "$here/requirements.txt" | tr '\n' ' ')into $venv"
    rm -rf "$venv"
    "$python" -m venv "$venv" >&2 || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$here/requirements.txt" >&2 \
        || die "pip could not install the peers"
    have_peers "$venv/bin/python" || die "the peers do not import after install"
fi
echo "$venv/bin/python"
